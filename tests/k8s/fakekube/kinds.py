"""The resource types the server serves (the built-in ones; crds.py makes the others), with
the defaulting and validation the real server applies to built-in kinds on writes."""

import base64
import re

from . import schema as crdschema
from .errors import ApiError

VERBS = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]

class Version:
    def __init__(self, name, status=False, schema=None, columns=None, served=True,
                 storage=True):
        self.name = name
        self.status = status
        self.schema = schema
        self.validator = crdschema.compile_schema(schema) if schema else None
        self.columns = columns or []
        self.served = served
        self.storage = storage

class ResourceType:
    def __init__(self, group, plural, kind, versions, namespaced=True, singular=None,
                 short_names=(), categories=(), crd=False):
        self.group = group
        self.plural = plural
        self.kind = kind
        self.versions = {v.name: v for v in versions}
        self.namespaced = namespaced
        self.singular = singular or kind.lower()
        self.short_names = list(short_names)
        self.categories = list(categories)
        self.crd = crd

    @property
    def key(self):
        return (self.group, self.plural)

    def api_version(self, version):
        return f"{self.group}/{version}" if self.group else version

    def resource_label(self):
        return f"{self.plural}.{self.group}" if self.group else self.plural

    def qualified_kind(self):
        return f"{self.kind}.{self.group}" if self.group else self.kind

    def served(self):
        return [v for v in self.versions.values() if v.served]

    def has_status(self, version):
        v = self.versions.get(version)
        return bool(v and v.status)

def _builtin(group, version, plural, kind, namespaced=True, status=False, short=(),
             categories=()):
    return ResourceType(group, plural, kind, [Version(version, status=status)],
                        namespaced=namespaced, short_names=short, categories=categories)

def builtin_types():
    return [
        _builtin("", "v1", "namespaces", "Namespace", namespaced=False, status=True,
                 short=["ns"]),
        _builtin("", "v1", "nodes", "Node", namespaced=False, status=True, short=["no"]),
        _builtin("", "v1", "pods", "Pod", status=True, short=["po"], categories=["all"]),
        _builtin("", "v1", "services", "Service", status=True, short=["svc"],
                 categories=["all"]),
        _builtin("", "v1", "secrets", "Secret"),
        _builtin("", "v1", "configmaps", "ConfigMap", short=["cm"]),
        _builtin("", "v1", "serviceaccounts", "ServiceAccount", short=["sa"]),
        _builtin("", "v1", "persistentvolumeclaims", "PersistentVolumeClaim", status=True,
                 short=["pvc"]),
        _builtin("", "v1", "events", "Event", short=["ev"]),
        _builtin("", "v1", "endpoints", "Endpoints", short=["ep"]),
        _builtin("events.k8s.io", "v1", "events", "Event", short=["ev"]),
        _builtin("apps", "v1", "deployments", "Deployment", status=True, short=["deploy"],
                 categories=["all"]),
        _builtin("batch", "v1", "jobs", "Job", status=True, categories=["all"]),
        _builtin("rbac.authorization.k8s.io", "v1", "roles", "Role"),
        _builtin("rbac.authorization.k8s.io", "v1", "rolebindings", "RoleBinding"),
        _builtin("rbac.authorization.k8s.io", "v1", "clusterroles", "ClusterRole",
                 namespaced=False),
        _builtin("rbac.authorization.k8s.io", "v1", "clusterrolebindings", "ClusterRoleBinding",
                 namespaced=False),
        _builtin("coordination.k8s.io", "v1", "leases", "Lease"),
        _builtin("apiextensions.k8s.io", "v1", "customresourcedefinitions",
                 "CustomResourceDefinition", namespaced=False, status=True, short=["crd", "crds"]),
    ]

# --- names and metadata ----------------------------------------------------------------------

_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS_1035 = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_LABEL_NAME = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_LABEL_VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")

def _check_name(rt, name):
    if rt.plural == "namespaces" or rt.key == ("", "services"):
        pattern, limit = (_DNS_1035 if rt.plural == "services" else _DNS_LABEL), 63
        what = "a DNS-1035 label" if rt.plural == "services" else "a lowercase RFC 1123 label"
    else:
        pattern, limit, what = _DNS_SUBDOMAIN, 253, "a lowercase RFC 1123 subdomain"
    if len(name) > limit or not pattern.match(name):
        return [("metadata.name", f'Invalid value: "{name}": a valid name must be {what} '
                 f"of at most {limit} characters")]
    return []

def _check_labels(meta):
    causes = []
    for key, value in (meta.get("labels") or {}).items():
        prefix, _, name = key.rpartition("/")
        if (not name or len(name) > 63 or not _LABEL_NAME.match(name)
                or (prefix and (len(prefix) > 253 or not _DNS_SUBDOMAIN.match(prefix)))):
            causes.append(("metadata.labels", f'Invalid value: "{key}": name part must consist '
                           "of alphanumeric characters, '-', '_' or '.', at most 63 characters"))
        if not isinstance(value, str) or len(value) > 63 or not _LABEL_VALUE.match(value):
            causes.append(("metadata.labels", f"Invalid value: {value!r}: a valid label must be "
                           "an empty string or consist of alphanumeric characters, '-', '_' or "
                           "'.', at most 63 characters"))
    for key, value in (meta.get("annotations") or {}).items():
        if not isinstance(value, str):
            causes.append((f"metadata.annotations.{key}", "Invalid value: must be a string"))
    size = sum(len(k) + len(str(v)) for k, v in (meta.get("annotations") or {}).items())
    if size > 256 * 1024:
        causes.append(("metadata.annotations", "Too long: must have at most 262144 bytes"))
    return causes

_JSON_TYPES = {str: "string", int: "number", float: "number", bool: "bool", list: "array",
               dict: "object", type(None): "null"}

def shape_error(rt, obj):
    """What the real server's typed decoding would reject: a 400, not a 422."""
    meta = obj.get("metadata") or {}

    def wrong(path, value, want):
        got = _JSON_TYPES.get(type(value), "value")
        raise ApiError(400, f'{rt.kind} in version "{obj.get("apiVersion", "")}" cannot be '
                       f"handled as a {rt.kind}: json: cannot unmarshal {got} into Go struct "
                       f"field {path} of type {want}", "BadRequest")

    for field in ("name", "generateName", "namespace", "resourceVersion", "uid"):
        if meta.get(field) is not None and not isinstance(meta[field], str):
            wrong(f"ObjectMeta.metadata.{field}", meta[field], "string")
    for field in ("labels", "annotations"):
        value = meta.get(field)
        if value is not None and (not isinstance(value, dict) or not all(
                isinstance(v, str) for v in value.values())):
            wrong(f"ObjectMeta.metadata.{field}", value, "map[string]string")
    if meta.get("finalizers") is not None and (not isinstance(meta["finalizers"], list) or not all(
            isinstance(f, str) for f in meta["finalizers"])):
        wrong("ObjectMeta.metadata.finalizers", meta["finalizers"], "[]string")
    refs = meta.get("ownerReferences")
    if refs is not None and (not isinstance(refs, list) or not all(isinstance(r, dict)
                                                                   for r in refs)):
        wrong("ObjectMeta.metadata.ownerReferences", refs, "[]v1.OwnerReference")
    if rt.crd:
        return
    for field in ("spec", "status"):
        if obj.get(field) is not None and not isinstance(obj[field], dict):
            wrong(f"{rt.kind}.{field}", obj[field], "struct")
    if rt.plural in ("configmaps", "secrets"):
        for field in ("data", "stringData", "binaryData"):
            value = obj.get(field)
            if value is not None and (not isinstance(value, dict) or not all(
                    isinstance(v, str) for v in value.values())):
                wrong(f"{rt.kind}.{field}", value, "map[string]string")

def validate_meta(rt, obj):
    meta = obj["metadata"]
    causes = _check_name(rt, meta["name"]) + _check_labels(meta)
    for field in ("finalizers", "ownerReferences"):
        if not isinstance(meta.get(field, []), list):
            causes.append((f"metadata.{field}", "Invalid value: must be a list"))
    for n, ref in enumerate(meta.get("ownerReferences") or []):
        if not isinstance(ref, dict) or not all(ref.get(k) for k in
                                                ("apiVersion", "kind", "name", "uid")):
            causes.append((f"metadata.ownerReferences[{n}]",
                           "Required value: apiVersion, kind, name and uid are required"))
    return causes

# --- per-kind defaults and checks ------------------------------------------------------------

def _qos(spec):
    limits = requests = 0
    guaranteed = True
    for c in spec.get("containers") or []:
        res = c.get("resources") or {}
        lim, req = res.get("limits") or {}, res.get("requests") or {}
        limits += len(lim)
        requests += len(req)
        if not ("cpu" in lim and "memory" in lim) or any(
                str(req.get(k, lim[k])) != str(lim[k]) for k in ("cpu", "memory")):
            guaranteed = False
    if not limits and not requests:
        return "BestEffort"
    return "Guaranteed" if guaranteed else "Burstable"

def _pod_defaults(obj):
    spec = obj.setdefault("spec", {})
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("schedulerName", "default-scheduler")
    spec.setdefault("enableServiceLinks", True)
    for c in (spec.get("containers") or []) + (spec.get("initContainers") or []):
        if isinstance(c, dict):
            c.setdefault("terminationMessagePath", "/dev/termination-log")
            c.setdefault("terminationMessagePolicy", "File")
            image = str(c.get("image", ""))
            c.setdefault("imagePullPolicy", "Always" if image.endswith(":latest") or
                         ":" not in image.rsplit("/", 1)[-1] else "IfNotPresent")
            for p in c.get("ports") or []:
                if isinstance(p, dict):
                    p.setdefault("protocol", "TCP")
    obj["status"] = {"phase": "Pending", "qosClass": _qos(spec)}

def _pod_checks(obj):
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        return [("spec", "Required value")]
    causes = []
    containers = spec.get("containers")
    if not isinstance(containers, list) or not containers:
        return [("spec.containers", "Required value")]
    names = set()
    for group in ("initContainers", "containers"):
        for n, c in enumerate(spec.get(group) or []):
            field = f"spec.{group}[{n}]"
            if not isinstance(c, dict):
                causes.append((field, "Invalid value: must be an object"))
                continue
            name = c.get("name")
            if not isinstance(name, str) or not _DNS_LABEL.match(name) or len(name) > 63:
                causes.append((f"{field}.name", f"Invalid value: {name!r}: a lowercase RFC 1123 "
                               "label must consist of lower case alphanumeric characters or '-'"))
            elif name in names:
                causes.append((f"{field}.name", f'Duplicate value: "{name}"'))
            names.add(name)
            if not c.get("image"):
                causes.append((f"{field}.image", "Required value"))
            for m, p in enumerate(c.get("ports") or []):
                if isinstance(p, dict) and len(str(p.get("name", ""))) > 15:
                    causes.append((f"{field}.ports[{m}].name",
                                   f'Invalid value: "{p["name"]}": must be no more than 15 '
                                   "characters"))
    if spec.get("restartPolicy") not in ("Always", "OnFailure", "Never"):
        causes.append(("spec.restartPolicy", f'Unsupported value: "{spec.get("restartPolicy")}"'
                       ': supported values: "Always", "OnFailure", "Never"'))
    return causes

class ServiceIPs:
    """Hands out ClusterIPs the way the real allocator does: unique, from 10.96.0.0/12."""

    def __init__(self):
        self.next = 10

    def allocate(self):
        n = self.next
        self.next += 1
        return f"10.96.{(n >> 8) & 255}.{n & 255}"

def _service_defaults(obj, ips):
    spec = obj.setdefault("spec", {})
    spec.setdefault("type", "ClusterIP")
    spec.setdefault("sessionAffinity", "None")
    if spec["type"] != "ExternalName":
        if not spec.get("clusterIP"):
            spec["clusterIP"] = ips.allocate()
        spec.setdefault("clusterIPs", [spec["clusterIP"]])
        spec.setdefault("ipFamilies", ["IPv4"])
        spec.setdefault("ipFamilyPolicy", "SingleStack")
        spec.setdefault("internalTrafficPolicy", "Cluster")
    for p in spec.get("ports") or []:
        if isinstance(p, dict):
            p.setdefault("protocol", "TCP")
            if "port" in p:
                p.setdefault("targetPort", p["port"])
    obj["status"] = {"loadBalancer": {}}

def _service_checks(obj):
    spec = obj.get("spec") or {}
    ports = spec.get("ports") or []
    causes = []
    if not ports and spec.get("clusterIP") != "None" and spec.get("type") != "ExternalName":
        causes.append(("spec.ports", "Required value"))
    names = [p.get("name") for p in ports if isinstance(p, dict)]
    for n, p in enumerate(ports):
        if not isinstance(p, dict):
            causes.append((f"spec.ports[{n}]", "Invalid value: must be an object"))
            continue
        port = p.get("port")
        if not isinstance(port, int) or not 0 < port < 65536:
            causes.append((f"spec.ports[{n}].port", f"Invalid value: {port!r}: must be between "
                           "1 and 65535, inclusive"))
        if len(ports) > 1 and not p.get("name"):
            causes.append((f"spec.ports[{n}].name", "Required value"))
    if len(set(names)) != len(names):
        causes.append(("spec.ports", "Duplicate value: port names must be unique"))
    if spec.get("type", "ClusterIP") not in ("ClusterIP", "NodePort", "LoadBalancer",
                                              "ExternalName"):
        causes.append(("spec.type", f'Unsupported value: "{spec.get("type")}"'))
    return causes

def _secret_defaults(obj):
    obj.setdefault("type", "Opaque")
    string_data = obj.pop("stringData", None)
    if isinstance(string_data, dict):
        data = obj.setdefault("data", {})
        for k, v in string_data.items():
            data[k] = base64.b64encode(str(v).encode()).decode()

def _secret_checks(obj):
    causes = []
    for k, v in (obj.get("data") or {}).items():
        try:
            base64.b64decode(str(v), validate=True)
        except ValueError:
            causes.append((f"data[{k}]", "Invalid value: illegal base64 data"))
    return causes

def _pvc_defaults(obj):
    spec = obj.setdefault("spec", {})
    spec.setdefault("volumeMode", "Filesystem")
    spec.setdefault("volumeName", f"pvc-{obj['metadata']['uid']}")
    # No provisioner runs: claims are bound at once, with the capacity they ask for.
    storage = ((spec.get("resources") or {}).get("requests") or {}).get("storage", "1Gi")
    obj["status"] = {"phase": "Bound", "accessModes": spec.get("accessModes") or
                     ["ReadWriteOnce"], "capacity": {"storage": storage}}

def _namespace_defaults(obj):
    obj.setdefault("spec", {})["finalizers"] = ["kubernetes"]
    obj["status"] = {"phase": "Active"}
    labels = obj["metadata"].setdefault("labels", {})
    labels["kubernetes.io/metadata.name"] = obj["metadata"]["name"]

def on_create(rt, obj, ips):
    """Defaults a new object of a built-in kind, in place."""
    key = rt.key
    if key == ("", "pods"):
        _pod_defaults(obj)
    elif key == ("", "services"):
        _service_defaults(obj, ips)
    elif key == ("", "secrets"):
        _secret_defaults(obj)
    elif key == ("", "persistentvolumeclaims"):
        _pvc_defaults(obj)
    elif key == ("", "namespaces"):
        _namespace_defaults(obj)

def on_update(rt, obj, old):
    """Defaults an updated object of a built-in kind, in place."""
    key = rt.key
    if key == ("", "secrets"):
        _secret_defaults(obj)
    elif key == ("", "services"):
        spec = obj.setdefault("spec", {})
        # The ClusterIP is immutable; updates that leave it out keep it.
        old_ip = (old.get("spec") or {}).get("clusterIP")
        if old_ip and not spec.get("clusterIP"):
            spec["clusterIP"] = old_ip
            spec.setdefault("clusterIPs", [old_ip])

def checks(rt, obj):
    key = rt.key
    if key == ("", "pods"):
        return _pod_checks(obj)
    if key == ("", "services"):
        return _service_checks(obj)
    if key == ("", "secrets"):
        return _secret_checks(obj)
    return []
