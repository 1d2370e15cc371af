"""Ray-client compatibility suite: Ray's real client (ray[default]==2.60.0, see
python/requirements-compat.txt) against a real oxray cluster. No mocks.

Run: .venv/bin/python -m pytest tests/compat -q   (OXRAY_BIN picks the binary)
"""

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
OXRAY_BIN = os.environ.get("OXRAY_BIN", str(REPO / "target/debug/oxray"))
VENV_BIN = str(Path(sys.executable).parent)
RAY_CLI = str(Path(VENV_BIN) / "ray")
SERVE_CLI = str(Path(VENV_BIN) / "serve")
# Each `ray` CLI call costs ~1.5 s of imports on a 2-core machine; jobs add more.
TIMEOUT = float(os.environ.get("COMPAT_TIMEOUT", "120"))
TERMINAL = ("SUCCEEDED", "FAILED", "STOPPED")

# Variables that would send Ray's client somewhere else than the address we pass, or
# start/join a local Ray, or make it pick up a token we did not choose.
_FOREIGN = ("RAY_ADDRESS", "RAY_API_SERVER_ADDRESS", "RAY_JOB_HEADERS", "RAY_AUTH_TOKEN",
            "RAY_AUTH_TOKEN_PATH", "OXRAY_ADDRESS", "OXRAY_AUTH_TOKEN")
# Ray reads RAY_AUTH_MODE once per process (C++ config, cached on first use), so the
# in-process SDK tests need it in os.environ before anything of Ray runs. The token
# itself is cached too but can be reset, which the `cluster` fixture does.
for _k in _FOREIGN:
    os.environ.pop(_k, None)
os.environ.update(RAY_AUTH_MODE="token", RAY_USAGE_STATS_ENABLED="0",
                  NO_PROXY="127.0.0.1,localhost", no_proxy="127.0.0.1,localhost")

_ANSI = re.compile(r"\x1b\[[0-9;]*m")


class Result:
    def __init__(self, proc):
        self.returncode = proc.returncode
        self.stdout = _ANSI.sub("", proc.stdout)
        self.stderr = _ANSI.sub("", proc.stderr)
        self.output = self.stdout + self.stderr

    def __repr__(self):  # what pytest shows when an assertion on a Result fails
        return f"<rc={self.returncode}\n--- stdout\n{self.stdout}\n--- stderr\n{self.stderr}>"


class Cluster:
    # Reached through the fixture: `from conftest import` breaks when another conftest.py
    # (python/tests) is collected in the same run.
    timeout = TIMEOUT

    def __init__(self, tmp):
        self.tmp = Path(tmp)
        self.server_env = {k: v for k, v in os.environ.items()
                           if not k.startswith(("RAY_", "OXRAY_"))}
        # `python` in an entrypoint must be a Python with ray installed, as on a Ray node.
        self.server_env.update(OXRAY_HOME=str(self.tmp / "home"),
                               OXRAY_TEMP_DIR=str(self.tmp / "sessions"),
                               PATH=VENV_BIN + os.pathsep + os.environ.get("PATH", ""))
        self.address = self.dashboard_url = self.token = None
        self.env = None

    def oxray(self, *args, check=True):
        p = subprocess.run([OXRAY_BIN, *args], env=self.server_env, capture_output=True,
                           text=True, timeout=60)
        if check and p.returncode:
            pytest.fail(f"oxray {' '.join(args)} exited {p.returncode}:\n{p.stdout}{p.stderr}")
        return p

    def start(self):
        self.oxray("start", "--head", "--port", "0", "--dashboard-port", "0",
                   "--num-cpus", "2", "--node-ip-address", "127.0.0.1")
        info = json.loads((self.tmp / "home/current_cluster.json").read_text())
        self.address, self.dashboard_url = info["address"], info["dashboard_url"]
        self.session_dir = info["session_dir"]
        self.token = self.oxray("get-auth-token").stdout.strip()
        self.oxray("start", "--address", self.address, "--num-cpus", "1",
                   "--resources", '{"accel": 1}', "--node-name", "compat-worker",
                   "--node-ip-address", "127.0.0.1")
        home = self.tmp / "client-home"  # so ~/.ray/auth_token and ~/.ray/* are never the user's
        home.mkdir()
        self.env = {k: v for k, v in os.environ.items() if k not in _FOREIGN}
        self.env.update(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=self.token, HOME=str(home),
                        RAY_USAGE_STATS_ENABLED="0", PYTHONUNBUFFERED="1")
        wait_for(lambda: len([n for n in self.nodes() if n["state"] == "ALIVE"]) == 2,
                 30, "both nodes ALIVE in /api/v0/nodes")

    def ray(self, *args, env=None, timeout=TIMEOUT):
        """Runs Ray's CLI; `--address <dashboard>` is appended to every `ray job`/`ray list` call."""
        args = list(args)
        cut = args.index("--") if "--" in args else len(args)  # options must precede `--`
        args[cut:cut] = ["--address", self.dashboard_url]
        proc = subprocess.run([RAY_CLI, *args], env=env or self.env, capture_output=True,
                              text=True, timeout=timeout, stdin=subprocess.DEVNULL)
        return Result(proc)

    def ray_at_gcs(self, *args, timeout=TIMEOUT):
        """Runs Ray's CLI with the cluster's bootstrap address (`ray logs` finds the dashboard
        through it, as against Ray's GCS)."""
        proc = subprocess.run([RAY_CLI, *args, "--address", self.address], env=self.env, capture_output=True,
                              text=True, timeout=timeout, stdin=subprocess.DEVNULL)
        return Result(proc)

    def serve(self, *args, timeout=TIMEOUT):
        """Runs Ray's `serve` CLI against the dashboard (`-a <dashboard>` appended)."""
        proc = subprocess.run([SERVE_CLI, *args, "-a", self.dashboard_url], env=self.env, capture_output=True,
                              text=True, timeout=timeout, stdin=subprocess.DEVNULL)
        return Result(proc)

    def http(self, method, path, token=True):
        """Raw HTTP, independent of Ray's client: (status, parsed JSON or text)."""
        req = urllib.request.Request(self.dashboard_url + path, method=method)
        if token:
            req.add_header("Authorization", f"Bearer {self.token}")
        try:
            with urllib.request.urlopen(req, timeout=30) as r:
                status, body = r.status, r.read().decode()
        except urllib.error.HTTPError as e:
            status, body = e.code, e.read().decode()
        try:
            return status, json.loads(body)
        except ValueError:
            return status, body

    def nodes(self):
        status, body = self.http("GET", "/api/v0/nodes?detail=False&limit=100")
        assert status == 200, body
        return body["data"]["result"]["result"]

    def job(self, job_id):
        status, body = self.http("GET", f"/api/jobs/{job_id}")
        assert status == 200, (status, body)
        return body

    def wait_job(self, job_id, statuses=TERMINAL, timeout=TIMEOUT):
        """Polls the job over raw HTTP until its status is one of `statuses`; returns it."""
        seen = {}
        def reached():
            seen.update(self.job(job_id))
            return seen["status"] in statuses
        wait_for(reached, timeout, lambda: f"job {job_id} in {statuses}; last seen {seen}")
        return seen

    def stop(self):
        self.oxray("stop", "--force", check=False)

    @staticmethod
    def wait_for(predicate, timeout, what):
        wait_for(predicate, timeout, what)


def wait_for(predicate, timeout, what):
    deadline = time.monotonic() + timeout
    while True:
        if predicate():
            return
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout}s waiting for {what() if callable(what) else what}")
        time.sleep(0.2)


@pytest.fixture(scope="module")
def cluster():
    if not os.access(OXRAY_BIN, os.X_OK):
        pytest.fail(f"no oxray binary at {OXRAY_BIN}: build it, or set OXRAY_BIN")
    tmp = tempfile.mkdtemp(prefix="oxray-compat-")
    c = Cluster(tmp)
    try:
        c.start()
        # The in-process SDK reads the token from the env; its cached copy belongs to the
        # previous module's cluster.
        os.environ["RAY_AUTH_TOKEN"] = c.token
        from ray._raylet import AuthenticationTokenLoader
        AuthenticationTokenLoader.instance().reset_cache()
        yield c
    finally:
        c.stop()
        if os.environ.get("COMPAT_KEEP"):  # keep logs of the cluster for debugging
            print(f"\noxray compat cluster kept at {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)


@pytest.fixture
def sdk(cluster):
    from ray.job_submission import JobSubmissionClient
    return JobSubmissionClient(cluster.dashboard_url)
