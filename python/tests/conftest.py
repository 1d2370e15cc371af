"""A real oxray cluster (the `oxray` binary, loopback, free ports, temporary home) for the
Python client's tests. OXRAY_BIN picks the binary."""

import json
import os
import subprocess
import tempfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
OXRAY_BIN = os.environ.get("OXRAY_BIN", str(REPO / "target/debug/oxray"))


class Cluster:
    def __init__(self, home: Path):
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("OXRAY_")}
        self.env.update(OXRAY_HOME=str(home / "home"), OXRAY_TEMP_DIR=str(home / "sessions"))

    def oxray(self, *args):
        return subprocess.run([OXRAY_BIN, *args], env=self.env, check=True, capture_output=True, text=True, timeout=60)

    def start(self):
        self.oxray("start", "--head", "--port", "0", "--dashboard-port", "0", "--num-cpus", "2",
                   "--node-ip-address", "127.0.0.1")
        info = json.loads(Path(self.env["OXRAY_HOME"], "current_cluster.json").read_text())
        self.dashboard_url = info["dashboard_url"]
        self.token = self.oxray("get-auth-token").stdout.strip()

    def stop(self):
        subprocess.run([OXRAY_BIN, "stop", "--force"], env=self.env, capture_output=True, timeout=60)


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
