"""The head's HTTP API on the dashboard port, from outside: its OpenAPI document, a bounded
schemathesis run against it (no 5xx, no route that skips the token, no undocumented status),
and a flood of requests (wrk) that leaves the API answering with the head's memory flat.

Run: make test-api (the tools venv has schemathesis and pytest; wrk comes from Debian's
packages). OXRAY_BIN: the oxray to start [default: target/debug/oxray].
"""

import json
import os
import re
import shutil
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
OXRAY_BIN = os.environ.get("OXRAY_BIN", str(REPO / "target" / "debug" / "oxray"))
TOOLS = Path(os.environ.get("OXRAY_TOOLS_DIR", REPO / ".tools"))


class Head:
    def __init__(self, home: Path):
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("OXRAY_")}
        self.env.update(OXRAY_HOME=str(home / "home"), OXRAY_TEMP_DIR=str(home / "sessions"))

    def oxray(self, *args):
        out = subprocess.run([OXRAY_BIN, *args], env=self.env, capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, f"oxray {' '.join(args)} exited {out.returncode}: {out.stderr}{out.stdout}"
        return out.stdout

    def start(self):
        self.oxray("start", "--head", "--port", "0", "--dashboard-port", "0", "--num-cpus", "2",
                   "--node-ip-address", "127.0.0.1")
        home = Path(self.env["OXRAY_HOME"])
        self.url = json.loads((home / "current_cluster.json").read_text())["dashboard_url"]
        self.token = self.oxray("get-auth-token").strip()
        records = [json.loads(p.read_text()) for p in (home / "procs").glob("*.json")]
        self.pid = next(r["pid"] for r in records if r.get("role") == "head")

    def call(self, path, token=True, timeout=15):
        """(status, body) of a GET."""
        headers = {"Authorization": f"Bearer {self.token}"} if token else {}
        request = urllib.request.Request(self.url + path, headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:
                return response.status, response.read()
        except urllib.error.HTTPError as e:
            return e.code, e.read()

    def rss(self):
        status = Path(f"/proc/{self.pid}/status").read_text()
        return int(re.search(r"VmRSS:\s+(\d+) kB", status).group(1)) * 1024


@pytest.fixture(scope="module")
def head(tmp_path_factory):
    h = Head(tmp_path_factory.mktemp("api"))
    try:
        h.start()
        yield h
    finally:
        subprocess.run([OXRAY_BIN, "stop", "--force"], env=h.env, capture_output=True, timeout=60)


def test_the_openapi_document_describes_the_api_and_needs_the_token(head):
    assert head.call("/api/openapi.json", token=False)[0] == 401
    status, body = head.call("/api/openapi.json")
    assert status == 200
    doc = json.loads(body)
    assert doc["openapi"].startswith("3.")
    operations = [(m.upper(), p) for p, methods in doc["paths"].items() for m in methods]
    for wanted in [("GET", "/api/v0/tasks"), ("POST", "/api/jobs/"), ("PUT", "/api/serve/applications/"),
                   ("PUT", "/api/packages/{protocol}/{name}"), ("GET", "/api/openapi.json"), ("GET", "/metrics")]:
        assert wanted in operations
    # Every route without parameters in its path is there to answer, not the fallback's 404.
    for method, path in operations:
        if method == "GET" and "{" not in path and not path.endswith("/tail"):
            assert head.call(path)[0] != 404, path
    public = {p for p, methods in doc["paths"].items() for m in methods.values() if "security" not in m}
    assert public == {"/", "/-/healthz", "/api/gcs_healthz", "/api/version", "/api/ray/version",
                      "/api/authentication_mode", "/api/authenticate", "/static/{name}"}


def test_a_bounded_fuzz_of_every_operation_finds_no_server_error(head, tmp_path):
    st = TOOLS / "venv" / "bin" / "schemathesis"
    if not st.exists():
        pytest.skip(f"{st} is missing: make tools installs it")
    run = subprocess.run(
        [str(st), "run", f"{head.url}/api/openapi.json", "-H", f"Authorization: Bearer {head.token}",
         "--checks", "not_a_server_error,ignored_auth,status_code_conformance",
         "--phases", "coverage,fuzzing", "--max-examples", "25", "--workers", "1", "--no-color"],
        capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert run.returncode == 0, run.stdout[-8000:] + run.stderr[-2000:]
    assert re.search(r"\d+ generated, \d+ passed", run.stdout), run.stdout[-2000:]
    # The head lives on, and answers.
    assert head.call("/api/v0/nodes")[0] == 200


def _flood(head, path, seconds, token=True):
    wrk = shutil.which("wrk")
    headers = ["-H", f"Authorization: Bearer {head.token}"] if token else []
    out = subprocess.run([wrk, "-t2", "-c64", f"-d{seconds}s", "--latency", *headers, head.url + path],
                         capture_output=True, text=True, timeout=seconds + 60)
    assert out.returncode == 0, out.stderr
    return out.stdout


@pytest.mark.skipif(not shutil.which("wrk"), reason="wrk is missing: make setup installs it")
def test_a_flood_of_requests_leaves_the_api_answering_and_memory_flat(head):
    paths = ["/api/v0/nodes", "/api/jobs/", "/metrics", "/api/v0/tasks?limit=100"]
    for path in paths:  # warm up: allocators and caches reach their working size
        _flood(head, path, 2)
    before = head.rss()
    for path in paths:
        out = _flood(head, path, 4)
        assert re.search(r"Requests/sec:\s+[\d.]+", out), out
        # Non-2xx answers would show in wrk's summary.
        assert "Non-2xx" not in out, out
    out = _flood(head, "/api/v0/nodes", 4, token=False)
    assert "Non-2xx or 3xx responses" in out, "without the token every answer is 401"
    after = head.rss()
    assert after < before * 1.5 + (16 << 20), f"the head grew from {before >> 20} to {after >> 20} MiB"
    status, _ = head.call("/api/version", timeout=5)
    assert status == 200
