"""A node dies mid-workload (its agent is SIGKILLed, and its workers with it): tasks run
again elsewhere, actors restart elsewhere, nothing is lost and nothing hangs."""

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

import oxray

from conftest import Cluster, agent_pid, driver_of


@pytest.fixture(scope="module")
def three_nodes(tmp_path_factory):
    """A head node with 1 CPU and two more nodes with 2 CPUs and a `slot` each."""
    cluster = Cluster(tmp_path_factory.mktemp("three-nodes"))
    try:
        cluster.start_head_and_agents(("node-b", "node-c"), "--resources", '{"slot": 2}')
        with driver_of(cluster):
            yield cluster, {n["NodeName"]: n["NodeID"] for n in oxray.nodes()}
    finally:  # a test that failed midway leaves no cluster behind
        cluster.stop()


@oxray.remote(resources={"slot": 1})
def slow_square(x):
    time.sleep(1.0)
    return x * x, os.environ["OXRAY_NODE_ID"]


@oxray.remote(resources={"slot": 1}, max_restarts=2, max_task_retries=-1)
class Counter:
    def __init__(self):
        self.n = 0

    def incr(self):
        self.n += 1
        return self.n, os.environ["OXRAY_NODE_ID"]


def test_work_survives_the_loss_of_a_node(three_nodes):
    cluster, nodes = three_nodes
    counter = Counter.remote()
    _, actor_node = oxray.get(counter.incr.remote())
    victim = next(name for name, node in nodes.items() if node == actor_node)
    survivor = nodes["node-c" if victim == "node-b" else "node-b"]
    refs = [slow_square.options(scheduling_strategy="SPREAD").remote(i) for i in range(8)]
    time.sleep(0.5)  # tasks are running on both nodes now
    os.kill(agent_pid(cluster, victim), signal.SIGKILL)
    results = oxray.get(refs, timeout=120)
    assert [value for value, _ in results] == [i * i for i in range(8)], "no task is lost"
    n, node = oxray.get(counter.incr.remote(), timeout=120)
    assert (n, node) == (1, survivor), "the actor started again, fresh, on the surviving node"
    dead = [n for n in oxray.nodes() if not n["Alive"]]
    assert [n["NodeID"] for n in dead] == [actor_node]


def _wait_gone(pid):
    """Until `pid` has exited (a zombie counts: nothing may reap it here)."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            if Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
                return
        except FileNotFoundError:
            return
        time.sleep(0.01)
    raise AssertionError(f"process {pid} did not exit")


def restart_head(cluster):
    """SIGKILLs the cluster's head and starts it again with the same flags and ports; returns
    the new head's process (the caller stops it) and its log."""
    records = [json.loads(p.read_text()) for p in Path(cluster.env["OXRAY_HOME"], "procs").glob("*.json")]
    head_pid = next(r["pid"] for r in records if r.get("role") == "head")
    argv = [a.decode() for a in Path(f"/proc/{head_pid}/cmdline").read_bytes().split(b"\0") if a]
    current = json.loads(Path(cluster.env["OXRAY_HOME"], "current_cluster.json").read_text())
    port = int(current["address"].rsplit(":", 1)[1])
    argv[argv.index("--port") + 1] = str(port)  # it was started on a free port
    if current.get("dashboard_url") and "--dashboard-port" in argv:
        # So do clients that found it through the cluster file.
        argv[argv.index("--dashboard-port") + 1] = current["dashboard_url"].rsplit(":", 1)[1]
    os.kill(head_pid, signal.SIGKILL)
    _wait_gone(head_pid)
    log = Path(cluster.env["OXRAY_HOME"]).parent / "restarted-head.log"
    deadline = time.monotonic() + 30
    while True:
        head = subprocess.Popen(argv, env=cluster.env, stdout=subprocess.DEVNULL, stderr=log.open("w"),
                                start_new_session=True)
        while "head serving" not in log.read_text() and head.poll() is None:
            assert time.monotonic() < deadline, "the head did not come back"
            time.sleep(0.05)
        # The port was a free one from the ephemeral range: for a moment a client reconnecting
        # to the dead head may hold it as its own end of a connection.
        if head.poll() is None or "already in use" not in log.read_text() or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    return head, log


def test_the_driver_keeps_calling_the_head_across_its_restart(three_nodes):
    # Last in the module: the restarted head is this test's to stop.
    from oxray.util.placement_group import placement_group, placement_group_table, remove_placement_group

    cluster, _ = three_nodes
    before = oxray.cluster_resources()
    head, log = restart_head(cluster)
    try:
        assert head.poll() is None, f"the restarted head exited: {log.read_text()}"
        # The first calls after the restart find their connection gone: they are made again.
        assert oxray.cluster_resources() == before
        assert len(oxray.nodes()) == 3
        pg = placement_group([{"CPU": 0.5}])
        assert pg.wait(30) and placement_group_table(pg)["state"] == "CREATED"
        remove_placement_group(pg)
    finally:
        head.kill()
        head.wait(timeout=30)
