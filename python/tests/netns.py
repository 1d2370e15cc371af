"""Hosts on one machine for multi-host tests: network namespaces behind a bridge (in a switch
namespace of their own, so no traffic leaves them), each host with its own address, hostname,
/dev/shm and oxray home. A host's link can be cut and healed at the switch. Needs root and
iproute2; `Network.make` skips the test where namespaces cannot be made."""

import contextlib
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import OXRAY_BIN


def ip(*args):
    return subprocess.run(["ip", *args], check=True, capture_output=True, text=True, timeout=30)


class Network:
    """A switch and hosts named `prefix-<name>`, at `subnet.<n>` (n from 1, in order)."""

    def __init__(self, prefix, subnet, names):
        self.switch = f"{prefix}-sw"
        self.namespaces = {name: f"{prefix}-{name}" for name in names}
        self.address = {name: f"{subnet}.{i}" for i, name in enumerate(names, start=1)}

    def _link(self, name):
        return f"vh-{self.namespaces[name]}"[:15]

    def remove(self):
        for ns in [*self.namespaces.values(), self.switch]:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=30)

    def make(self):
        if os.geteuid() != 0 or not shutil.which("ip") or not shutil.which("nsenter"):
            pytest.skip("network namespaces need root, iproute2 and nsenter")
        self.remove()
        try:
            ip("netns", "add", self.switch)
            ip("-n", self.switch, "link", "add", "br0", "type", "bridge")
            ip("-n", self.switch, "link", "set", "br0", "up")
            for name, ns in self.namespaces.items():
                ip("netns", "add", ns)
                ip("link", "add", self._link(name), "type", "veth", "peer", "name", "eth0", "netns", ns)
                ip("link", "set", self._link(name), "netns", self.switch)
                ip("-n", self.switch, "link", "set", self._link(name), "master", "br0", "up")
                ip("-n", ns, "addr", "add", f"{self.address[name]}/24", "dev", "eth0")
                ip("-n", ns, "link", "set", "eth0", "up")
                ip("-n", ns, "link", "set", "lo", "up")
        except subprocess.CalledProcessError as e:
            self.remove()
            pytest.skip(f"cannot make network namespaces here: {e.stderr.strip()}")

    def cut(self, name):
        """Nothing reaches the host or leaves it until `heal`."""
        ip("-n", self.switch, "link", "set", self._link(name), "down")

    def heal(self, name):
        ip("-n", self.switch, "link", "set", self._link(name), "up")


class Host:
    """One machine of a `Network`: its namespace, a hostname and /dev/shm of its own (a mount
    and UTS namespace made when its oxray starts, which later commands enter), an oxray home."""

    def __init__(self, network, name, root: Path, token=None):
        self.name, self.ns = name, network.namespaces[name]
        self.address = network.address[name]
        self.env = {k: v for k, v in os.environ.items() if not k.startswith(("OXRAY_", "RAY_"))}
        self.env.update(OXRAY_HOME=str(root / name / "home"), OXRAY_TEMP_DIR=str(root / name / "sessions"))
        if token:
            self.env["OXRAY_AUTH_TOKEN"] = token
        self.pid = None

    def _argv(self, argv):
        if self.pid:
            return ["nsenter", "-t", str(self.pid), "-n", "-m", "-u", *argv]
        return ["ip", "netns", "exec", self.ns, *argv]

    def run(self, *argv, timeout=90, check=True):
        out = subprocess.run(self._argv(argv), env=self.env, capture_output=True, text=True, timeout=timeout)
        if check:
            assert out.returncode == 0, f"{argv} on {self.name} exited {out.returncode}: {out.stderr}{out.stdout}"
        return out

    def start(self, *args, node_ip=True, program=OXRAY_BIN):
        """`oxray start` with `args` (or `program`'s, `ray` say), as this host's first process:
        the oxray processes keep the host's hostname and /dev/shm, and later commands enter
        them. `node_ip=False` leaves the node's address to the arguments or for oxray to find.
        Returns what `start` printed."""
        setup = f'mount -t tmpfs -o size=512m tmpfs /dev/shm && hostname {self.ns} && exec "$@"'
        address = ["--node-ip-address", self.address] if node_ip else []
        out = self.run("unshare", "-u", "-m", "--propagation", "private", "sh", "-c", setup, "sh", program,
                       "start", *args, *address)
        self.pid = self.role_pid("head" if "--head" in args else "agent")
        return out

    def oxray(self, *args):
        return self.run(OXRAY_BIN, *args)

    def python(self, code, check=True, timeout=90):
        return self.run(sys.executable, "-c", code, check=check, timeout=timeout)

    def popen(self, code=None, argv=None):
        """A Python process on this host (code, or a script's argv), left running; its stdout is
        a pipe of lines."""
        args = ["-u", "-c", code] if code is not None else ["-u", *argv]
        return subprocess.Popen(self._argv([sys.executable, *args]), env=self.env, text=True,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT)

    def stop(self):
        """A clean stop (its agent removes its object store, which a private /dev/shm would
        otherwise take along and leave the spill folder in the shared /tmp), else a forced one."""
        if subprocess.run([OXRAY_BIN, "stop"], env=self.env, capture_output=True, timeout=60).returncode != 0:
            subprocess.run([OXRAY_BIN, "stop", "--force"], env=self.env, capture_output=True, timeout=60)

    def role_pid(self, role):
        for record in Path(self.env["OXRAY_HOME"], "procs").glob("*.json"):
            info = json.loads(record.read_text())
            if info.get("role") == role:
                return info["pid"]
        raise AssertionError(f"no {role} process record on {self.name}")

    def get(self, url):
        """(status, body) of a GET from this host, or (None, why) when nothing answered."""
        code = f"""
import http.client, sys, urllib.request, urllib.error
try:
    with urllib.request.urlopen({url!r}, timeout=10) as r:
        print(r.status, r.read().decode())
except urllib.error.HTTPError as e:
    print(e.code, e.read().decode())
except (OSError, http.client.HTTPException) as e:
    print("None", repr(e))
"""
        status, _, body = self.python(code).stdout.strip().partition(" ")
        return (None if status == "None" else int(status)), body


class Started:
    """A cluster on a `Network`'s hosts: its head (the first host), its token, what the
    head's `oxray start` printed, and the hosts that joined."""

    def __init__(self, network, root):
        self.network, self.root = network, root
        self.hosts, self.on_exit = {}, []

    def host(self, name, env=None):
        """A host of the cluster, stopped at the end; nothing started on it yet."""
        host = Host(self.network, name, self.root, getattr(self, "token", None))
        host.env.update(env or {})
        self.hosts[name] = host  # before it starts: a half-started host is stopped too
        return host

    def join(self, name, *args, env=None, port=6379):
        """A node on host `name` joining the head at its port, with `args` for `oxray start`."""
        host = self.host(name, env)
        host.start("--address", f"{self.network.address[self.head.name]}:{port}", *args)
        return host


@contextlib.contextmanager
def cluster(network, root, *head_args, env=None):
    """Makes `network`, starts the head on its first host (port 6379, with `head_args` and
    `env`) and yields a `Started` to join other hosts to; stops every host (the newest
    first), runs `on_exit` and removes the network however the body ends."""
    network.make()
    started = Started(network, root)
    try:
        started.head = started.host(next(iter(network.address)), env)
        started.banner = started.head.start("--head", "--port", "6379", *head_args)
        started.token = started.head.oxray("get-auth-token").stdout.strip()
        started.head.env["OXRAY_AUTH_TOKEN"] = started.token
        yield started
    finally:
        for host in reversed(list(started.hosts.values())):
            host.stop()
        for cleanup in started.on_exit:
            cleanup()
        network.remove()


def cross_host_work(driver, head):
    """Runs on `driver` (a Host) a driver of the cluster whose head is at `head`: an 8 MiB
    object made by a task and 10 calls of an actor, both on the host with CPUs. Returns
    [the task's hostname, the object's size, [the actor's hostname, its sum]]."""
    out = driver.python(f"""
import json, os, socket
import oxray
oxray.init(address="{head}")

@oxray.remote(num_cpus=1)
def make(n):
    return socket.gethostname(), os.urandom(n)

@oxray.remote(num_cpus=1)
class Counter:
    def __init__(self):
        self.n = 0
    def add(self, k):
        self.n += k
        return socket.gethostname(), self.n

host, blob = oxray.get(make.remote(8 << 20))
counter = Counter.remote()
calls = oxray.get([counter.add.remote(k) for k in range(1, 11)])
print(json.dumps([host, len(blob), calls[-1]]))
""")
    return json.loads(out.stdout.strip().splitlines()[-1])


def wait_for(what, check, timeout=30.0):
    deadline = time.monotonic() + timeout
    while True:
        got = check()
        if got:
            return got
        assert time.monotonic() < deadline, f"{what}: still {got!r} after {timeout}s"
        time.sleep(0.3)
