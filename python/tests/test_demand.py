"""What an autoscaler reads: a head started for autoscaling (OXRAY_AUTOSCALING) lets tasks
and actors no node can hold wait, reports them in /api/cluster_status as shapes with counts
(and `oxray status` as lines), with how long each node has been idle; a node that can hold
them, once it joins, runs them. Without autoscaling such work fails at once."""

import json
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import pytest

from conftest import Cluster, api
from netns import wait_for

WAITER = """
import oxray, sys
oxray.init(address=sys.argv[1])

@oxray.remote(num_cpus=0, resources={"special": 1})
def where():
    return oxray.get_runtime_context().get_node_id()

@oxray.remote(num_cpus=0, resources={"special": 2})
class Big:
    def node(self):
        return oxray.get_runtime_context().get_node_id()

@oxray.remote(num_cpus=1, label_selector={"accelerator": "A100"})
def labelled():
    return oxray.get_runtime_context().get_node_id()

big = Big.remote()
on_a100 = labelled.remote()
print("done", len(set(oxray.get([where.remote() for _ in range(3)]))), oxray.get(big.node.remote()),
      oxray.get(on_a100), flush=True)
"""


def cluster_status(cluster):
    with api(cluster, "/api/cluster_status") as response:
        return json.loads(response.read())["data"]["cluster_status"]


@pytest.fixture
def autoscaled():
    with tempfile.TemporaryDirectory(prefix="oxray-demand-") as tmp:
        c = Cluster(Path(tmp))
        c.env["OXRAY_AUTOSCALING"] = "1"
        c.start(1)
        c.address = json.loads(Path(c.env["OXRAY_HOME"], "current_cluster.json").read_text())["address"]
        try:
            yield c
        finally:
            c.stop()


def test_work_no_node_holds_waits_is_reported_and_runs_once_a_node_joins(autoscaled):
    driver = subprocess.Popen([sys.executable, "-c", WAITER, autoscaled.address], env=dict(autoscaled.env),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        def waiting():
            return {json.dumps([p["resources"], p.get("label_selector", {})], sort_keys=True): p["count"]
                    for p in cluster_status(autoscaled).get("pending_resources", [])}

        # The backlog is read as the driver asks again: all three tasks once they are queued.
        # The head's CPU is free, but it lacks the label the last task selects.
        wanted = {'[{"special": 1.0}, {}]': 3, '[{"special": 2.0}, {}]': 1, '[{"CPU": 1.0}, {"accelerator": "A100"}]': 1}
        try:
            wait_for("the demand", lambda: waiting() == wanted)
        except AssertionError:
            raise AssertionError(f"waiting: {waiting()}") from None
        alive = cluster_status(autoscaled)["alive"]
        assert alive[0]["idle_s"] >= 0, alive
        lines = autoscaled.oxray("status").stdout
        assert "{special: 1} * 3 (tasks, actors and placement groups)" in lines, lines
        assert "{CPU: 1} * 1 on nodes with {accelerator: A100} (tasks, actors and placement groups)" in lines, lines
        assert driver.poll() is None, driver.communicate()

        # The node an autoscaler would add.
        autoscaled.oxray("start", "--address", autoscaled.address, "--num-cpus", "1", "--resources",
                         '{"special": 3}', "--labels", "accelerator=A100", "--node-ip-address", "127.0.0.1",
                         "--node-name", "added")
        out, err = driver.communicate(timeout=60)
        assert driver.returncode == 0 and out.startswith("done 1 "), (out, err)
        wait_for("no demand", lambda: not cluster_status(autoscaled).get("pending_resources"))
    finally:
        if driver.poll() is None:
            driver.kill()


def test_without_autoscaling_work_no_node_holds_fails_at_once(cluster):
    code = """
import oxray, sys
oxray.init(address=sys.argv[1])

@oxray.remote(num_cpus=0, resources={"special": 1})
def f():
    return 1

try:
    oxray.get(f.remote(), timeout=20)
except Exception as e:
    print("failed:", e)
"""
    address = json.loads(Path(cluster.env["OXRAY_HOME"], "current_cluster.json").read_text())["address"]
    started = time.monotonic()
    out = subprocess.run([sys.executable, "-c", code, address], env=dict(cluster.env), capture_output=True, text=True,
                         timeout=60)
    assert "failed:" in out.stdout and "no node of the cluster can hold" in out.stdout, out
    assert time.monotonic() - started < 15


def test_autoscaling_turned_on_live_reaches_the_agents(cluster):
    """What the operator does when `enableInTreeAutoscaling` is turned on for a running
    cluster: after it, work no node holds waits (and is reported) instead of failing."""
    request = urllib.request.Request(f"{cluster.dashboard_url}/api/autoscaling", method="PUT",
                                     data=json.dumps({"enabled": True}).encode(),
                                     headers={"Authorization": f"Bearer {cluster.token}",
                                              "Content-Type": "application/json"})
    urllib.request.urlopen(request, timeout=15).close()
    with api(cluster, "/api/cluster_status") as response:
        assert json.loads(response.read())["data"]["autoscaling_enabled"] is True
    address = json.loads(Path(cluster.env["OXRAY_HOME"], "current_cluster.json").read_text())["address"]
    # The agents hear of it with their next heartbeat; until then such work fails at once.
    code = """
import oxray, sys, time
oxray.init(address=sys.argv[1])

@oxray.remote(num_cpus=0, resources={"special": 1})
def f():
    return 1

for _ in range(20):
    try:
        oxray.get(f.remote(), timeout=3)
    except oxray.exceptions.GetTimeoutError:
        print("waits")
        break
    except Exception:
        time.sleep(0.5)
"""
    out = subprocess.run([sys.executable, "-c", code, address], env=dict(cluster.env), capture_output=True, text=True,
                         timeout=60)
    assert "waits" in out.stdout, out
