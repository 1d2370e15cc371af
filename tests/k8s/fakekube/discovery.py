"""Discovery documents, the OpenAPI v3 index kubectl consults, and server-side tables."""

import hashlib
import json

from .clock import age
from .kinds import VERBS
from .selection import field_value

VERSION = {
    "major": "1", "minor": "32", "gitVersion": "v1.32.0", "gitCommit": "0" * 40,
    "gitTreeState": "clean", "buildDate": "2025-01-01T00:00:00Z", "goVersion": "go1.23.0",
    "compiler": "gc", "platform": "linux/amd64",
}


def _group_versions(store):
    """{group: [versions]} for every served type, core group included as ''."""
    out = {}
    for rt in list(store.types.values()):
        for v in rt.served():
            versions = out.setdefault(rt.group, [])
            if v.name not in versions:
                versions.append(v.name)
    return out


def _preferred(versions):
    def rank(v):
        stable = "alpha" not in v and "beta" not in v
        digits = "".join(c for c in v[1:] if c.isdigit()) or "0"
        return (stable, "beta" in v, int(digits[:3]))
    return max(versions, key=rank)


def api_versions(host):
    return {"kind": "APIVersions", "versions": ["v1"],
            "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": host}]}


def _api_group(group, versions):
    entries = [{"groupVersion": f"{group}/{v}", "version": v} for v in versions]
    pref = _preferred(versions)
    return {"name": group, "versions": entries,
            "preferredVersion": {"groupVersion": f"{group}/{pref}", "version": pref}}


def api_group_list(store):
    groups = [_api_group(g, vs) for g, vs in sorted(_group_versions(store).items()) if g]
    return {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}


def api_group(store, group):
    versions = _group_versions(store).get(group)
    if not versions:
        return None
    return dict(_api_group(group, versions), kind="APIGroup", apiVersion="v1")


def resource_list(store, group, version):
    resources = []
    for rt in sorted(store.types.values(), key=lambda t: t.plural):
        if rt.group != group or version not in rt.versions or not rt.versions[version].served:
            continue
        entry = {"name": rt.plural, "singularName": rt.singular, "namespaced": rt.namespaced,
                 "kind": rt.kind, "verbs": VERBS,
                 "storageVersionHash": hashlib.sha256(
                     f"{group}/{rt.plural}".encode()).hexdigest()[:12]}
        if rt.short_names:
            entry["shortNames"] = rt.short_names
        if rt.categories:
            entry["categories"] = rt.categories
        resources.append(entry)
        if rt.has_status(version):
            resources.append({"name": f"{rt.plural}/status", "singularName": "",
                              "namespaced": rt.namespaced, "kind": rt.kind,
                              "verbs": ["get", "patch", "update"]})
        if rt.key == ("", "pods"):
            resources.append({"name": "pods/binding", "singularName": "", "namespaced": True,
                              "kind": "Binding", "verbs": ["create"]})
    if not resources:
        return None
    gv = f"{group}/{version}" if group else version
    return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv,
            "resources": resources}


# --- OpenAPI v3 ------------------------------------------------------------------------------
# kubectl only needs to learn that PATCH takes `fieldValidation`: it then leaves validation to
# the server, which checks custom resources against their schemas.

def _gv_path(group, version):
    return f"apis/{group}/{version}" if group else f"api/{version}"


def openapi_index(store):
    paths = {}
    for group, versions in _group_versions(store).items():
        for v in versions:
            doc = openapi_document(store, group, v)
            digest = hashlib.sha512(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:32]
            paths[_gv_path(group, v)] = {
                "serverRelativeURL": f"/openapi/v3/{_gv_path(group, v)}?hash={digest}"}
    return {"paths": paths}


def openapi_document(store, group, version):
    paths = {}
    for rt in store.types.values():
        if rt.group != group or version not in rt.versions:
            continue
        gvk = {"group": group, "version": version, "kind": rt.kind}
        params = [{"name": n, "in": "query", "schema": {"type": "string"}}
                  for n in ("dryRun", "fieldManager", "fieldValidation", "force")]
        scope = "namespaces/{namespace}/" if rt.namespaced else ""
        path = f"/{_gv_path(group, version)}/{scope}{rt.plural}/{{name}}"
        paths[path] = {"patch": {"operationId": f"patch{rt.kind}", "parameters": params,
                                 "x-kubernetes-action": "patch",
                                 "x-kubernetes-group-version-kind": gvk,
                                 "responses": {"200": {"description": "OK"}}}}
    return {"openapi": "3.0.0", "info": {"title": "Kubernetes", "version": "v1.32.0"},
            "paths": paths, "components": {"schemas": {}}}


def partial(obj):
    return {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
            "metadata": obj["metadata"]}


# --- tables ----------------------------------------------------------------------------------

def _pod_cells(obj):
    status = obj.get("status") or {}
    containers = (obj.get("spec") or {}).get("containers") or []
    statuses = status.get("containerStatuses") or []
    ready = sum(1 for s in statuses if s.get("ready"))
    restarts = sum(s.get("restartCount", 0) for s in statuses)
    phase = status.get("phase", "Pending")
    if obj["metadata"].get("deletionTimestamp"):
        phase = "Terminating"
    else:
        for s in statuses:
            waiting = (s.get("state") or {}).get("waiting")
            if waiting and waiting.get("reason"):
                phase = waiting["reason"]
    return [f"{ready}/{len(containers)}", phase, restarts]


_POD_COLUMNS = [("Ready", "string", 0), ("Status", "string", 0), ("Restarts", "string", 0)]
_POD_WIDE = [("IP", "string", 1), ("Node", "string", 1)]


def _column_value(obj, path, kind):
    value = field_value(obj, path.lstrip("."))
    if kind == "date":
        return age(value) if value else "<unknown>"
    if kind in ("integer", "number") and value != "":
        try:
            return int(value) if kind == "integer" else float(value)
        except ValueError:
            return value
    return value if value != "" else None


def table(rt, version, objects, include, resource_version=None):
    v = rt.versions.get(version)
    columns = [{"name": "Name", "type": "string", "format": "name", "priority": 0,
                "description": "Name must be unique within a namespace."}]
    custom = v.columns if v else []
    if rt.key == ("", "pods"):
        columns += [{"name": n, "type": t, "format": "", "priority": p, "description": n}
                    for n, t, p in _POD_COLUMNS]
    columns += [{"name": c.get("name", ""), "type": c.get("type", "string"),
                 "format": c.get("format", ""), "priority": c.get("priority", 0),
                 "description": c.get("description", "")} for c in custom]
    has_age = any(c.get("jsonPath") == ".metadata.creationTimestamp" for c in custom)
    if not has_age:
        columns.append({"name": "Age", "type": "string", "format": "", "priority": 0,
                        "description": "CreationTimestamp"})
    if rt.key == ("", "pods"):
        columns += [{"name": n, "type": t, "format": "", "priority": p, "description": n}
                    for n, t, p in _POD_WIDE]
    rows = []
    for obj in objects:
        cells = [obj["metadata"]["name"]]
        if rt.key == ("", "pods"):
            cells += _pod_cells(obj)
        cells += [_column_value(obj, c.get("jsonPath", ""), c.get("type")) for c in custom]
        if not has_age:
            cells.append(age(obj["metadata"].get("creationTimestamp")))
        if rt.key == ("", "pods"):
            cells += [(obj.get("status") or {}).get("podIP") or "<none>",
                      (obj.get("spec") or {}).get("nodeName") or "<none>"]
        if include == "None":
            row_obj = None
        elif include == "Object":
            row_obj = obj
        else:
            row_obj = {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
                       "metadata": obj["metadata"]}
        row = {"cells": cells}
        if row_obj is not None:
            row["object"] = row_obj
        rows.append(row)
    meta = {} if resource_version is None else {"resourceVersion": str(resource_version)}
    return {"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": meta,
            "columnDefinitions": columns, "rows": rows}
