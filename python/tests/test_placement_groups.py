"""Placement groups on one node: reservation, tasks and actors inside bundles, removal."""

import os
import time

import pytest

import oxray
from oxray.exceptions import ActorDiedError
from oxray.util import (
    get_current_placement_group,
    get_placement_group,
    placement_group,
    placement_group_table,
    remove_placement_group,
)
from oxray.util.scheduling_strategies import PlacementGroupSchedulingStrategy


@oxray.remote
def pid():
    return os.getpid()


@oxray.remote
class Holder:
    def ping(self):
        return "pong"


def in_group(pg, index=-1):
    return PlacementGroupSchedulingStrategy(pg, placement_group_bundle_index=index)


def test_a_group_is_reserved_and_runs_tasks_and_actors(private_cluster):
    pg = placement_group([{"CPU": 1}, {"accel": 1}], strategy="STRICT_PACK", name="train")
    assert oxray.get(pg.ready(), timeout=30) == pg
    assert pg.wait(5)
    entry = placement_group_table(pg)
    assert entry["state"] == "CREATED" and entry["strategy"] == "STRICT_PACK"
    assert entry["bundles"] == {0: {"CPU": 1.0}, 1: {"accel": 1.0}}
    assert len(set(entry["bundles_to_node_id"].values())) == 1
    assert get_placement_group("train") == pg
    assert isinstance(oxray.get(pid.options(scheduling_strategy=in_group(pg, 0)).remote()), int)
    holder = Holder.options(num_cpus=0, resources={"accel": 1}, scheduling_strategy=in_group(pg, 1)).remote()
    assert oxray.get(holder.ping.remote()) == "pong"
    remove_placement_group(pg)
    # As in Ray, removal returns before the group's workers are ended.
    with pytest.raises(ActorDiedError):
        deadline = time.time() + 30
        while time.time() < deadline:
            oxray.get(holder.ping.remote(), timeout=30)
            time.sleep(0.05)
    assert placement_group_table(pg)["state"] == "REMOVED"
    with pytest.raises(ValueError, match="Failed to look up"):
        get_placement_group("train")


@oxray.remote(num_cpus=0.5)
def current_group():
    pg = get_current_placement_group()
    return pg.id.hex() if pg else None


@oxray.remote(num_cpus=0.5)
def parent_and_child():
    here = get_current_placement_group()
    return here.id.hex() if here else None, oxray.get(current_group.remote())


@oxray.remote(num_cpus=0)
class Member:
    def group(self):
        return oxray.get_runtime_context().get_placement_group_id()


def test_work_knows_its_group_and_child_tasks_are_captured_when_asked(private_cluster):
    pg = placement_group([{"CPU": 1}])
    assert pg.wait(10)
    assert get_current_placement_group() is None, "a driver is in no group"
    inside = lambda capture: PlacementGroupSchedulingStrategy(pg, 0, capture)  # noqa: E731
    captured = oxray.get(parent_and_child.options(scheduling_strategy=inside(True)).remote(), timeout=30)
    assert captured == (pg.id.hex(), pg.id.hex()), "the child ran in the parent's group"
    free = oxray.get(parent_and_child.options(scheduling_strategy=inside(None)).remote(), timeout=30)
    assert free == (pg.id.hex(), None), "without capture the child runs outside"
    member = Member.options(scheduling_strategy=inside(False)).remote()
    assert oxray.get(member.group.remote(), timeout=30) == pg.id.hex()
    oxray.kill(member)
    remove_placement_group(pg)


def test_a_group_that_does_not_fit_waits_and_can_be_removed(private_cluster):
    pg = placement_group([{"CPU": 2}, {"CPU": 1}], strategy="STRICT_PACK")
    assert not pg.wait(0.5)
    assert placement_group_table(pg)["state"] == "PENDING"
    ready = pg.ready()
    remove_placement_group(pg)
    with pytest.raises(oxray.exceptions.ObjectLostError, match="removed"):
        oxray.get(ready, timeout=30)


def test_a_group_is_usable_the_moment_it_is_created(private_cluster):
    # Creation returns before the head has the group: every use right after must wait for it.
    groups = [placement_group([{"CPU": 0.01}]) for _ in range(20)]
    ids = {g.id.hex() for g in groups}
    assert ids <= set(placement_group_table())
    assert placement_group_table(groups[0])["bundles"] == {0: {"CPU": 0.01}}
    work = [pid.options(num_cpus=0.01, scheduling_strategy=in_group(g)).remote() for g in groups[10:]]
    for g in groups[:10]:
        remove_placement_group(g)
    # Removal returns before the head has it too: the group is seen removed right after.
    assert placement_group_table(groups[9])["state"] == "REMOVED"
    assert not groups[0].wait(0.1)
    assert all(isinstance(p, int) for p in oxray.get(work, timeout=30))
    for g in groups[10:]:
        assert g.wait(30)
        remove_placement_group(g)
    states = {e["state"] for i, e in placement_group_table().items() if i in ids}
    assert states == {"REMOVED"}


def test_reserved_resources_are_not_given_to_other_work(private_cluster):
    pg = placement_group([{"CPU": 2}])
    assert pg.wait(30)
    outside = pid.remote()
    ready, _ = oxray.wait([outside], timeout=1)
    assert not ready, "the group holds every CPU"
    remove_placement_group(pg)
    assert isinstance(oxray.get(outside, timeout=30), int)


def test_bad_groups_are_refused(private_cluster):
    with pytest.raises(ValueError, match="non-empty list"):
        placement_group([])
    with pytest.raises(ValueError, match="empty"):
        placement_group([{}])
    with pytest.raises(ValueError, match="strategy"):
        placement_group([{"CPU": 1}], strategy="TIGHT")
    with pytest.raises(ValueError, match="negative"):
        placement_group([{"CPU": -1}])
    pg = placement_group([{"CPU": 1}], name="unique")
    with pytest.raises(ValueError, match="already exists"):
        placement_group([{"CPU": 1}], name="unique")
    with pytest.raises(Exception, match="out of range"):
        oxray.get(pid.options(scheduling_strategy=in_group(pg, 3)).remote(), timeout=30)
    remove_placement_group(pg)


def test_a_group_goes_with_its_killed_creator(private_cluster):
    import subprocess
    import sys
    import time

    script = ("import time, oxray\n"
              "from oxray.util import placement_group\n"
              "oxray.init()\n"
              "assert placement_group([{'CPU': 1}], name='orphan').wait(30)\n"
              "print('ready', flush=True)\n"
              "time.sleep(600)\n")
    client = oxray._private.worker.client()
    env = dict(os.environ, OXRAY_ADDRESS=client.address)
    env["OXRAY_AUTH_TOKEN"] = open(os.path.join(client.local_home, "auth_token")).read().strip()
    creator = subprocess.Popen([sys.executable, "-c", script], env=env, stdout=subprocess.PIPE, text=True)
    try:
        assert creator.stdout.readline().strip() == "ready"
        orphan = get_placement_group("orphan")
        creator.kill()
        creator.wait(timeout=30)
        deadline = time.time() + 20
        while placement_group_table(orphan)["state"] != "REMOVED":
            assert time.time() < deadline, "the group outlived its creator"
            time.sleep(0.2)
    finally:
        creator.kill()
        creator.wait(timeout=30)
