import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import oxray
from oxray._private import worker

from conftest import OXRAY_BIN


@pytest.fixture
def no_cluster(tmp_path, monkeypatch):
    """A machine where no cluster runs: an empty oxray home and no address."""
    for key in ("OXRAY_ADDRESS", "OXRAY_AUTH_TOKEN", "OXRAY_DASHBOARD_URL"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("OXRAY_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("OXRAY_BIN", OXRAY_BIN)
    yield
    oxray.shutdown()


def live_pids(home):
    procs = Path(home) / "procs"
    pids = [json.loads(p.read_text())["pid"] for p in procs.glob("*.json")] if procs.is_dir() else []
    return [p for p in pids if _alive(p)]


def _alive(pid):
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rfind(")") + 2] != "Z"


def wait_until(check, timeout=20):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if check():
            return True
        time.sleep(0.05)
    return False


def test_init_without_a_cluster_starts_a_private_one_and_stops_it(no_cluster):
    ctx = oxray.init(num_cpus=3, resources={"accel": 2}, labels={"zone": "z1"})
    assert oxray.is_initialized()
    assert ctx.address.startswith("127.0.0.1:") and ctx.dashboard_url.startswith("http://")
    resources = oxray.cluster_resources()
    assert resources["CPU"] == 3 and resources["accel"] == 2 and "GPU" not in resources
    assert oxray.available_resources()["CPU"] == 3
    (node,) = oxray.nodes()
    assert node["Alive"] and node["IsHeadNode"] and len(node["NodeID"]) == 56
    assert node["Labels"]["zone"] == "z1", "init(labels=...) labels the new cluster's node"
    home = worker.client().local_home
    pids = live_pids(home)
    assert len(pids) == 2, "a head and its node"
    oxray.shutdown()
    assert not oxray.is_initialized()
    assert wait_until(lambda: not live_pids(home)), "the private cluster stopped with shutdown"


def test_init_labels_are_checked():
    with pytest.raises(TypeError, match="labels"):
        oxray.init(labels={"zone": 1})
    with pytest.raises(ValueError, match="cannot be empty"):
        oxray.init(labels={"zone": "a,b"})
    assert not oxray.is_initialized()


def test_other_processes_of_the_user_join_a_private_cluster_by_its_address(no_cluster):
    """As with Ray, a second driver, the CLI and a jobs client given the address of the
    cluster a script's `init()` started can use it: they find its token on this machine."""
    ctx = oxray.init(num_cpus=2)
    env = {k: v for k, v in os.environ.items() if k != "OXRAY_AUTH_TOKEN"}
    second = ("import oxray, sys; oxray.init(address=sys.argv[1]); "
              "print(oxray.get(oxray.remote(lambda: 'joined').remote(), timeout=60), oxray.cluster_resources()['CPU'])")
    out = subprocess.run([sys.executable, "-c", second, ctx.address], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.split() == ["joined", "2.0"], out.stderr
    status = subprocess.run([OXRAY_BIN, "status", "--address", ctx.address], env=env, capture_output=True, text=True,
                            timeout=60)
    assert status.returncode == 0 and "/2.0 CPU" in status.stdout, status.stdout + status.stderr
    jobs = ("import sys; from oxray.job_submission import JobSubmissionClient; "
            "print(*sorted((j.type.value, j.status.value) for j in JobSubmissionClient(sys.argv[1]).list_jobs()))")
    out = subprocess.run([sys.executable, "-c", jobs, ctx.dashboard_url], env=env, capture_output=True, text=True,
                         timeout=60)
    # No submission: the two drivers, this one running and the second one ended.
    assert out.returncode == 0 and out.stdout.split() == ["('DRIVER',", "'RUNNING')", "('DRIVER',", "'SUCCEEDED')"], (
        out.stdout + out.stderr)
    oxray.shutdown()
    out = subprocess.run([sys.executable, "-c", second, ctx.address], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode != 0 and "ConnectionError" in out.stderr, "a stopped cluster is not found"


def test_a_killed_driver_takes_its_private_cluster_along(no_cluster):
    script = "import oxray, sys; oxray.init(); print(oxray._private.worker.client().local_home, flush=True); sys.stdin.read()"
    driver = subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    home = driver.stdout.readline().strip()
    assert wait_until(lambda: len(live_pids(home)) == 2)
    pids = live_pids(home)
    driver.send_signal(signal.SIGKILL)
    driver.wait()
    assert wait_until(lambda: not any(_alive(p) for p in pids)), "nothing outlives a SIGKILLed driver"


def test_init_joins_the_cluster_started_on_this_machine(client_env, monkeypatch):
    monkeypatch.delenv("OXRAY_ADDRESS", raising=False)
    ctx = oxray.init()
    try:
        assert worker.client().local_home is None
        assert ctx.dashboard_url == client_env.dashboard_url
        assert oxray.cluster_resources()["CPU"] == 2
        with pytest.raises(RuntimeError, match="init twice"):
            oxray.init()
        assert oxray.init(ignore_reinit_error=True).address == ctx.address
    finally:
        oxray.shutdown()
    with pytest.raises(ValueError, match="cannot be given when connecting"):
        oxray.init("auto", num_cpus=4)


def test_auto_without_a_cluster_and_a_wrong_token_fail_clearly(no_cluster, cluster, monkeypatch):
    with pytest.raises(ConnectionError, match="could not find a running cluster"):
        oxray.init("auto")
    address = json.loads(Path(cluster.env["OXRAY_HOME"], "current_cluster.json").read_text())["address"]
    monkeypatch.setenv("OXRAY_AUTH_TOKEN", "wrong-token")
    with pytest.raises(ConnectionError, match="refused the cluster token"):
        oxray.init(address)
    assert not oxray.is_initialized()


def test_a_job_connects_to_its_own_cluster(client_env):
    from oxray.job_submission import JobSubmissionClient
    from test_job_submission import wait_terminal

    client = JobSubmissionClient()
    code = ("import oxray; oxray.init(); print('cpus', oxray.cluster_resources()['CPU'], "
            "'job', oxray.get_runtime_context().get_job_id()); oxray.shutdown()")
    job_id = client.submit_job(entrypoint=f"{sys.executable} -c \"{code}\"")
    status = wait_terminal(client, job_id)
    logs = client.get_job_logs(job_id)
    assert str(status) == "SUCCEEDED", logs
    assert f"cpus 2.0 job {client.get_job_info(job_id).job_id}" in logs
