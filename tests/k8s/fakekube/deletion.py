"""Deletion: finalizers, graceful pod deletion, namespaces that empty themselves, and the
garbage collection of objects whose owners are gone. A mixin of the Store, run under its lock.
"""

from . import crds
from .clock import now
from .errors import bad_request, conflict, not_found


class DeletionMixin:
    def delete(self, rt, version, ns, name, grace=None, propagation=None, preconditions=None,
               dry_run=False):
        """Returns the object when its deletion is pending, else None once it is gone."""
        with self.lock:
            obj = self._get(rt, ns, name)
            if obj is None:
                raise not_found(rt, name)
            pre = preconditions if isinstance(preconditions, dict) else {}
            if pre.get("uid") and pre["uid"] != obj["metadata"]["uid"]:
                raise conflict(rt, name, f'Precondition failed: UID in precondition: '
                               f'{pre["uid"]}, UID in object meta: {obj["metadata"]["uid"]}')
            if pre.get("resourceVersion") and pre["resourceVersion"] != \
                    obj["metadata"]["resourceVersion"]:
                raise conflict(rt, name, "Precondition failed: resourceVersion mismatch")
            if propagation not in (None, "", "Orphan", "Background", "Foreground"):
                raise bad_request(f"unsupported propagationPolicy {propagation!r}")
            if dry_run:
                return self.view(rt, version, obj)
            out = self._delete(rt, obj, grace, propagation)
            return None if out is None else self.view(rt, version, out)

    def _delete(self, rt, obj, grace=None, propagation=None):
        meta = obj["metadata"]
        if rt.key == ("", "namespaces"):
            return self._delete_namespace(rt, obj)
        if rt.key == ("", "pods"):
            pending = self._delete_pod(rt, obj, grace)
            if pending is not None:
                return pending
        finalizers = list(meta.get("finalizers") or [])
        if propagation == "Orphan":
            self._orphan(meta["uid"])
        elif propagation == "Foreground" and self._dependents(meta["uid"]):
            if "foregroundDeletion" not in finalizers:
                finalizers.append("foregroundDeletion")
        if finalizers:
            if (not meta.get("deletionTimestamp") or finalizers != meta.get("finalizers")
                    or meta.get("deletionGracePeriodSeconds")):
                obj = self._store_meta(rt, obj, obj, finalizers=finalizers,
                                       deletionTimestamp=meta.get("deletionTimestamp") or now(),
                                       deletionGracePeriodSeconds=0)
            if "foregroundDeletion" in finalizers:
                for dep_rt, dep in self._dependents(meta["uid"]):
                    self._delete(dep_rt, dep, None, "Background")
            return obj
        self._remove(rt, obj, obj)
        return None

    def _delete_pod(self, rt, obj, grace):
        """Graceful deletion: a pod on a node keeps running until its kubelet stops it."""
        meta, spec = obj["metadata"], obj.get("spec") or {}
        if grace is None:
            grace = meta.get("deletionGracePeriodSeconds",
                             spec.get("terminationGracePeriodSeconds", 30))
        if not isinstance(grace, int):
            grace = 30
        phase = (obj.get("status") or {}).get("phase")
        if not spec.get("nodeName") or phase in ("Succeeded", "Failed") or grace <= 0:
            return None
        if meta.get("deletionTimestamp") and grace >= meta.get("deletionGracePeriodSeconds", 0):
            return obj
        return self._store_meta(rt, obj, obj, deletionTimestamp=now(grace),
                                deletionGracePeriodSeconds=grace)

    def _delete_namespace(self, rt, obj):
        name = obj["metadata"]["name"]
        if not obj["metadata"].get("deletionTimestamp"):
            new = dict(obj, status={"phase": "Terminating"})
            new["metadata"] = dict(obj["metadata"])
            obj = self._store_meta(rt, new, obj, deletionTimestamp=now(),
                                   deletionGracePeriodSeconds=0)
            for key, objs in list(self.objects.items()):
                crt = self.types[key]
                if crt.namespaced:
                    for (ns, _), child in list(objs.items()):
                        if ns == name and (ns, child["metadata"]["name"]) in objs:
                            self._delete(crt, child, None, "Background")
        return self._namespace_done(name) or obj

    def _namespace_done(self, name):
        nsobj = self.objects[("", "namespaces")].get((None, name))
        if nsobj is None or not nsobj["metadata"].get("deletionTimestamp"):
            return None
        for key, objs in self.objects.items():
            if self.types[key].namespaced and any(k[0] == name for k in objs):
                return None
        self._remove(self.types[("", "namespaces")], nsobj, nsobj)
        return None

    def _dependents(self, uid):
        out = []
        for key, objs in self.objects.items():
            for obj in objs.values():
                if any(ref.get("uid") == uid for ref in obj["metadata"].get("ownerReferences")
                       or []):
                    out.append((self.types[key], obj))
        return out

    def _orphan(self, uid):
        for rt, dep in self._dependents(uid):
            refs = [r for r in dep["metadata"]["ownerReferences"] if r.get("uid") != uid]
            self._store_meta(rt, dep, dep, ownerReferences=refs)

    def _remove(self, rt, obj, old, gc=True):
        meta = dict(obj["metadata"])
        meta["resourceVersion"] = str(self._next_rv())
        final = dict(obj, metadata=meta)
        self.objects[rt.key].pop((meta.get("namespace"), meta["name"]), None)
        self.by_uid.pop(meta["uid"], None)
        for key in [k for k in self.applied if k[0] == meta["uid"]]:
            del self.applied[key]
        self._emit(rt, "DELETED", final, old)
        if rt.key == crds.KEY:
            self._drop_type(self.types.get((obj["spec"]["group"],
                                            obj["spec"]["names"]["plural"])))
        if gc:
            for dep_rt, dep in self._dependents(meta["uid"]):
                owners = [r.get("uid") for r in dep["metadata"]["ownerReferences"]]
                if not any(u in self.by_uid for u in owners):
                    current = self._get(dep_rt, dep["metadata"].get("namespace"),
                                        dep["metadata"]["name"])
                    if current is not None:
                        self._delete(dep_rt, current, None, "Background")
        for ref in meta.get("ownerReferences") or []:
            self._foreground_done(ref.get("uid"))
        if rt.namespaced and meta.get("namespace"):
            self._namespace_done(meta["namespace"])
        return final

    def _foreground_done(self, uid):
        key = self.by_uid.get(uid)
        if key is None:
            return
        owner = next((o for o in self.objects[key].values() if o["metadata"]["uid"] == uid), None)
        if owner is None or "foregroundDeletion" not in (owner["metadata"].get("finalizers") or []):
            return
        if self._dependents(uid):
            return
        rest = [f for f in owner["metadata"]["finalizers"] if f != "foregroundDeletion"]
        rt = self.types[key]
        if rest:
            self._store_meta(rt, owner, owner, finalizers=rest)
        else:
            self._remove(rt, owner, owner)

    def delete_collection(self, rt, version, ns, match, grace=None, propagation=None):
        with self.lock:
            for obj in [o for k, o in sorted(self.objects[rt.key].items())
                        if (ns is None or not rt.namespaced or k[0] == ns) and match(o)]:
                current = self._get(rt, obj["metadata"].get("namespace"),
                                    obj["metadata"]["name"])
                if current is not None:
                    self._delete(rt, current, grace, propagation)
