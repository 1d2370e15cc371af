import json
import os
import subprocess
from pathlib import Path

import pytest

import oxray
from oxray.exceptions import WorkerCrashedError

from conftest import OXRAY_BIN, Cluster


@pytest.fixture(scope="module")
def two_nodes(tmp_path_factory):
    """A head node with 1 CPU and a second node with 1 CPU, a `special` resource and the label zone=b."""
    cluster = Cluster(tmp_path_factory.mktemp("two-nodes"))
    cluster.start()
    address = json.loads(Path(cluster.env["OXRAY_HOME"], "current_cluster.json").read_text())["address"]
    subprocess.run([OXRAY_BIN, "start", "--address", address, "--num-cpus", "1", "--resources", '{"special": 1}',
                    "--labels", "zone=b", "--node-ip-address", "127.0.0.1", "--node-name", "second"],
                   env=cluster.env, check=True, capture_output=True, timeout=60)
    names = ("OXRAY_ADDRESS", "OXRAY_AUTH_TOKEN", "OXRAY_HOME")
    saved = {k: os.environ.pop(k) for k in names if k in os.environ}
    os.environ["OXRAY_HOME"] = cluster.env["OXRAY_HOME"]
    oxray.init()
    yield {n["NodeName"]: n["NodeID"] for n in oxray.nodes()}
    oxray.shutdown()
    os.environ.pop("OXRAY_HOME", None)
    os.environ.update(saved)
    cluster.stop()


@oxray.remote
def where():
    return os.environ["OXRAY_NODE_ID"]


@oxray.remote(resources={"special": 1})
class Pinned:
    def where(self):
        return os.environ["OXRAY_NODE_ID"]


def test_work_goes_to_the_node_that_has_its_resources(two_nodes):
    second = two_nodes["second"]
    assert oxray.cluster_resources()["special"] == 1
    assert oxray.get(where.options(resources={"special": 1}).remote()) == second
    assert oxray.get(where.remote()) != second, "plain tasks run on the driver's node"
    pinned = Pinned.remote()
    assert oxray.get(pinned.where.remote()) == second
    oxray.kill(pinned)
    with pytest.raises(WorkerCrashedError, match="no node of the cluster can hold"):
        oxray.get(where.options(resources={"nowhere": 1}).remote(), timeout=30)


def test_scheduling_strategies(two_nodes):
    from oxray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    head, second = two_nodes["127.0.0.1"], two_nodes["second"]
    on = lambda node: where.options(scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False))  # noqa: E731
    assert oxray.get(on(second).remote()) == second
    assert oxray.get(on(head).remote()) == head
    spread = {oxray.get(where.options(scheduling_strategy="SPREAD").remote()) for _ in range(4)}
    assert spread == {head, second}
    gone = "ab" * 28
    with pytest.raises(WorkerCrashedError, match="not alive"):
        oxray.get(on(gone).remote(), timeout=30)
    soft = where.options(scheduling_strategy=NodeAffinitySchedulingStrategy(gone, soft=True))
    assert oxray.get(soft.remote()) in (head, second)
    with pytest.raises(ValueError, match="unknown scheduling_strategy"):
        where.options(scheduling_strategy="ANYWHERE").remote()


@oxray.remote(resources={"special": 1})
def put_on_second(size):
    return [oxray.put(b"x" * size)], os.environ["OXRAY_NODE_ID"]


@oxray.remote
def length(box):
    return len(oxray.get(box[0])), os.environ["OXRAY_NODE_ID"]


def test_objects_move_between_nodes_on_demand(two_nodes):
    second = two_nodes["second"]
    (ref,), made_on = oxray.get(put_on_second.remote(5_000_000))
    assert made_on == second
    assert len(oxray.get(ref)) == 5_000_000, "read on the driver's node from its owner on the other"
    size, read_on = oxray.get(length.remote([ref]))
    assert (size, read_on) == (5_000_000, two_nodes["127.0.0.1"])


def test_placement_group_bundles_spread_over_nodes(two_nodes):
    from oxray.util import placement_group, placement_group_table, remove_placement_group
    from oxray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    head, second = two_nodes["127.0.0.1"], two_nodes["second"]
    too_wide = placement_group([{"CPU": 1}] * 3, strategy="STRICT_SPREAD")
    pg = placement_group([{"CPU": 1}, {"CPU": 1}], strategy="STRICT_SPREAD")
    assert pg.wait(30)
    nodes = placement_group_table(pg)["bundles_to_node_id"]
    assert set(nodes.values()) == {head, second}
    for index in (0, 1):
        strategy = PlacementGroupSchedulingStrategy(pg, placement_group_bundle_index=index)
        assert oxray.get(where.options(scheduling_strategy=strategy).remote()) == nodes[index]
    assert not too_wide.wait(0.5), "two nodes cannot hold three bundles on different nodes"
    remove_placement_group(pg)
    remove_placement_group(too_wide)


def test_placement_group_bundles_go_to_nodes_their_selectors_match(two_nodes):
    from oxray.util import placement_group, placement_group_table, remove_placement_group

    head, second = two_nodes["127.0.0.1"], two_nodes["second"]
    pg = placement_group([{"CPU": 1}, {"CPU": 1}], bundle_label_selector=[{"zone": "!b"}, {"zone": "b"}])
    assert pg.wait(30)
    assert placement_group_table(pg)["bundles_to_node_id"] == {0: head, 1: second}
    remove_placement_group(pg)
    nowhere = placement_group([{"CPU": 1}], bundle_label_selector=[{"zone": "in(c,d)"}])
    assert not nowhere.wait(1), "no node is in zone c or d: the group waits, as in Ray"
    remove_placement_group(nowhere)
    with pytest.raises(ValueError, match="one selector per bundle"):
        placement_group([{"CPU": 1}], bundle_label_selector=[{}, {}])
    with pytest.raises(TypeError, match=r"bundle_label_selector\[0\]"):
        placement_group([{"CPU": 1}], bundle_label_selector=[{"zone": 3}])

