"""A process kubelet: runs the pods bound to its node as local processes.

It talks to the API server over HTTP as a real kubelet does: it watches pods and services,
binds unscheduled pods to itself, reports pod status, and finishes graceful deletions. Each
pod gets a loopback IP (127.1.x.y) and a private mount namespace with its own /tmp, /dev/shm,
/etc/hosts (which resolves the cluster's Services) and volumes.

In a test:

    kubelet = Kubelet(server.url, root_dir=tmp).start()
    ...
    kubelet.logs("default", "my-pod")
    kubelet.stop()

As a process: `python -m tests.k8s.fakekube.kubelet --server URL [--root DIR]`.
"""

import argparse
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

from .client import Informer, KubeClient, KubeError, resource_path
from .clock import now
from .podworker import PodWorker
from .processes import mount_ns
from .selection import labels_match

log = logging.getLogger("fakekube.kubelet")


def _ready(pod):
    for c in (pod.get("status") or {}).get("conditions") or []:
        if c.get("type") == "Ready":
            return c.get("status") == "True"
    return False


def namespaces_work(unshare):
    """Whether this process may create mount namespaces (root, or an equivalent)."""
    if not unshare:
        return False
    try:
        return subprocess.run([unshare, "--mount", "--uts", "--propagation", "private", "true"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              timeout=10, check=False).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


class Kubelet:
    def __init__(self, server, root_dir=None, node_name="fake-node", path=None, extra_env=None,
                 isolate=None, backoff_base=0.5, backoff_max=5.0, ip_prefix="127.1",
                 stop_grace=1.0):
        """server: the API server's URL (or anything with a `.url`).
        root_dir: where pod directories, logs and claims live (default: a new temp dir,
        removed by stop()). path: the PATH pods find executables on (default: ours).
        extra_env: variables every container gets before its own `env`.
        isolate: private mount namespaces per pod (default: when this process may)."""
        self.url = getattr(server, "url", server)
        self._server = server if hasattr(server, "pod_log_source") else None
        self.node_name = node_name
        self.path = path or os.environ.get("PATH", "/usr/local/bin:/usr/bin:/bin")
        self.extra_env = dict(extra_env or {})
        self.unshare = shutil.which("unshare")
        self._isolate = isolate
        self.isolated = False
        self.backoff_base, self.backoff_max = backoff_base, backoff_max
        self.ip_prefix = ip_prefix
        self.stop_grace = stop_grace
        self._own_root = root_dir is None
        self.root = root_dir
        self.client = None
        self.stopping = False
        self.workers = {}
        self._done = set()
        self._ips = {}
        self._bound = set()
        self._created_paths = []
        self._lock = threading.RLock()
        # Held while starting a process, so that stop() never misses one being started.
        self.launch_lock = threading.Lock()
        self._wake = threading.Event()
        self._thread = None
        self.own_mnt_ns = mount_ns("self")

    # --- lifecycle -----------------------------------------------------------------------

    def start(self):
        if self.root is None:
            self.root = tempfile.mkdtemp(prefix="fakekube-kubelet-", dir="/var/tmp"
                                         if os.path.isdir("/var/tmp") else None)
        self.root = os.path.abspath(str(self.root))
        self.pvc_root = os.path.join(self.root, "pvc")
        for sub in ("pods", "logs", "pvc"):
            os.makedirs(os.path.join(self.root, sub), exist_ok=True)
        self.isolated = namespaces_work(self.unshare) if self._isolate is None else \
            bool(self._isolate)
        if not self.isolated:
            log.warning("kubelet: no mount namespaces; pods share /tmp, /dev/shm and /etc/hosts")
        self.client = KubeClient(self.url)
        self._register_node()
        self.pods = Informer(self.client, "/api/v1/pods", self._changed).start()
        self.services = Informer(self.client, "/api/v1/services", self._changed).start()
        self._thread = threading.Thread(target=self._loop, name="kubelet", daemon=True)
        self._thread.start()
        if self._server is not None:
            self._server.pod_log_source = self.logs
        self.note(f"kubelet {self.node_name} started: root {self.root}, "
                  f"isolated={self.isolated}")
        return self

    def stop(self):
        """Kills every pod process (SIGTERM, then SIGKILL after stop_grace seconds); the pods
        stay in the API server as they were."""
        if self._thread is None:
            return
        with self.launch_lock:
            self.stopping = True
        self._wake.set()
        self._thread.join(timeout=10)
        with self._lock:
            workers = list(self.workers.values())
        for w in workers:
            w.changed.set()
            w.signal_all(signal.SIGTERM)
        deadline = time.monotonic() + self.stop_grace
        while time.monotonic() < deadline and any(w.running() for w in workers):
            time.sleep(0.02)
        for w in workers:
            w.signal_all(signal.SIGKILL)
        for w in workers:
            w.join(timeout=5)
        self.pods.stop()
        self.services.stop()
        if self._server is not None and self._server.pod_log_source == self.logs:
            self._server.pod_log_source = None
        for path in reversed(self._created_paths):
            try:
                os.remove(path) if os.path.isfile(path) else os.rmdir(path)
            except OSError:
                pass
        if self._own_root:
            shutil.rmtree(self.root, ignore_errors=True)
        self._thread = None

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    def wake(self):
        self._wake.set()

    def _changed(self, _type, _obj):
        self._wake.set()

    def note(self, line):
        with open(os.path.join(self.root, "kubelet.log"), "a") as f:
            f.write(f"{now()} {line}\n")

    def _register_node(self):
        node = {"apiVersion": "v1", "kind": "Node",
                "metadata": {"name": self.node_name,
                             "labels": {"kubernetes.io/hostname": self.node_name,
                                        "kubernetes.io/os": "linux"}}}
        path = resource_path("v1", "nodes")
        try:
            self.client.create(path, node)
        except KubeError as e:
            if e.code != 409:
                return
        cpu, mem = str(os.cpu_count() or 1), str(os.sysconf("SC_PHYS_PAGES") *
                                                 os.sysconf("SC_PAGE_SIZE"))
        status = {"capacity": {"cpu": cpu, "memory": mem, "pods": "110"},
                  "allocatable": {"cpu": cpu, "memory": mem, "pods": "110"},
                  "addresses": [{"type": "InternalIP", "address": "127.0.0.1"},
                                {"type": "Hostname", "address": self.node_name}],
                  "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                                  "lastHeartbeatTime": now(), "lastTransitionTime": now()}]}
        try:
            self.client.patch(f"{path}/{self.node_name}/status", {"status": status}, "merge")
        except KubeError:
            pass

    # --- the sync loop -------------------------------------------------------------------

    def _loop(self):
        while not self.stopping:
            self._wake.wait(0.5)
            self._wake.clear()
            if self.stopping:
                break
            try:
                self._sync()
            except Exception:  # noqa: BLE001 - logged and retried on the next round
                log.exception("kubelet sync failed")

    def _sync(self):
        if not self.pods.synced.is_set():
            return
        seen = set()
        for pod in self.pods.items():
            meta, spec = pod["metadata"], pod.get("spec") or {}
            uid = meta["uid"]
            node = spec.get("nodeName")
            if not node:
                if not meta.get("deletionTimestamp") and uid not in self._bound:
                    self._bind(pod)
                continue
            if node != self.node_name:
                continue
            seen.add(uid)
            with self._lock:
                worker = self.workers.get(uid)
                if worker is not None:
                    worker.update(pod)
                elif uid in self._done:
                    if meta.get("deletionTimestamp"):
                        self._delete_now(pod)
                elif (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
                    self._done.add(uid)
                else:
                    worker = self.workers[uid] = PodWorker(self, pod)
                    worker.start()
        with self._lock:
            for uid, worker in list(self.workers.items()):
                if uid not in seen:
                    worker.mark_gone()
                if worker.finished:
                    del self.workers[uid]
                    self._done.add(uid)
            live = [w for w in self.workers.values() if not w.finished]
        for worker in live:
            self.write_hosts(worker)

    def _bind(self, pod):
        meta = pod["metadata"]
        body = {"apiVersion": "v1", "kind": "Binding",
                "metadata": {"name": meta["name"], "namespace": meta.get("namespace")},
                "target": {"apiVersion": "v1", "kind": "Node", "name": self.node_name}}
        try:
            self.client.create(resource_path("v1", "pods", meta.get("namespace"), meta["name"],
                                             "binding"), body)
            self._bound.add(meta["uid"])
        except KubeError as e:
            if e.code in (404, 409):
                self._bound.add(meta["uid"])

    def _delete_now(self, pod):
        meta = pod["metadata"]
        try:
            self.client.delete(resource_path("v1", "pods", meta.get("namespace"), meta["name"]),
                               {"gracePeriodSeconds": 0, "preconditions": {"uid": meta["uid"]}})
        except (KubeError, OSError):
            pass

    # --- what pods get -------------------------------------------------------------------

    def allocate_ip(self, uid):
        with self._lock:
            if uid not in self._ips:
                n = len(self._ips)
                self._ips[uid] = f"{self.ip_prefix}.{n // 254 % 256}.{n % 254 + 1}"
            return self._ips[uid]

    def base_env(self, worker):
        host, _, port = self.url.split("://", 1)[-1].partition(":")
        # HOME inside the pod's own /tmp, as a container's home is its own: what `oxray start`
        # writes under ~/.oxray must not reach the home of the user running the tests.
        env = {"PATH": self.path, "HOME": "/tmp",
               "HOSTNAME": (worker.spec.get("hostname") or worker.pod_name)[:63],
               "POD_IP": worker.pod_ip, "KUBERNETES_SERVICE_HOST": host,
               "KUBERNETES_SERVICE_PORT": port or "80"}
        for key in ("LANG", "LC_ALL", "TZ"):
            if key in os.environ:
                env[key] = os.environ[key]
        env.update(self.extra_env)
        return env

    def ensure_host_path(self, target, is_file):
        """Creates a mount point outside the pod's /tmp on the host, to remove at stop()."""
        if target == "/tmp" or target.startswith(("/tmp/", "/dev/shm")):
            return
        with self._lock:
            missing = []
            cur = target if not is_file else os.path.dirname(target)
            while cur and cur != "/" and not os.path.exists(cur):
                missing.append(cur)
                cur = os.path.dirname(cur)
            for path in reversed(missing):
                os.makedirs(path, exist_ok=True)
                self._created_paths.append(path)
            if is_file and not os.path.exists(target):
                open(target, "a").close()
                self._created_paths.append(target)

    def hosts_for(self, pod, pod_ip):
        meta, spec = pod["metadata"], pod.get("spec") or {}
        ns = meta.get("namespace")
        hostname = (spec.get("hostname") or meta["name"])[:63]
        own = [hostname]
        if spec.get("subdomain"):
            own.insert(0, f"{hostname}.{spec['subdomain']}.{ns}.svc.cluster.local")
        lines = ["# Kubernetes-managed hosts file.", "127.0.0.1\tlocalhost",
                 "::1\tlocalhost ip6-localhost ip6-loopback", f"{pod_ip}\t{' '.join(own)}"]
        pods = self.pods.items()
        for svc in sorted(self.services.items(), key=Informer.key):
            sns, sname = svc["metadata"].get("namespace"), svc["metadata"]["name"]
            sspec = svc.get("spec") or {}
            selector = sspec.get("selector")
            if not selector or sspec.get("type") == "ExternalName":
                continue
            members = []
            for p in sorted(pods, key=lambda p: p["metadata"]["name"]):
                st = p.get("status") or {}
                if (p["metadata"].get("namespace") != sns or not st.get("podIP")
                        or not labels_match([(k, "=", (v,)) for k, v in selector.items()],
                                            p["metadata"].get("labels"))):
                    continue
                if p["metadata"].get("deletionTimestamp") and not sspec.get(
                        "publishNotReadyAddresses"):
                    continue
                if _ready(p) or (sspec.get("publishNotReadyAddresses")
                                 and st.get("phase") == "Running"):
                    members.append(p)
            names = ([sname] if sns == ns else []) + [
                f"{sname}.{sns}", f"{sname}.{sns}.svc", f"{sname}.{sns}.svc.cluster.local"]
            if sspec.get("clusterIP") == "None":
                for p in members:
                    lines.append(f"{p['status']['podIP']}\t{' '.join(names)}")
                for p in members:
                    pspec = p.get("spec") or {}
                    if pspec.get("hostname") and pspec.get("subdomain") == sname:
                        h = pspec["hostname"]
                        lines.append(f"{p['status']['podIP']}\t{h}.{sname}.{sns}.svc.cluster.local"
                                     f" {h}.{sname}.{sns}.svc {h}.{sname}.{sns}")
            elif members:
                lines.append(f"{members[0]['status']['podIP']}\t{' '.join(names)}")
        return "\n".join(lines) + "\n"

    def write_hosts(self, worker):
        """Rewrites a pod's hosts file in place: its processes see it through a bind mount of
        this very inode, so the file is never replaced."""
        if worker.pod_ip is None:
            return
        text = self.hosts_for(worker.pod, worker.pod_ip)
        if text == worker.hosts_text:
            return
        os.makedirs(worker.dir, exist_ok=True)
        mode = "r+" if os.path.exists(worker.hosts_path) else "w"
        with open(worker.hosts_path, mode) as f:
            f.seek(0)
            f.write(text)
            f.truncate()
        worker.hosts_text = text

    # --- for tests -----------------------------------------------------------------------

    def _worker(self, namespace, name):
        with self._lock:
            found = [w for w in self.workers.values()
                     if w.ns == namespace and w.pod_name == name]
        return found[-1] if found else None

    def log_path(self, namespace, name):
        """The log file of the pod's main container (the newest pod of that name)."""
        w = self._worker(namespace, name)
        if w is not None:
            return w.log_path
        logs = os.path.join(self.root, "logs")
        prefix = f"{namespace}_{name}_"
        found = [os.path.join(logs, f) for f in os.listdir(logs)
                 if f.startswith(prefix) and f.count(".") == 1]
        return max(found, key=os.path.getmtime) if found else None

    def logs(self, namespace, name):
        path = self.log_path(namespace, name)
        if not path or not os.path.exists(path):
            return ""
        with open(path, errors="replace") as f:
            return f.read()

    def pid(self, namespace, name):
        """The pid of the pod's running main process, or None."""
        w = self._worker(namespace, name)
        proc = w.proc if w is not None else None
        return proc.pid if proc is not None and proc.poll() is None else None

    def pod_dir(self, namespace, name):
        w = self._worker(namespace, name)
        return w.dir if w is not None else None


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--server", required=True, help="the API server's URL")
    p.add_argument("--root", help="directory for pod files and logs")
    p.add_argument("--node-name", default="fake-node")
    p.add_argument("--no-isolation", action="store_true",
                   help="run pods without private mount namespaces")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    kubelet = Kubelet(args.server, root_dir=args.root, node_name=args.node_name,
                      isolate=False if args.no_isolation else None).start()
    done = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: done.set())
    done.wait()
    kubelet.stop()
    sys.exit(0)


if __name__ == "__main__":
    main()
