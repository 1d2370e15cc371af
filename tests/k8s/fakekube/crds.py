"""CustomResourceDefinitions: their checks, their status, the resource types they declare,
and how custom resources are pruned and validated against their schemas."""

import copy

from . import schema as crdschema
from .errors import ApiError
from .kinds import ResourceType, Version


KEY = ("apiextensions.k8s.io", "customresourcedefinitions")


def on_write(obj):
    """Fills a CRD's status: it is established at once, there being no name conflicts here."""
    if not crd_checks(obj):
        crd_status(obj)


def crd_checks(obj):
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        return [("spec", "Required value")]
    causes = []
    names = spec.get("names")
    if not isinstance(names, dict):
        return [("spec.names", "Required value")]
    group = spec.get("group")
    if not isinstance(group, str) or "." not in group:
        causes.append(("spec.group", f'Invalid value: "{group}": should be a domain with at '
                       "least one dot"))
    for field in ("plural", "kind"):
        if not isinstance(names.get(field), str) or not names.get(field):
            causes.append((f"spec.names.{field}", "Required value"))
    if causes:
        return causes
    if obj["metadata"]["name"] != f"{names['plural']}.{group}":
        causes.append(("metadata.name", f'Invalid value: "{obj["metadata"]["name"]}": must be '
                       "spec.names.plural+\".\"+spec.group"))
    for field in ("shortNames", "categories"):
        if names.get(field) is not None and not isinstance(names[field], list):
            causes.append((f"spec.names.{field}", "Invalid value: must be a list"))
    if spec.get("scope") not in ("Namespaced", "Cluster"):
        causes.append(("spec.scope", f'Unsupported value: "{spec.get("scope")}": supported '
                       'values: "Cluster", "Namespaced"'))
    versions = spec.get("versions")
    if not isinstance(versions, list) or not versions:
        return causes + [("spec.versions", "Required value")]
    if sum(1 for v in versions if isinstance(v, dict) and v.get("storage") is True) != 1:
        causes.append(("spec.versions", "Invalid value: must have exactly one version marked "
                       "as storage version"))
    for n, v in enumerate(versions):
        if not isinstance(v, dict) or not isinstance(v.get("name"), str) or not v["name"]:
            causes.append((f"spec.versions[{n}].name", "Required value"))
            continue
        for field, kind in (("schema", dict), ("subresources", dict),
                            ("additionalPrinterColumns", list)):
            if v.get(field) is not None and not isinstance(v[field], kind):
                causes.append((f"spec.versions[{n}].{field}", "Invalid value: wrong type"))
        if any(not isinstance(c, dict) for c in v.get("additionalPrinterColumns") or []):
            causes.append((f"spec.versions[{n}].additionalPrinterColumns",
                           "Invalid value: must be a list of objects"))
        s = (v.get("schema") or {}).get("openAPIV3Schema") if isinstance(
            v.get("schema"), dict) else None
        if s is not None and not isinstance(s, dict):
            causes.append((f"spec.versions[{n}].schema.openAPIV3Schema",
                           "Invalid value: must be an object"))
    return causes


def crd_status(obj):
    spec = obj.get("spec") or {}
    now = obj["metadata"].get("creationTimestamp")
    stored = [v["name"] for v in spec.get("versions") or [] if v.get("storage")]
    old = obj.get("status") or {}
    obj["status"] = {
        "acceptedNames": copy.deepcopy(spec.get("names") or {}),
        "conditions": [
            {"type": "NamesAccepted", "status": "True", "reason": "NoConflicts",
             "message": "no conflicts found", "lastTransitionTime": now},
            {"type": "Established", "status": "True", "reason": "InitialNamesAccepted",
             "message": "the initial names have been accepted", "lastTransitionTime": now},
        ],
        "storedVersions": sorted(set(old.get("storedVersions") or []) | set(stored)),
    }


def crd_resource_type(crd):
    spec = crd["spec"]
    names = spec["names"]
    versions = []
    for v in spec["versions"]:
        schema = (v.get("schema") or {}).get("openAPIV3Schema")
        versions.append(Version(
            v["name"], status="status" in (v.get("subresources") or {}), schema=schema,
            columns=v.get("additionalPrinterColumns") or [], served=v.get("served", True),
            storage=v.get("storage", False)))
    return ResourceType(spec["group"], names["plural"], names["kind"], versions,
                        namespaced=spec.get("scope") == "Namespaced",
                        singular=names.get("singular") or names["kind"].lower(),
                        short_names=names.get("shortNames") or (),
                        categories=names.get("categories") or (), crd=True)


def custom_resource_causes(rt, version, obj, strict):
    """Prunes, defaults and validates a custom resource in place; returns its field errors."""
    v = rt.versions.get(version)
    if not rt.crd or not v or not v.schema:
        return []
    unknown = crdschema.prepare(obj, v.schema)
    if strict and unknown:
        raise ApiError(400, f'{rt.kind} in version "{version}" cannot be handled as a '
                       f'{rt.kind}: strict decoding error: '
                       + ", ".join(f'unknown field "{f}"' for f in unknown), "BadRequest")
    return crdschema.validate(v.validator, obj)
