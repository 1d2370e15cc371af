"""A real oxray cluster (the `oxray` binary, loopback, free ports, temporary home) for the
Python client's tests. OXRAY_BIN picks the binary."""

import contextlib
import json
import os
import subprocess
import tempfile
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
OXRAY_BIN = os.environ.get("OXRAY_BIN", str(REPO / "target/debug/oxray"))


class Cluster:
    def __init__(self, home: Path):
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("OXRAY_")}
        self.env.update(OXRAY_HOME=str(home / "home"), OXRAY_TEMP_DIR=str(home / "sessions"))

    def oxray(self, *args):
        out = subprocess.run([OXRAY_BIN, *args], env=self.env, capture_output=True, text=True, timeout=60)
        # What the command said, in the failure: a cluster that did not start says why there.
        assert out.returncode == 0, f"oxray {' '.join(args)} exited {out.returncode}: {out.stderr}{out.stdout}"
        return out

    def start(self, cpus=2, *head_args):
        self.oxray("start", "--head", "--port", "0", "--dashboard-port", "0", "--num-cpus", str(cpus),
                   "--node-ip-address", "127.0.0.1", *head_args)
        info = json.loads(Path(self.env["OXRAY_HOME"], "current_cluster.json").read_text())
        self.dashboard_url = info["dashboard_url"]
        self.token = self.oxray("get-auth-token").stdout.strip()

    def stop(self):
        subprocess.run([OXRAY_BIN, "stop", "--force"], env=self.env, capture_output=True, timeout=60)

    def start_head_and_agents(self, agents, *agent_args):
        """A head with 1 CPU (a node is dead after 2 s without heartbeats) and an agent with 2
        CPUs per name in `agents`."""
        self.oxray("start", "--head", "--port", "0", "--dashboard-port", "0", "--num-cpus", "1",
                   "--node-ip-address", "127.0.0.1", "--node-death-timeout-s", "2")
        self.address = json.loads(Path(self.env["OXRAY_HOME"], "current_cluster.json").read_text())["address"]
        for name in agents:
            self.oxray("start", "--address", self.address, "--num-cpus", "2", *agent_args,
                       "--node-ip-address", "127.0.0.1", "--node-name", name)


def api(cluster, path, **params):
    """An HTTP response of the cluster's dashboard port at `path`, with the token and the
    query Ray's clients send (repeated keys as lists)."""
    query = urllib.parse.urlencode(params, doseq=True)
    request = urllib.request.Request(f"{cluster.dashboard_url}{path}?{query}",
                                     headers={"Authorization": f"Bearer {cluster.token}"})
    return urllib.request.urlopen(request, timeout=15)


def state(cluster, path, **params):
    """`data.result` of a call of Ray's state API (`/api/v0/<path>`)."""
    with api(cluster, f"/api/v0/{path}", **params) as response:
        body = json.loads(response.read())
    assert body["result"] is True, body
    return body["data"]["result"]


def agent_pid(cluster, node_name):
    """The pid of the agent that runs `node_name`, from its process record."""
    for record in Path(cluster.env["OXRAY_HOME"], "procs").glob("*.json"):
        try:
            info = json.loads(record.read_text())
            argv = Path(f"/proc/{info['pid']}/cmdline").read_bytes().split(b"\0")
        except FileNotFoundError:  # an agent killed before, or a record removed meanwhile
            continue
        if info.get("role") == "agent" and node_name.encode() in argv:
            return info["pid"]
    raise AssertionError(f"no agent record for {node_name}")


@contextlib.contextmanager
def driver_of(cluster, **init_options):
    """This process as a driver of `cluster` (`oxray.init`), for a module's tests."""
    import oxray

    names = ("OXRAY_ADDRESS", "OXRAY_AUTH_TOKEN", "OXRAY_HOME")
    saved = {k: os.environ.pop(k) for k in names if k in os.environ}
    os.environ["OXRAY_HOME"] = cluster.env["OXRAY_HOME"]
    oxray.init(**init_options)
    try:
        yield
    finally:
        oxray.shutdown()
        os.environ.pop("OXRAY_HOME", None)
        os.environ.update(saved)


@pytest.fixture(scope="module")
def cluster():
    with tempfile.TemporaryDirectory(prefix="oxray-py-") as tmp:
        c = Cluster(Path(tmp))
        c.start()
        try:
            yield c
        finally:
            c.stop()


@pytest.fixture
def client_env(cluster, monkeypatch):
    """The environment a user of this machine's cluster has."""
    for key in ("OXRAY_DASHBOARD_URL", "RAY_ADDRESS", "OXRAY_AUTH_TOKEN"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("OXRAY_HOME", cluster.env["OXRAY_HOME"])
    return cluster


@pytest.fixture(scope="module")
def private_cluster(tmp_path_factory):
    """`oxray.init` with no cluster to join: a private one for this test module."""
    import oxray

    names = ("OXRAY_ADDRESS", "OXRAY_AUTH_TOKEN", "OXRAY_HOME", "OXRAY_BIN")
    saved = {k: os.environ.pop(k) for k in names if k in os.environ}
    os.environ.update(OXRAY_BIN=OXRAY_BIN, OXRAY_HOME=str(tmp_path_factory.mktemp("private-home")))
    oxray.init(num_cpus=2, resources={"accel": 1})
    yield
    oxray.shutdown()
    for k in names:
        os.environ.pop(k, None)
    os.environ.update(saved)
