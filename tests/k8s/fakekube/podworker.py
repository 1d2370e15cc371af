"""One pod on the process kubelet: its directories, its init containers and main process, its
restarts, probes and status, and its termination."""

import copy
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import traceback

from . import containers
from .client import KubeError, resource_path
from .containers import ConfigError
from .clock import now
from .processes import exit_code, mount_ns, pids_in_mount_ns, signal_group

log = logging.getLogger("fakekube.kubelet")

PODINIT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "podinit.py")
# A process that ran this long is healthy again: its next crash restarts without backoff.
_HEALTHY_RUN = 10.0


def _number(value, default):
    try:
        return max(0.0, float(value if value is not None else default))
    except (TypeError, ValueError):
        return float(default)


class Stopped(Exception):
    """The kubelet is stopping: no new processes."""


class PodWorker(threading.Thread):
    def __init__(self, kubelet, pod):
        meta = pod["metadata"]
        super().__init__(name=f"pod-{meta.get('namespace')}/{meta['name']}", daemon=True)
        self.kubelet = kubelet
        self.pod = pod
        self.uid, self.ns, self.pod_name = meta["uid"], meta.get("namespace"), meta["name"]
        base = f"{self.ns}_{self.pod_name}_{self.uid}"
        self.dir = os.path.join(kubelet.root, "pods", base)
        self.log_path = os.path.join(kubelet.root, "logs", base + ".log")
        self.hosts_path = os.path.join(self.dir, "hosts")
        self.hosts_text = None
        self.changed = threading.Event()
        self.gone = False
        self.finished = False
        self.proc = None
        self.env = {}
        self.mnt_ns = None
        self.pod_ip = None
        self.volumes = {}
        self.phase = "Pending"
        self.state = {"waiting": {"reason": "ContainerCreating"}}
        self.last_state = {}
        self.restarts = 0
        self.ready = False
        self.started = False
        self.init_statuses = []
        self.conditions = {}
        self.start_time = now()
        self.last_sent = None

    # --- inputs from the kubelet ---------------------------------------------------------

    def update(self, pod):
        self.pod = pod
        self.changed.set()

    def mark_gone(self):
        self.gone = True
        self.changed.set()

    @property
    def spec(self):
        return self.pod.get("spec") or {}

    def deleting(self):
        return self.gone or bool(self.pod["metadata"].get("deletionTimestamp"))

    def stopping(self):
        return self.kubelet.stopping or self.deleting()

    def _wait(self, seconds):
        """Sleeps until `seconds` pass or something about the pod changes."""
        self.changed.wait(max(0.0, seconds))
        self.changed.clear()

    def _backoff(self, seconds):
        """Sleeps the whole restart backoff, unless the pod is being stopped."""
        deadline = time.monotonic() + seconds
        while not self.stopping() and time.monotonic() < deadline:
            self._wait(deadline - time.monotonic())

    # --- lifecycle -----------------------------------------------------------------------

    def run(self):
        try:
            self._run()
        except Stopped:
            pass
        except Exception:  # noqa: BLE001 - logged; the pod must not take the kubelet down
            log.error("pod %s/%s: %s", self.ns, self.pod_name, traceback.format_exc())
        finally:
            self._kill_everything(signal.SIGKILL)
            if not self.kubelet.stopping:
                self._finish_deletion()
            self.finished = True
            self.kubelet.wake()

    def _run(self):
        self.pod_ip = "127.0.0.1" if self.spec.get("hostNetwork") else \
            self.kubelet.allocate_ip(self.uid)
        self._condition("PodScheduled", True)
        self._condition("Initialized", not self.spec.get("initContainers"))
        self._condition("ContainersReady", False)
        self._condition("Ready", False)
        self._report()
        if not self._prepare():
            return
        init = self.spec.get("initContainers") or []
        for n, container in enumerate(init):
            if not self._run_init(n, container):
                return
        self._condition("Initialized", True)
        self._run_main()

    def _prepare(self):
        while not self.stopping():
            try:
                for sub in ("tmp", "volumes"):
                    os.makedirs(os.path.join(self.dir, sub), exist_ok=True)
                os.chmod(os.path.join(self.dir, "tmp"), 0o1777)
                lookup = containers.Lookup(self.kubelet.client, self.ns)
                self.volumes = containers.prepare_volumes(self.pod, self.dir,
                                                          self.kubelet.pvc_root,
                                                          self.kubelet.client, lookup)
                self.kubelet.write_hosts(self)
                return True
            except ConfigError as e:
                self.state = {"waiting": {"reason": "CreateContainerConfigError",
                                          "message": str(e)}}
                self._report()
                self._wait(1.0)
        return False

    def _run_init(self, n, container):
        backoff = self.kubelet.backoff_base
        status = {"name": container.get("name"), "image": container.get("image", ""),
                  "imageID": "", "ready": False, "restartCount": 0, "started": False,
                  "state": {"waiting": {"reason": "PodInitializing"}}}
        self.init_statuses.append(status)
        while True:
            if self.stopping():
                return False
            try:
                proc = self._launch(container, self.log_path[:-4] + f".{container.get('name')}"
                                    ".log")
            except ConfigError as e:
                status["state"] = {"waiting": {"reason": "CreateContainerConfigError",
                                               "message": str(e)}}
                self._report()
                self._wait(1.0)
                continue
            started = now()
            status["state"] = {"running": {"startedAt": started}}
            self._report()
            code = self._wait_exit(proc)
            if code is None:
                return False
            status["state"] = {"terminated": {"exitCode": code, "startedAt": started,
                                              "finishedAt": now(),
                                              "reason": "Completed" if code == 0 else "Error"}}
            if code == 0:
                status["ready"] = True
                self._report()
                return True
            if self.spec.get("restartPolicy") == "Never":
                self.phase = "Failed"
                self._report()
                self._idle_until_deleted()
                return False
            status["restartCount"] += 1
            self._report()
            self._backoff(backoff)
            backoff = min(backoff * 2, self.kubelet.backoff_max)

    def _run_main(self):
        container = self.spec["containers"][0]
        backoff = self.kubelet.backoff_base
        while not self.stopping():
            try:
                self.proc = self._launch(container, self.log_path)
            except ConfigError as e:
                self.state = {"waiting": {"reason": "CreateContainerConfigError",
                                          "message": str(e)}}
                self._report()
                self._wait(1.0)
                continue
            began = time.monotonic()
            started = now()
            self.state = {"running": {"startedAt": started}}
            self.phase = "Running"
            code = self._monitor(container)
            if code is None:
                return
            ran = time.monotonic() - began
            self.ready = self.started = False
            self.last_state = {"terminated": {
                "exitCode": code, "startedAt": started, "finishedAt": now(),
                "reason": "Completed" if code == 0 else "Error",
                "containerID": f"fakekube://{self.proc.pid}"}}
            policy = self.spec.get("restartPolicy", "Always")
            if policy == "Always" or (policy == "OnFailure" and code != 0):
                self.restarts += 1
                if ran >= _HEALTHY_RUN:
                    backoff = self.kubelet.backoff_base
                self.state = {"waiting": {"reason": "CrashLoopBackOff", "message":
                                          f"back-off {backoff:g}s restarting failed container"}}
                self._report()
                self._backoff(backoff)
                backoff = min(backoff * 2, self.kubelet.backoff_max)
                continue
            self.state, self.last_state = self.last_state, {}
            self.phase = "Succeeded" if code == 0 else "Failed"
            self._report()
            self._idle_until_deleted()
            return

    def _idle_until_deleted(self):
        while not self.stopping():
            self._wait(1.0)

    # --- processes -----------------------------------------------------------------------

    def _launch(self, container, log_path):
        kubelet = self.kubelet
        lookup = containers.Lookup(kubelet.client, self.ns)
        env = containers.build_env(self.pod, container, kubelet.base_env(self), self.pod_ip,
                                   lookup)
        argv = containers.command_line(container, env)
        mounts = containers.volume_mounts(container, self.volumes,
                                          containers.memory_volumes(self.pod, container))
        # Every container start gets an empty /tmp, as a fresh container filesystem would.
        tmp = os.path.join(self.dir, "tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        os.makedirs(tmp, exist_ok=True)
        os.chmod(tmp, 0o1777)
        os.makedirs(os.path.dirname(log_path), exist_ok=True)
        if kubelet.isolated:
            cmd = [kubelet.unshare, "--mount", "--uts", "--propagation", "private", "--",
                   sys.executable, "-I", "-S", PODINIT,
                   self._namespace_spec(container, argv, mounts)]
            cwd = None
        else:
            cmd = argv
            cwd = container.get("workingDir") or "/"
            if shutil.which(argv[0], path=env.get("PATH")) is None:
                with open(log_path, "ab") as logf:
                    logf.write(f"fakekube: exec {argv[0]!r}: executable file not found in "
                               f"$PATH\n".encode())
                cmd = ["sh", "-c", "exit 127"]
        with kubelet.launch_lock:
            if kubelet.stopping:
                raise Stopped()
            with open(log_path, "ab") as logf:
                proc = subprocess.Popen(cmd, env=env, cwd=cwd if os.path.isdir(cwd or "/") else
                                        None, stdin=subprocess.DEVNULL, stdout=logf,
                                        stderr=subprocess.STDOUT, start_new_session=True)
            self.proc = proc
        self.env = env
        self.mnt_ns = None
        if kubelet.isolated:
            deadline = time.monotonic() + 2.0
            while time.monotonic() < deadline and proc.poll() is None:
                ns = mount_ns(proc.pid)
                if ns and ns != kubelet.own_mnt_ns:
                    self.mnt_ns = ns
                    break
                time.sleep(0.002)
        waiter = threading.Thread(target=lambda: (proc.wait(), self.changed.set()),
                                  name=f"wait-{proc.pid}", daemon=True)
        waiter.start()
        log.info("pod %s/%s: started %s as pid %d on %s; log %s", self.ns, self.pod_name,
                 container.get("name"), proc.pid, self.pod_ip, log_path)
        kubelet.note(f"pod {self.ns}/{self.pod_name} container {container.get('name')} pid "
                     f"{proc.pid} ip {self.pod_ip} log {log_path}")
        return proc

    def _namespace_spec(self, container, argv, mounts):
        limit = ((container.get("resources") or {}).get("limits") or {}).get("memory")
        try:
            shm = int(containers.quantity(limit)) if limit else 2 ** 30
        except ValueError:
            shm = 2 ** 30
        spec_mounts = [
            {"source": os.path.join(self.dir, "tmp"), "target": "/tmp"},
            {"source": self.hosts_path, "target": "/etc/hosts", "file": True},
        ]
        # Programs on the pods' PATH that live under /tmp (a checkout there) stay visible
        # through the pod's own /tmp, as an image's files would.
        for top in tmp_roots(self.kubelet.path):
            spec_mounts.insert(1, {"source": top, "target": top})
        if not any(target == "/dev/shm" for _, target, *_ in mounts):
            spec_mounts.append({"type": "tmpfs", "target": "/dev/shm",
                                "options": f"size={shm},mode=1777"})
        for source, target, read_only, is_file, tmpfs in mounts:
            self.kubelet.ensure_host_path(target, is_file)
            if tmpfs is not None:
                spec_mounts.append({"type": "tmpfs", "target": target,
                                    "options": f"size={tmpfs},mode=1777"})
            else:
                spec_mounts.append({"source": source, "target": target,
                                    "read_only": read_only, "file": is_file})
        hostname = (self.spec.get("hostname") or self.pod_name)[:63]
        spec = {"hostname": hostname, "mounts": spec_mounts, "argv": argv,
                "cwd": container.get("workingDir")}
        path = os.path.join(self.dir, f"container-{container.get('name')}.json")
        with open(path, "w") as f:
            json.dump(spec, f)
        return path

    def _wait_exit(self, proc):
        """Waits for a run-to-completion process; None if the pod is stopped meanwhile."""
        while proc.poll() is None:
            if self.stopping():
                self.proc = proc
                self._terminate()
                return None
            self._wait(1.0)
        self._kill_everything(signal.SIGKILL, proc)
        return exit_code(proc.returncode)

    def _monitor(self, container):
        """Watches the running main process: probes, readiness, deletion. Returns its exit
        code, or None when the pod is being stopped."""
        proc = self.proc
        start = time.monotonic()
        probes = {}
        for kind in ("startupProbe", "livenessProbe", "readinessProbe"):
            p = container.get(kind)
            if isinstance(p, dict):
                probes[kind] = {"probe": p, "ok": 0, "fail": 0,
                                "next": start + _number(p.get("initialDelaySeconds"), 0)}
        self.started = "startupProbe" not in probes
        self.ready = self.started and "readinessProbe" not in probes
        self._report()
        while True:
            if self.stopping():
                self._terminate()
                return None
            if proc.poll() is not None:
                self._kill_everything(signal.SIGKILL, proc)
                return exit_code(proc.returncode)
            t = time.monotonic()
            restart = False
            for kind, st in probes.items():
                if t < st["next"] or (kind != "startupProbe" and not self.started):
                    continue
                if kind == "startupProbe" and self.started:
                    continue
                p = st["probe"]
                st["next"] = time.monotonic() + (_number(p.get("periodSeconds"), 10) or 10)
                passed = containers.run_probe(p, container, self.pod_ip, self.env, proc.pid,
                                              self.kubelet.isolated)
                if passed:
                    st["ok"], st["fail"] = st["ok"] + 1, 0
                else:
                    st["ok"], st["fail"] = 0, st["fail"] + 1
                if kind == "readinessProbe":
                    if passed and st["ok"] >= _number(p.get("successThreshold"), 1):
                        self.ready = True
                    elif not passed and st["fail"] >= _number(p.get("failureThreshold"), 3):
                        self.ready = False
                elif passed and kind == "startupProbe":
                    self.started = True
                    self.ready = "readinessProbe" not in probes
                elif not passed and st["fail"] >= _number(p.get("failureThreshold"), 3):
                    log.info("pod %s/%s: %s failed, restarting", self.ns, self.pod_name, kind)
                    restart = True
            if restart:
                self._terminate(_number(self.spec.get("terminationGracePeriodSeconds"), 30))
                return exit_code(proc.returncode)
            self._report()
            due = [st["next"] for st in probes.values()]
            self._wait(min([0.5] + [d - time.monotonic() for d in due]))

    def _terminate(self, grace=None):
        """SIGTERM, then SIGKILL after the grace period, to everything in the container."""
        proc = self.proc
        if proc is None:
            return
        if grace is None:
            meta = self.pod["metadata"]
            grace = meta.get("deletionGracePeriodSeconds")
            if grace is None or self.kubelet.stopping:
                grace = self.kubelet.stop_grace if self.kubelet.stopping else \
                    self.spec.get("terminationGracePeriodSeconds", 30)
        if proc.poll() is None:
            signal_group(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=_number(grace, 30))
            except subprocess.TimeoutExpired:
                pass
        self._kill_everything(signal.SIGKILL, proc)
        proc.wait()

    def running(self):
        proc = self.proc
        return proc is not None and proc.poll() is None

    def signal_all(self, sig):
        """Signals every process of the pod (for the kubelet's stop)."""
        self._kill_everything(sig)

    def _kill_everything(self, sig, proc=None):
        proc = proc or self.proc
        if proc is None:
            return
        signal_group(proc.pid, sig)
        if self.mnt_ns:
            for pid in pids_in_mount_ns(self.mnt_ns):
                try:
                    os.kill(pid, sig)
                except OSError:
                    pass

    def _finish_deletion(self):
        """The process is gone: let the API server remove the pod, then drop its files."""
        if not self.gone and self.pod["metadata"].get("deletionTimestamp"):
            path = resource_path("v1", "pods", self.ns, self.pod_name)
            try:
                self.kubelet.client.delete(path, {"gracePeriodSeconds": 0,
                                                  "preconditions": {"uid": self.uid}})
            except (KubeError, OSError):
                pass
        if self.deleting():
            shutil.rmtree(self.dir, ignore_errors=True)

    # --- status --------------------------------------------------------------------------

    def _condition(self, kind, ok):
        value = "True" if ok else "False"
        old = self.conditions.get(kind)
        if old is None or old[0] != value:
            self.conditions[kind] = (value, now())

    def _container_status(self, container, main):
        st = {"name": container.get("name"), "image": container.get("image", ""),
              "imageID": "", "ready": self.ready, "restartCount": self.restarts,
              "started": self.started, "state": self.state}
        if self.proc is not None and main:
            st["containerID"] = f"fakekube://{self.proc.pid}"
        if self.last_state:
            st["lastState"] = self.last_state
        return st

    def _report(self):
        if self.gone or self.kubelet.stopping:
            return
        running = self.phase == "Running" and "running" in self.state
        self._condition("ContainersReady", running and self.ready)
        self._condition("Ready", running and self.ready)
        order = ("PodScheduled", "Initialized", "ContainersReady", "Ready")
        status = {
            "phase": self.phase,
            "conditions": [{"type": k, "status": self.conditions[k][0], "lastProbeTime": None,
                            "lastTransitionTime": self.conditions[k][1]} for k in order],
            "hostIP": "127.0.0.1", "hostIPs": [{"ip": "127.0.0.1"}],
            "podIP": self.pod_ip, "podIPs": [{"ip": self.pod_ip}],
            "startTime": self.start_time,
            "containerStatuses": [self._container_status(c, n == 0) for n, c in
                                  enumerate(self.spec.get("containers") or [])],
        }
        if self.init_statuses:
            status["initContainerStatuses"] = self.init_statuses
        if status == self.last_sent:
            return
        path = resource_path("v1", "pods", self.ns, self.pod_name, "status")
        try:
            self.kubelet.client.patch(path, {"status": status}, "merge")
            self.last_sent = copy.deepcopy(status)
        except KubeError as e:
            if e.code == 404:
                self.mark_gone()
        except OSError:
            pass


def tmp_roots(path):
    """The directories directly under /tmp that hold entries of a PATH."""
    roots = set()
    for entry in path.split(os.pathsep):
        real = os.path.realpath(entry) if entry else ""
        parts = real.split(os.sep)
        if len(parts) > 2 and parts[1] == "tmp" and parts[2] and os.path.isdir(real):
            roots.add(os.sep.join(parts[:3]))
    return sorted(roots)
