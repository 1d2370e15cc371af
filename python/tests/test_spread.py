"""SPREAD spreads every task and actor over the nodes that fit, as Ray's does, even when
the tasks are short and queued together."""

import collections
import json
import os
import subprocess
import time
from pathlib import Path

import pytest

import oxray

from conftest import OXRAY_BIN, Cluster


@pytest.fixture(scope="module")
def four_nodes(tmp_path_factory):
    cluster = Cluster(tmp_path_factory.mktemp("four-nodes"))
    cluster.start()
    address = json.loads(Path(cluster.env["OXRAY_HOME"], "current_cluster.json").read_text())["address"]
    for n in range(3):
        subprocess.run([OXRAY_BIN, "start", "--address", address, "--num-cpus", "1", "--node-ip-address", "127.0.0.1",
                        "--node-name", f"node-{n}"], env=cluster.env, check=True, capture_output=True, timeout=60)
    names = ("OXRAY_ADDRESS", "OXRAY_AUTH_TOKEN", "OXRAY_HOME")
    saved = {k: os.environ.pop(k) for k in names if k in os.environ}
    os.environ["OXRAY_HOME"] = cluster.env["OXRAY_HOME"]
    oxray.init()
    yield [n["NodeID"] for n in oxray.nodes()]
    oxray.shutdown()
    os.environ.pop("OXRAY_HOME", None)
    os.environ.update(saved)
    cluster.stop()


@oxray.remote(scheduling_strategy="SPREAD")
def where():
    return os.environ["OXRAY_NODE_ID"]


@oxray.remote(scheduling_strategy="SPREAD")
class Placed:
    def where(self):
        return os.environ["OXRAY_NODE_ID"]


def test_short_tasks_queued_together_land_on_every_node(four_nodes):
    assert len(four_nodes) == 4
    counts = collections.Counter(oxray.get([where.remote() for _ in range(8)], timeout=60))
    # Every node takes its turns, except one whose single CPU is still busy when its turn
    # comes, as Ray's SPREAD passes over nodes without room while others have it.
    assert set(counts) == set(four_nodes) and max(counts.values()) <= 4, counts


def test_actors_spread_too(four_nodes):
    actors = [Placed.remote() for _ in range(4)]
    assert sorted(oxray.get([a.where.remote() for a in actors], timeout=60)) == sorted(four_nodes)


@oxray.remote(num_cpus=1)
class Holder:
    """Holds a CPU of its node for as long as it lives, as a training worker does."""

    def where(self):
        return os.environ["OXRAY_NODE_ID"]


@oxray.remote
def nap(seconds):
    import time

    time.sleep(seconds)
    return os.environ["OXRAY_NODE_ID"]


def test_work_never_waits_behind_cpus_held_for_long_while_other_nodes_have_room(four_nodes):
    from oxray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    head = oxray.get_runtime_context().get_node_id()
    on_head = NodeAffinitySchedulingStrategy(head, soft=False)
    holders = [Holder.options(scheduling_strategy=on_head).remote() for _ in range(2)]
    try:
        assert oxray.get([h.where.remote() for h in holders], timeout=30) == [head, head]
        # The driver's node is full for good: its DEFAULT tasks go to nodes with room.
        ran_on = oxray.get([nap.remote(0.2) for _ in range(6)], timeout=30)
        assert head not in ran_on
        # More SPREAD tasks than free CPUs: those placed while every node looked busy do not
        # stay queued at the head, whose CPUs never come free.
        ran_on = oxray.get([nap.options(scheduling_strategy="SPREAD").remote(0.3) for _ in range(12)], timeout=30)
        assert head not in ran_on and len(set(ran_on)) == 3
    finally:
        for h in holders:
            oxray.kill(h)


def _head_pid():
    for record in Path(os.environ["OXRAY_HOME"], "procs").glob("*.json"):
        info = json.loads(record.read_text())
        if info.get("role") == "head" and Path(f"/proc/{info['pid']}").exists():
            return info["pid"]
    raise AssertionError("no head process record")


def test_tasks_are_placed_without_the_head(four_nodes):
    """Leases are placed by the agents from their pushed view of the cluster: with the head
    stopped, SPREAD, node-affine and spilled tasks still run on every node."""
    import signal

    from oxray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    # Workers started while the head answers; the run below needs none new.
    oxray.get([where.remote() for _ in range(8)], timeout=60)
    # The agents place from the view the head last pushed them: stopping the head while a
    # node still looked busy would keep it out of the run below for good.
    deadline = time.monotonic() + 10
    while oxray.available_resources().get("CPU", 0) < oxray.cluster_resources().get("CPU", 0):
        assert time.monotonic() < deadline, "the nodes did not all look free again"
        time.sleep(0.05)
    time.sleep(0.5)  # the last change reaches every agent
    head = _head_pid()
    os.kill(head, signal.SIGSTOP)
    try:
        spread = oxray.get([where.remote() for _ in range(8)], timeout=20)
        assert set(spread) == set(four_nodes)
        pinned = [where.options(scheduling_strategy=NodeAffinitySchedulingStrategy(n, soft=False)).remote()
                  for n in four_nodes]
        assert oxray.get(pinned, timeout=20) == four_nodes
    finally:
        os.kill(head, signal.SIGCONT)
