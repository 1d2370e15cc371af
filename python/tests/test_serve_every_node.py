"""Serve's HTTP proxy on every node with a replica (Ray's EveryNode), on two hosts: network
namespaces behind a bridge, each with its own address and its own oxray home. The head runs
in one with no CPUs, an agent in the other, so the replica runs on the agent's host, whose
own proxy must serve it without the head on the request path. Skipped where network
namespaces cannot be made (not root, no `ip`)."""

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from conftest import OXRAY_BIN

SWITCH, HEAD, WORKER = "oxsv-sw", "oxsv-h", "oxsv-w"
ADDRESS = {HEAD: "10.201.0.1", WORKER: "10.201.0.2"}


def ip(*args):
    return subprocess.run(["ip", *args], check=True, capture_output=True, text=True, timeout=30)


def remove_namespaces():
    for ns in (HEAD, WORKER, SWITCH):
        subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=30)


@pytest.fixture(scope="module")
def hosts():
    if os.geteuid() != 0 or not shutil.which("ip"):
        pytest.skip("network namespaces need root and iproute2")
    remove_namespaces()
    try:
        ip("netns", "add", SWITCH)
        ip("-n", SWITCH, "link", "add", "br0", "type", "bridge")
        ip("-n", SWITCH, "link", "set", "br0", "up")
        for ns, address in ADDRESS.items():
            ip("netns", "add", ns)
            ip("link", "add", f"vh-{ns}", "type", "veth", "peer", "name", "eth0", "netns", ns)
            ip("link", "set", f"vh-{ns}", "netns", SWITCH)
            ip("-n", SWITCH, "link", "set", f"vh-{ns}", "master", "br0", "up")
            ip("-n", ns, "addr", "add", f"{address}/24", "dev", "eth0")
            ip("-n", ns, "link", "set", "eth0", "up")
            ip("-n", ns, "link", "set", "lo", "up")
    except subprocess.CalledProcessError as e:
        remove_namespaces()
        pytest.skip(f"cannot make network namespaces here: {e.stderr.strip()}")
    yield
    remove_namespaces()


class Host:
    """One machine: a network namespace with its own oxray home."""

    def __init__(self, ns, root: Path, token=None):
        self.ns = ns
        self.env = {k: v for k, v in os.environ.items() if not k.startswith(("OXRAY_", "RAY_"))}
        self.env.update(OXRAY_HOME=str(root / ns / "home"), OXRAY_TEMP_DIR=str(root / ns / "sessions"))
        if token:
            self.env["OXRAY_AUTH_TOKEN"] = token

    def run(self, *argv, timeout=90, check=True):
        out = subprocess.run(["ip", "netns", "exec", self.ns, *argv], env=self.env, capture_output=True, text=True,
                             timeout=timeout)
        if check:
            assert out.returncode == 0, f"{argv} exited {out.returncode}: {out.stderr}{out.stdout}"
        return out

    def oxray(self, *args):
        return self.run(OXRAY_BIN, *args)

    def python(self, code, check=True):
        return self.run(sys.executable, "-c", code, check=check)

    def get(self, url):
        """(status, body) of a GET from this host, or (None, why) when nothing answered."""
        code = f"""
import sys, urllib.request, urllib.error
try:
    with urllib.request.urlopen({url!r}, timeout=10) as r:
        print(r.status, r.read().decode())
except urllib.error.HTTPError as e:
    print(e.code, e.read().decode())
except OSError as e:
    print("None", e)
"""
        status, _, body = self.python(code).stdout.strip().partition(" ")
        return (None if status == "None" else int(status)), body


@pytest.fixture(scope="module")
def cluster(hosts, tmp_path_factory):
    root = tmp_path_factory.mktemp("every-node")
    head = Host(HEAD, root)
    head.oxray("start", "--head", "--port", "6379", "--num-cpus", "0", "--node-ip-address", ADDRESS[HEAD])
    token = head.oxray("get-auth-token").stdout.strip()
    head.env["OXRAY_AUTH_TOKEN"] = token
    worker = Host(WORKER, root, token)
    worker.oxray("start", "--address", f"{ADDRESS[HEAD]}:6379", "--num-cpus", "2",
                 "--node-ip-address", ADDRESS[WORKER])
    try:
        yield head, worker
    finally:
        for host in (worker, head):
            subprocess.run([OXRAY_BIN, "stop", "--force"], env=host.env, capture_output=True, timeout=60)


DEPLOY = """
import os, socket
import oxray
from oxray import serve

oxray.init(address="{head}:6379")

@serve.deployment(ray_actor_options={{"num_cpus": 1}})
def where(request):
    return f"{{socket.gethostname()}} {{os.getpid()}}"

serve.start(http_options={{"host": "0.0.0.0"}})
serve.run(where.bind(), name="where", route_prefix="/where")
print("deployed")
"""


def head_pid(head: Host) -> int:
    for record in Path(head.env["OXRAY_HOME"], "procs").glob("*.json"):
        info = json.loads(record.read_text())
        if info.get("role") == "head":
            return info["pid"]
    raise AssertionError("no head process record")


def wait_for(what, check, timeout=30.0):
    deadline = time.monotonic() + timeout
    while True:
        got = check()
        if got:
            return got
        assert time.monotonic() < deadline, f"{what}: still {got!r} after {timeout}s"
        time.sleep(0.3)


def test_the_node_of_a_replica_serves_http_itself_also_with_the_head_stopped(cluster):
    head, worker = cluster
    assert "deployed" in head.python(DEPLOY.format(head=ADDRESS[HEAD])).stdout
    url = f"http://{ADDRESS[WORKER]}:8000"
    # The head's proxy serves, and the worker's node runs one too, from the table the head sent.
    assert head.get(f"http://{ADDRESS[HEAD]}:8000/where")[0] == 200
    status, body = wait_for("the worker node's proxy", lambda: (s := head.get(f"{url}/where"))[0] == 200 and s)
    # Both proxies reach the one replica.
    assert body == head.get(f"http://{ADDRESS[HEAD]}:8000/where")[1]
    assert worker.get("http://127.0.0.1:8000/-/healthz") == (200, "success")
    assert head.get(f"{url}/-/routes") == (200, '{"/where":"where"}')
    assert head.get(f"{url}/nowhere")[0] == 404

    # Serve's status lists both proxies, by node.
    details = json.loads(head.python(
        "import os, urllib.request\n"
        "r = urllib.request.Request('http://127.0.0.1:8265/api/serve/applications/',"
        " headers={'Authorization': 'Bearer ' + os.environ['OXRAY_AUTH_TOKEN']})\n"
        "print(urllib.request.urlopen(r).read().decode())").stdout)
    ips = sorted(p["node_ip"] for p in details["proxies"].values())
    assert ips == [ADDRESS[HEAD], ADDRESS[WORKER]], details["proxies"]

    # The head is not on the request path: stopped, the worker's node still serves.
    pid = head_pid(head)
    os.kill(pid, signal.SIGSTOP)
    try:
        for _ in range(5):
            assert head.get(f"{url}/where")[0] == 200
    finally:
        os.kill(pid, signal.SIGCONT)

    # Shut down, Serve leaves no proxy anywhere.
    head.python(f"import oxray; from oxray import serve; oxray.init(address='{ADDRESS[HEAD]}:6379'); "
                "serve.shutdown()")
    wait_for("the worker node's proxy to stop", lambda: head.get(f"{url}/-/healthz")[0] is None)
    wait_for("the head's proxy to stop", lambda: head.get(f"http://{ADDRESS[HEAD]}:8000/-/healthz")[0] is None)
