"""The object store: every resource's objects, one resourceVersion counter, the event history
that watches replay, and the writes (create, replace, the patches, status subresources).
Deletion and garbage collection are in deletion.py.

Stored objects are never mutated in place: every write stores a new dict, so readers may hold
and serialize what they got without a copy.
"""

import base64
import bisect
import copy
import json
import random
import threading
import uuid

from . import crds, kinds, patch
from .clock import now
from .deletion import DeletionMixin
from .errors import ApiError, already_exists, bad_request, conflict, invalid, not_found

_SUFFIX = "bcdfghjklmnpqrstvwxz2456789"
# Fields of metadata only the server writes.
_SERVER_META = ("uid", "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds",
                "generation", "resourceVersion", "selfLink", "managedFields")


def _typed(rt, fn, *args):
    """Runs a per-kind hook; a body of the wrong shape that slipped past shape_error is the
    client's error (400), as the real server's typed decoding would make it."""
    try:
        return fn(*args)
    except (TypeError, AttributeError, KeyError, ValueError) as e:
        raise ApiError(400, f"{rt.kind} cannot be handled as a {rt.kind}: {type(e).__name__}: "
                       f"{e}", "BadRequest")


def _clean_meta(meta):
    for field in ("labels", "annotations", "finalizers", "ownerReferences"):
        if field in meta and not meta[field]:
            del meta[field]


def _spec_part(obj):
    return {k: v for k, v in obj.items() if k not in ("metadata", "status")}


class Event:
    __slots__ = ("rv", "key", "type", "obj", "old")

    def __init__(self, rv, key, type_, obj, old):
        self.rv, self.key, self.type, self.obj, self.old = rv, key, type_, obj, old


class Store(DeletionMixin):
    def __init__(self, history=10000):
        self.lock = threading.RLock()
        self.cond = threading.Condition(self.lock)
        self.rv = 0
        self.types = {}
        self.objects = {}
        self.by_uid = {}
        self.applied = {}
        self.log = []
        self.log_rvs = []
        self.history = history
        self.compacted = 0
        self.closed = False
        self.ips = kinds.ServiceIPs()
        for rt in kinds.builtin_types():
            self.add_type(rt)
        for ns in ("default", "kube-system", "kube-public", "kube-node-lease"):
            self.create(self.type("", "namespaces"), "v1", None,
                        {"metadata": {"name": ns}})

    # --- types ---------------------------------------------------------------------------

    def add_type(self, rt):
        with self.lock:
            self.types[rt.key] = rt
            self.objects.setdefault(rt.key, {})

    def type(self, group, plural):
        return self.types.get((group, plural))

    def find_type(self, group, version, plural):
        with self.lock:
            rt = self.types.get((group, plural))
            if rt and version in rt.versions and rt.versions[version].served:
                return rt
            return None

    # --- events --------------------------------------------------------------------------

    def _next_rv(self):
        self.rv += 1
        return self.rv

    def _emit(self, rt, type_, obj, old):
        self.log.append(Event(int(obj["metadata"]["resourceVersion"]), rt.key, type_, obj, old))
        self.log_rvs.append(self.log[-1].rv)
        if len(self.log) > self.history:
            drop = len(self.log) - self.history
            self.compacted = self.log_rvs[drop - 1]
            del self.log[:drop], self.log_rvs[:drop]
        self.cond.notify_all()

    def compact(self):
        """Forgets the event history, so that watches from any older version get 410."""
        with self.lock:
            if self.log:
                self.compacted = self.log_rvs[-1]
            self.log, self.log_rvs = [], []
            self.cond.notify_all()

    def events_after(self, rv):
        """Events newer than rv, or None when history older than rv+1 is gone."""
        with self.lock:
            if rv < self.compacted:
                return None
            return self.log[bisect.bisect_right(self.log_rvs, rv):]

    def wait(self, rv, timeout):
        with self.lock:
            if not self.closed and (not self.log_rvs or self.log_rvs[-1] <= rv):
                self.cond.wait(timeout)

    def close(self):
        with self.lock:
            self.closed = True
            self.cond.notify_all()

    # --- reads ---------------------------------------------------------------------------

    @staticmethod
    def view(rt, version, obj):
        if obj.get("apiVersion") == rt.api_version(version):
            return obj
        out = dict(obj)
        out["apiVersion"] = rt.api_version(version)
        return out

    def _get(self, rt, ns, name):
        return self.objects[rt.key].get((ns if rt.namespaced else None, name))

    def get(self, rt, version, ns, name):
        with self.lock:
            obj = self._get(rt, ns, name)
            if obj is None:
                raise not_found(rt, name)
            return self.view(rt, version, obj)

    def list(self, rt, version, ns, match, limit=0, cont=None):
        """Returns (items, resourceVersion, continue token, remaining count)."""
        with self.lock:
            keys = sorted(k for k in self.objects[rt.key]
                          if ns is None or not rt.namespaced or k[0] == ns)
            rv = self.rv
            objs = self.objects[rt.key]
            start = None
            if cont:
                try:
                    token = json.loads(base64.urlsafe_b64decode(cont.encode()))
                    start = (token["k"][0], token["k"][1])
                except (ValueError, KeyError, TypeError, IndexError):
                    raise bad_request("continue key is not valid: invalid continue token")
            items = []
            matched = [k for k in keys if (start is None or (k[0] or "", k[1]) >
                                           (start[0] or "", start[1])) and match(objs[k])]
            for k in matched:
                items.append(self.view(rt, version, objs[k]))
                if limit and len(items) >= limit:
                    break
            token, remaining = "", None
            if limit and len(matched) > len(items):
                last = matched[len(items) - 1]
                token = base64.urlsafe_b64encode(json.dumps(
                    {"k": [last[0] or "", last[1]], "rv": rv}).encode()).decode()
                remaining = len(matched) - len(items)
            return items, rv, token, remaining

    def current(self, rt):
        with self.lock:
            return list(self.objects[rt.key].values()), self.rv

    # --- writes --------------------------------------------------------------------------

    def _check_body(self, rt, version, ns, body, name=None):
        if not isinstance(body, dict):
            raise bad_request("the body of the request was in an unknown format")
        if body.get("kind") not in (None, "", rt.kind):
            raise bad_request(f'the object provided is unrecognized (kind "{body.get("kind")}" '
                              f"sent to {rt.resource_label()})")
        if body.get("apiVersion") not in (None, "", rt.api_version(version)):
            raise bad_request(f'the API version in the data ({body.get("apiVersion")}) does not '
                              f"match the expected API version ({rt.api_version(version)})")
        meta = body.get("metadata", {})
        if meta is None:
            meta = {}
        if not isinstance(meta, dict):
            raise bad_request("metadata must be an object")
        if rt.namespaced and meta.get("namespace") not in (None, "", ns):
            raise bad_request("the namespace of the provided object does not match the "
                              "namespace sent on the request")
        if name is not None and meta.get("name") not in (None, "", name):
            raise bad_request("the name of the object "
                              f"({meta.get('name')}) does not match the name on the URL ({name})")
        return meta

    def _validate(self, rt, version, obj, strict):
        causes = _typed(rt, kinds.validate_meta, rt, obj) + _typed(rt, kinds.checks, rt, obj)
        if rt.key == crds.KEY:
            causes += _typed(rt, crds.crd_checks, obj)
        causes += crds.custom_resource_causes(rt, version, obj, strict)
        if causes:
            raise invalid(rt, obj["metadata"].get("name", ""), causes)

    def _namespace_open(self, rt, ns, name):
        if not rt.namespaced:
            return
        nsobj = self.objects[("", "namespaces")].get((None, ns))
        if nsobj is None:
            raise ApiError(404, f'namespaces "{ns}" not found',
                           details={"name": ns, "kind": "namespaces"})
        if nsobj["metadata"].get("deletionTimestamp"):
            raise ApiError(403, f'{rt.resource_label()} "{name}" is forbidden: unable to create '
                           f"new content in namespace {ns} because it is being terminated",
                           "Forbidden")

    def create(self, rt, version, ns, body, dry_run=False, strict=False, manager=None):
        with self.lock:
            meta = self._check_body(rt, version, ns, body)
            obj = copy.deepcopy(body)
            obj["apiVersion"], obj["kind"] = rt.api_version(version), rt.kind
            meta = obj["metadata"] = dict(meta)
            kinds.shape_error(rt, obj)
            for field in _SERVER_META:
                meta.pop(field, None)
            if rt.namespaced:
                meta["namespace"] = ns
            else:
                meta.pop("namespace", None)
            if not meta.get("name"):
                if not meta.get("generateName"):
                    raise invalid(rt, "", [("metadata.name", "Required value: name or "
                                            "generateName is required")])
                for _ in range(100):
                    meta["name"] = meta["generateName"] + "".join(
                        random.choice(_SUFFIX) for _ in range(5))
                    if self._get(rt, ns, meta["name"]) is None:
                        break
            self._namespace_open(rt, ns, meta["name"])
            meta["uid"] = str(uuid.uuid4())
            meta["creationTimestamp"] = now()
            meta["generation"] = 1
            if rt.has_status(version):
                obj.pop("status", None)
            _typed(rt, kinds.on_create, rt, obj, self.ips)
            if rt.key == crds.KEY:
                _typed(rt, crds.on_write, obj)
            _clean_meta(meta)
            self._validate(rt, version, obj, strict)
            if self._get(rt, ns, meta["name"]) is not None:
                raise already_exists(rt, meta["name"])
            if dry_run:
                meta["resourceVersion"] = str(self.rv)
                return obj
            meta["resourceVersion"] = str(self._next_rv())
            self.objects[rt.key][(meta.get("namespace"), meta["name"])] = obj
            self.by_uid[meta["uid"]] = rt.key
            if manager is not None:
                self.applied[(meta["uid"], manager[0], "")] = manager[1]
            self._emit(rt, "ADDED", obj, None)
            self._after_write(rt, obj, None)
            # The garbage collector removes an object whose owners are all gone, also one
            # created after they went (a controller racing its owner's deletion).
            owners = [r.get("uid") for r in meta.get("ownerReferences") or []]
            if owners and not any(u in self.by_uid for u in owners):
                self._delete(rt, obj, None, "Background")
            return obj

    def replace(self, rt, version, ns, name, body, sub=None, dry_run=False, strict=False):
        with self.lock:
            self._check_body(rt, version, ns, body, name)
            old = self._get(rt, ns, name)
            if old is None:
                raise not_found(rt, name)
            want = (body.get("metadata") or {}).get("resourceVersion")
            if want and want != old["metadata"]["resourceVersion"]:
                raise conflict(rt, name, "the object has been modified; please apply your "
                               "changes to the latest version and try again")
            return self._update(rt, version, old, copy.deepcopy(body), sub, dry_run, strict)

    def patch(self, rt, version, ns, name, kind, body, sub=None, dry_run=False, strict=False,
              manager=None):
        with self.lock:
            old = self._get(rt, ns, name)
            if kind == "apply":
                self._check_body(rt, version, ns, body, name)
                manager = manager or ""
                if old is None:
                    if sub:
                        raise not_found(rt, name)
                    body = copy.deepcopy(body)
                    body.setdefault("metadata", {})["name"] = name
                    return self.create(rt, version, ns, body, dry_run, strict,
                                       (manager, patch.applied_paths(body)))
                want = (body.get("metadata") or {}).get("resourceVersion")
                if want and want != old["metadata"]["resourceVersion"]:
                    raise conflict(rt, name, "the object has been modified; please apply your "
                                   "changes to the latest version and try again")
                key = (old["metadata"]["uid"], manager, sub or "")
                new, paths = patch.server_side_apply(old, body, self.applied.get(key))
                result = self._update(rt, version, old, new, sub, dry_run, strict)
                if not dry_run and result["metadata"]["uid"] in self.by_uid:
                    self.applied[key] = paths
                return result
            if old is None:
                raise not_found(rt, name)
            if kind == "json":
                new = patch.json_patch(old, body)
            elif kind == "merge":
                if not isinstance(body, dict):
                    raise bad_request("a merge patch must be a JSON object")
                new = patch.merge_patch(old, body)
            elif kind == "strategic":
                if rt.crd:
                    raise ApiError(415, "strategic merge patch is not supported for custom "
                                   "resources", "UnsupportedMediaType")
                if not isinstance(body, dict):
                    raise bad_request("a strategic merge patch must be a JSON object")
                new = patch.strategic_merge(old, body)
            else:
                raise ApiError(415, f"unsupported patch type {kind}", "UnsupportedMediaType")
            if not isinstance(new, dict) or not isinstance(new.get("metadata", {}), dict):
                raise bad_request("the patch made the object or its metadata something other "
                                  "than an object")
            rv = (new.get("metadata") or {}).get("resourceVersion")
            if rv is not None and rv != old["metadata"]["resourceVersion"]:
                raise conflict(rt, name, "the object has been modified; please apply your "
                               "changes to the latest version and try again")
            return self._update(rt, version, old, new, sub, dry_run, strict)

    def _update(self, rt, version, old, new, sub, dry_run, strict):
        if not isinstance(new.get("metadata"), dict):
            new["metadata"] = {}
        meta = new["metadata"]
        for field in _SERVER_META + ("name", "namespace", "generateName"):
            if field in old["metadata"]:
                meta[field] = old["metadata"][field]
            else:
                meta.pop(field, None)
        new["apiVersion"], new["kind"] = rt.api_version(version), rt.kind
        kinds.shape_error(rt, new)
        if rt.has_status(version):
            if sub == "status":
                status = new.get("status")
                new = copy.deepcopy(old)
                new["apiVersion"] = rt.api_version(version)
                if status is None:
                    new.pop("status", None)
                else:
                    new["status"] = status
                meta = new["metadata"]
            elif "status" in old:
                new["status"] = copy.deepcopy(old["status"])
            else:
                new.pop("status", None)
        _typed(rt, kinds.on_update, rt, new, old)
        if rt.key == crds.KEY:
            _typed(rt, crds.on_write, new)
        _clean_meta(meta)
        self._validate(rt, version, new, strict)
        if _spec_part(new) != _spec_part(self.view(rt, version, old)):
            meta["generation"] = old["metadata"].get("generation", 1) + 1
        if new == self.view(rt, version, old) or dry_run:
            return new
        # Graceful pod deletion waits for the kubelet, not for finalizers.
        if (meta.get("deletionTimestamp") and not meta.get("finalizers")
                and not meta.get("deletionGracePeriodSeconds")):
            return self._remove(rt, new, old)
        meta["resourceVersion"] = str(self._next_rv())
        self.objects[rt.key][(meta.get("namespace"), meta["name"])] = new
        self._emit(rt, "MODIFIED", new, old)
        self._after_write(rt, new, old)
        return new

    def _store_meta(self, rt, obj, old, **changes):
        new = dict(obj)
        new["metadata"] = dict(obj["metadata"], **changes)
        _clean_meta(new["metadata"])
        new["metadata"]["resourceVersion"] = str(self._next_rv())
        self.objects[rt.key][(new["metadata"].get("namespace"), new["metadata"]["name"])] = new
        self._emit(rt, "MODIFIED", new, old)
        return new

    def _after_write(self, rt, obj, old):
        if rt.key == crds.KEY:
            crt = crds.crd_resource_type(obj)
            if old is not None:
                prev = old["spec"]["names"]["plural"], old["spec"]["group"]
                if prev != (crt.plural, crt.group):
                    self._drop_type(self.types.get((prev[1], prev[0])))
            self.add_type(crt)

    def _drop_type(self, rt):
        if rt is None or not rt.crd:
            return
        for obj in list(self.objects.get(rt.key, {}).values()):
            self._remove(rt, obj, obj, gc=True)
        self.types.pop(rt.key, None)
        self.objects.pop(rt.key, None)

    # --- pod binding ---------------------------------------------------------------------

    def bind(self, rt, ns, name, body):
        with self.lock:
            obj = self._get(rt, ns, name)
            if obj is None:
                raise not_found(rt, name)
            target = body.get("target") if isinstance(body, dict) else None
            node = target.get("name") if isinstance(target, dict) else None
            if not node or not isinstance(node, str):
                raise bad_request("a binding needs target.name")
            if (obj.get("spec") or {}).get("nodeName"):
                raise conflict(rt, name, f"pod {name} is already assigned to node "
                               f"\"{obj['spec']['nodeName']}\"")
            new = copy.deepcopy(obj)
            new["spec"]["nodeName"] = node
            new.setdefault("status", {}).setdefault("conditions", []).append(
                {"type": "PodScheduled", "status": "True", "lastProbeTime": None,
                 "lastTransitionTime": now()})
            new["metadata"]["resourceVersion"] = str(self._next_rv())
            self.objects[rt.key][(ns, name)] = new
            self._emit(rt, "MODIFIED", new, obj)
            return new
