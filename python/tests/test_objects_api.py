"""Objects in the state API: `/api/v0/objects`, `/api/v0/objects/summarize`, `oxray list objects`,
`oxray summary objects` and `oxray memory`, from the processes that hold them."""

import subprocess
import sys
import textwrap
import time

import pytest

from conftest import OXRAY_BIN, state

HOLDER = textwrap.dedent('''
    import sys, time
    import oxray

    @oxray.remote
    def blob(n):
        return b"x" * n

    oxray.init()
    big = oxray.put(b"y" * 3_000_000)
    small = [blob.remote(1000) for _ in range(3)]
    oxray.get(small)
    print(big.hex(), flush=True)
    sys.stdin.read()  # holds its references until told to end
''')




def cli(cluster, *args):
    result = subprocess.run([OXRAY_BIN, *args], env=cluster.env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    return result.stdout


@pytest.fixture
def holder(cluster):
    process = subprocess.Popen([sys.executable, "-c", HOLDER], env=cluster.env, stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, text=True)
    try:
        big = process.stdout.readline().strip()
        assert big, "the driver did not start"
        yield process, big
    finally:
        process.stdin.close()
        process.wait(timeout=30)


def test_objects_are_listed_with_their_sizes_and_holders(cluster, holder):
    process, big = holder
    rows = state(cluster, "objects", limit=1000)["result"]
    mine = [r for r in rows if r["pid"] == process.pid]
    assert len(mine) >= 4, rows
    by_id = {r["object_id"]: r for r in mine}
    assert by_id[big]["object_size"] >= 3_000_000
    assert {r["type"] for r in mine} == {"DRIVER"} and {r["task_status"] for r in mine} == {"FINISHED"}
    assert sum(1 for r in mine if 1000 <= r["object_size"] < 2000) == 3
    only_big = state(cluster, "objects", filter_keys=["object_id"], filter_predicates=["="], filter_values=[big])
    assert [r["object_id"] for r in only_big["result"]] == [big]
    summary = state(cluster, "objects/summarize")["result"]["node_id_to_summary"]["cluster"]
    assert summary["total_objects"] >= 4 and summary["total_size_mb"] > 2.8
    assert summary["summary"]["disabled"]["ref_type_counts"]["LOCAL_REFERENCE"] >= 4


def test_the_cli_lists_summarizes_and_shows_memory_by_node(cluster, holder):
    process, big = holder
    assert big in cli(cluster, "list", "objects", "--limit", "1000")
    assert "TOTAL_SIZE_MB" in cli(cluster, "summary", "objects")
    memory = cli(cluster, "memory")
    assert "--- Node 127.0.0.1" in memory and "object store:" in memory
    lines = [line for line in memory.splitlines() if big in line]
    assert len(lines) == 1 and str(process.pid) in lines[0] and "owner" in lines[0] and "MiB" in lines[0]
    assert big not in cli(cluster, "memory", "--stats-only")


HELD_IN_WAYS = textwrap.dedent('''
    import sys, time
    import numpy
    import oxray

    @oxray.remote(num_cpus=0)
    def gate(seconds):
        time.sleep(seconds)

    @oxray.remote(num_cpus=0)
    def use(arg, after):
        time.sleep(20)
        return len(arg)

    oxray.init()
    arg = oxray.put(b"a" * 100)
    pending = use.remote(arg, gate.remote(20))  # waits for the gate: arg goes with it
    inner = oxray.put(b"i" * 100)
    outer = oxray.put([inner])
    running_arg = oxray.put(b"r" * 100)
    running = use.remote(running_arg, None)  # has its arguments at once

    @oxray.remote(num_cpus=0)
    class Keeper:
        pass

    @oxray.remote(num_cpus=0)
    class HandleHolder:
        def __init__(self, handles):
            self.handles = handles  # a borrowed handle

        def ready(self):
            return True

    keeper = Keeper.remote()
    holder = HandleHolder.remote([keeper])
    oxray.get(holder.ready.remote())
    pinned_ref = oxray.put(numpy.zeros(1_000_000))
    pinned = oxray.get(pinned_ref)  # read without a copy: its file stays mapped
    print(arg.hex(), inner.hex(), outer.hex(), running_arg.hex(), keeper._created.hex(), pinned_ref.hex(),
          flush=True)
    del inner  # only `outer` holds it now
    del running_arg  # only the task holds it, until it finishes
    sys.stdin.read()
''')


def test_rows_say_how_each_object_is_held(cluster):
    """Ray's reference types: an argument of a task still waiting and of one running, a
    Python reference, a reference only inside another object, an actor's handle, a value
    read without a copy."""
    process = subprocess.Popen([sys.executable, "-c", HELD_IN_WAYS], env=cluster.env, stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, text=True)
    try:
        arg, inner, outer, running, handle, pinned = process.stdout.readline().split()
        time.sleep(0.5)  # `del inner` runs after the print
        rows = {r["object_id"]: r for r in state(cluster, "objects", limit=1000)["result"] if r["pid"] == process.pid}
        assert rows[arg]["reference_type"] == "USED_BY_PENDING_TASK", rows[arg]
        assert rows[inner]["reference_type"] == "CAPTURED_IN_OBJECT", rows[inner]
        assert rows[outer]["reference_type"] == "LOCAL_REFERENCE", rows[outer]
        # As in Ray, a task holds its arguments until it finishes, not only until it has them.
        assert rows[running]["reference_type"] == "USED_BY_PENDING_TASK", rows[running]
        assert rows[handle]["reference_type"] == "ACTOR_HANDLE", rows[handle]
        borrowed = [r for r in state(cluster, "objects", limit=1000)["result"]
                    if r["object_id"] == handle and r["pid"] != process.pid]
        assert [r["reference_type"] for r in borrowed] == ["ACTOR_HANDLE"], borrowed
        assert rows[pinned]["reference_type"] == "PINNED_IN_MEMORY", rows[pinned]
        counts = state(cluster, "objects/summarize")["result"]["node_id_to_summary"]["cluster"]["summary"]
        assert counts["disabled"]["ref_type_counts"]["CAPTURED_IN_OBJECT"] >= 1
    finally:
        process.stdin.close()
        process.wait(timeout=30)


def test_an_argument_only_its_task_holds_is_there_when_the_task_reads_it(cluster):
    """A stored argument whose caller let go at once: the task still reads it whole, every time."""
    from conftest import driver_of
    import oxray

    @oxray.remote
    def size(value):
        time.sleep(0.05)
        return len(value)

    with driver_of(cluster):
        refs = [size.remote(oxray.put(b"z" * 2_000_000)) for _ in range(12)]
        assert oxray.get(refs, timeout=60) == [2_000_000] * 12


def test_a_process_that_ended_is_forgotten(cluster):
    process = subprocess.Popen([sys.executable, "-c", HOLDER], env=cluster.env, stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, text=True)
    big = process.stdout.readline().strip()
    assert any(r["object_id"] == big for r in state(cluster, "objects", limit=1000)["result"])
    process.stdin.close()
    process.wait(timeout=30)
    deadline = time.time() + 10
    while any(r["pid"] == process.pid for r in state(cluster, "objects", limit=1000)["result"]):
        assert time.time() < deadline, "the ended driver's objects are still listed"
        time.sleep(0.2)


def test_an_actor_that_borrows_a_reference_is_listed_as_its_holder(cluster):
    from conftest import driver_of
    import oxray

    @oxray.remote(num_cpus=0.1)
    class Keeper:
        def __init__(self, refs):
            self.refs = refs

        def pid(self):
            import os
            return os.getpid()

    with driver_of(cluster):
        held = oxray.put(b"k" * 100_000)
        keeper = Keeper.remote([held])
        keeper_pid = oxray.get(keeper.pid.remote())
        deadline = time.time() + 10
        while True:
            rows = [r for r in state(cluster, "objects", limit=10000)["result"] if r["object_id"] == held.hex()]
            holders = {(r["pid"], r["type"], r["task_status"]) for r in rows}
            if (keeper_pid, "WORKER", "NIL") in holders or time.time() > deadline:
                break
            time.sleep(0.2)
        assert (keeper_pid, "WORKER", "NIL") in holders, rows
        assert any(r["type"] == "DRIVER" and r["task_status"] == "FINISHED" for r in rows)
