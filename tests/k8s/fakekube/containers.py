"""What a container needs before it starts: its environment, its command line, its volumes;
and the probes that judge it once it runs."""

import base64
import http.client
import math
import os
import re
import shutil
import socket
import ssl
import subprocess

from .client import KubeError, resource_path


class ConfigError(Exception):
    """The pod refers to something that is missing; the kubelet retries (real kubelets report
    CreateContainerConfigError and keep trying too)."""


_REF = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.\-]*)\)")


def expand(text, env):
    """Kubernetes' $(VAR) expansion: unknown references stay as written, $$ escapes."""
    def sub(m):
        if m.group(0) == "$$":
            return "$"
        return env.get(m.group(1), m.group(0))
    return _REF.sub(sub, str(text))


_UNITS = {"Ki": 2 ** 10, "Mi": 2 ** 20, "Gi": 2 ** 30, "Ti": 2 ** 40, "Pi": 2 ** 50,
          "Ei": 2 ** 60, "k": 10 ** 3, "M": 10 ** 6, "G": 10 ** 9, "T": 10 ** 12,
          "P": 10 ** 15, "E": 10 ** 18, "m": 10 ** -3, "": 1}


def quantity(value):
    """A Kubernetes quantity ("500m", "2Gi", 3) as a number."""
    m = re.fullmatch(r"\s*([0-9.]+(?:[eE][-+]?[0-9]+)?)\s*(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E|m)?\s*",
                     str(value))
    if not m:
        raise ValueError(f"invalid quantity {value!r}")
    return float(m.group(1)) * _UNITS[m.group(2) or ""]


def _field_ref(pod, path, pod_ip):
    meta, spec = pod["metadata"], pod.get("spec") or {}
    m = re.fullmatch(r"metadata\.(labels|annotations)\['([^']*)'\]", path)
    if m:
        return (meta.get(m.group(1)) or {}).get(m.group(2), "")
    values = {
        "metadata.name": meta["name"], "metadata.namespace": meta.get("namespace", ""),
        "metadata.uid": meta.get("uid", ""), "spec.nodeName": spec.get("nodeName", ""),
        "spec.serviceAccountName": spec.get("serviceAccountName", "default"),
        "status.podIP": pod_ip, "status.podIPs": pod_ip, "status.hostIP": "127.0.0.1",
        "status.hostIPs": "127.0.0.1",
    }
    if path not in values:
        raise ConfigError(f"unsupported fieldRef {path!r}")
    return values[path]


def _resource_ref(container, ref):
    resource = ref.get("resource", "")
    divisor = quantity(ref.get("divisor") or 1)
    kind, _, name = resource.partition(".")
    res = (container.get("resources") or {})
    value = (res.get(kind) or {}).get(name)
    if value is None and kind == "requests":
        value = (res.get("limits") or {}).get(name)
    if value is None:
        value = os.cpu_count() if name == "cpu" else os.sysconf("SC_PHYS_PAGES") * \
            os.sysconf("SC_PAGE_SIZE")
    return str(int(math.ceil(quantity(value) / divisor)))


class Lookup:
    """Reads the secrets and config maps a pod refers to, once per pod start."""

    def __init__(self, client, namespace):
        self.client, self.namespace, self.cache = client, namespace, {}

    def data(self, kind, name, optional=False):
        """The object's data decoded to strings, or None when it is optional and missing."""
        key = (kind, name)
        if key not in self.cache:
            plural = "secrets" if kind == "secret" else "configmaps"
            try:
                obj = self.client.get_or_none(resource_path("v1", plural, self.namespace, name))
            except KubeError as e:
                raise ConfigError(str(e))
            if obj is None:
                self.cache[key] = None
            else:
                data = {}
                for k, v in (obj.get("data") or {}).items():
                    data[k] = base64.b64decode(v) if kind == "secret" else str(v).encode()
                for k, v in (obj.get("binaryData") or {}).items():
                    data[k] = base64.b64decode(v)
                for k, v in (obj.get("stringData") or {}).items():
                    data[k] = str(v).encode()
                self.cache[key] = data
        data = self.cache[key]
        if data is None and not optional:
            raise ConfigError(f'{kind} "{name}" not found')
        return data


def build_env(pod, container, base, pod_ip, lookup):
    env = dict(base)
    for src in container.get("envFrom") or []:
        prefix = src.get("prefix", "")
        for kind, field in (("secret", "secretRef"), ("configmap", "configMapRef")):
            ref = src.get(field)
            if ref:
                data = lookup.data(kind, ref.get("name", ""), ref.get("optional", False)) or {}
                for k, v in data.items():
                    env[prefix + k] = v.decode(errors="replace")
    for item in container.get("env") or []:
        name = item.get("name")
        if not name:
            continue
        if "valueFrom" not in item:
            env[name] = expand(item.get("value", ""), env)
            continue
        source = item["valueFrom"] or {}
        if "secretKeyRef" in source or "configMapKeyRef" in source:
            kind = "secret" if "secretKeyRef" in source else "configmap"
            ref = source.get("secretKeyRef") or source.get("configMapKeyRef")
            data = lookup.data(kind, ref.get("name", ""), ref.get("optional", False))
            if data is None:
                continue
            if ref.get("key") not in data:
                if ref.get("optional"):
                    continue
                raise ConfigError(f'couldn\'t find key {ref.get("key")} in {kind} '
                                  f'{pod["metadata"].get("namespace")}/{ref.get("name")}')
            env[name] = data[ref["key"]].decode(errors="replace")
        elif "fieldRef" in source:
            env[name] = _field_ref(pod, source["fieldRef"].get("fieldPath", ""), pod_ip)
        elif "resourceFieldRef" in source:
            env[name] = _resource_ref(container, source["resourceFieldRef"])
    return env


def command_line(container, env):
    argv = [expand(a, env) for a in (container.get("command") or [])]
    argv += [expand(a, env) for a in (container.get("args") or [])]
    if not argv:
        raise ConfigError("no command specified: the process kubelet has no image entrypoints")
    return argv


# --- volumes ---------------------------------------------------------------------------------

def _write_files(directory, data, items, mode):
    os.makedirs(directory, exist_ok=True)
    chosen = [(i["key"], i.get("path", i["key"]), i.get("mode", mode)) for i in items] \
        if items else [(k, k, mode) for k in data]
    for key, rel, file_mode in chosen:
        if key not in data:
            raise ConfigError(f"configured key {key} not found")
        path = os.path.join(directory, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(data[key])
        os.chmod(path, file_mode if isinstance(file_mode, int) else 0o644)


def prepare_volumes(pod, pod_dir, pvc_root, client, lookup):
    """Materializes the pod's volumes; returns {volume name: host path}. Memory-backed
    emptyDirs get a directory too, used only when pods cannot have mount namespaces."""
    ns = pod["metadata"].get("namespace")
    paths = {}
    for vol in (pod.get("spec") or {}).get("volumes") or []:
        name = vol.get("name", "")
        local = os.path.join(pod_dir, "volumes", name)
        if "secret" in vol or "configMap" in vol:
            kind = "secret" if "secret" in vol else "configmap"
            src = vol.get("secret") or vol.get("configMap") or {}
            ref = src.get("secretName") if kind == "secret" else src.get("name")
            data = lookup.data(kind, ref or "", src.get("optional", False)) or {}
            _write_files(local, data, src.get("items"), src.get("defaultMode", 0o644))
        elif "persistentVolumeClaim" in vol:
            claim = vol["persistentVolumeClaim"].get("claimName", "")
            try:
                pvc = client.get_or_none(resource_path("v1", "persistentvolumeclaims", ns, claim))
            except KubeError as e:
                raise ConfigError(str(e))
            if pvc is None:
                raise ConfigError(f'persistentvolumeclaim "{claim}" not found')
            # Keyed by the claim's uid: a new claim of the same name starts empty, as a freshly
            # provisioned volume would.
            local = os.path.join(pvc_root, f"{ns}_{claim}_{pvc['metadata']['uid']}")
        elif "hostPath" in vol:
            local = vol["hostPath"].get("path", "")
            if vol["hostPath"].get("type") in ("DirectoryOrCreate",):
                os.makedirs(local, exist_ok=True)
        if not os.path.exists(local):
            os.makedirs(local, exist_ok=True)
        paths[name] = local
    return paths


def memory_volumes(pod, container):
    """{volume name: tmpfs size in bytes} for the pod's `medium: Memory` emptyDirs."""
    out = {}
    limit = ((container.get("resources") or {}).get("limits") or {}).get("memory")
    for vol in (pod.get("spec") or {}).get("volumes") or []:
        empty = vol.get("emptyDir")
        if isinstance(empty, dict) and empty.get("medium") == "Memory":
            try:
                out[vol.get("name")] = int(quantity(empty.get("sizeLimit") or limit or "1Gi"))
            except ValueError:
                out[vol.get("name")] = 2 ** 30
    return out


def volume_mounts(container, volumes, memory=None):
    """[(host source or None for tmpfs, target, read_only, is_file, tmpfs size)] in mount
    order (parents first)."""
    out = []
    memory = memory or {}
    for m in container.get("volumeMounts") or []:
        source = volumes.get(m.get("name"))
        if source is None:
            raise ConfigError(f'volume "{m.get("name")}" not found in the pod\'s volumes')
        target = os.path.normpath(m.get("mountPath") or ".")
        if not target.startswith("/"):
            raise ConfigError(f"mountPath {target!r} must be absolute")
        read_only = bool(m.get("readOnly"))
        if m.get("name") in memory and not m.get("subPath"):
            out.append((None, target, read_only, False, memory[m["name"]]))
            continue
        if m.get("subPath"):
            source = os.path.join(source, m["subPath"])
            if not os.path.exists(source):
                os.makedirs(source, exist_ok=True)
        out.append((source, target, read_only, os.path.isfile(source), None))
    return sorted(out, key=lambda t: t[1].count("/"))


# --- probes ----------------------------------------------------------------------------------

def _port(container, port):
    if isinstance(port, int) or str(port).isdigit():
        return int(port)
    for p in container.get("ports") or []:
        if p.get("name") == port:
            return int(p["containerPort"])
    raise ValueError(f"no container port named {port!r}")


def run_probe(probe, container, pod_ip, env, pid, isolated):
    """True when the probe passes."""
    timeout = max(1, int(probe.get("timeoutSeconds") or 1))
    try:
        if "tcpSocket" in probe:
            t = probe["tcpSocket"]
            with socket.create_connection((t.get("host") or pod_ip, _port(container,
                                                                          t.get("port"))),
                                          timeout=timeout):
                return True
        if "httpGet" in probe:
            h = probe["httpGet"]
            host, port = h.get("host") or pod_ip, _port(container, h.get("port"))
            if str(h.get("scheme", "HTTP")).upper() == "HTTPS":
                conn = http.client.HTTPSConnection(host, port, timeout=timeout,
                                                   context=ssl._create_unverified_context())
            else:
                conn = http.client.HTTPConnection(host, port, timeout=timeout)
            try:
                headers = {x.get("name"): x.get("value") for x in h.get("httpHeaders") or []}
                conn.request("GET", h.get("path") or "/", headers=headers)
                return 200 <= conn.getresponse().status < 400
            finally:
                conn.close()
        if "exec" in probe:
            argv = [expand(a, env) for a in probe["exec"].get("command") or []]
            if not argv:
                return False
            if isolated and pid:
                nsenter = shutil.which("nsenter") or "/usr/bin/nsenter"
                argv = [nsenter, "-t", str(pid), "-m", "-u", "--"] + argv
            done = subprocess.run(argv, env=env, stdin=subprocess.DEVNULL,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                  timeout=timeout, check=False)
            return done.returncode == 0
        if "grpc" in probe:
            with socket.create_connection((pod_ip, int(probe["grpc"].get("port"))),
                                          timeout=timeout):
                return True
    except (OSError, ValueError, subprocess.SubprocessError, http.client.HTTPException):
        return False
    return True
