"""ObjectRefs inside other values: passed to tasks and actors, returned by them, stored in
`put` values; fetched from their owner wherever they are read, freed once no process
holds them."""

import gc
import os
import time

import pytest

import oxray
from oxray.exceptions import ObjectLostError, OwnerDiedError

from conftest import OXRAY_BIN


def _objects():
    gc.collect()
    return oxray._private.worker.client().object_count()


def _eventually(check, timeout=10.0):
    end = time.time() + timeout
    while not check():
        if time.time() > end:
            raise AssertionError("condition not reached in time")
        time.sleep(0.05)


@oxray.remote
def read_first(refs):
    return oxray.get(refs[0])


@oxray.remote
def make_refs(n):
    return [oxray.put(i * 10) for i in range(n)]


@oxray.remote
def passthrough(box):
    return box


@oxray.remote
class Keeper:
    def __init__(self):
        self.kept = None

    def keep(self, box):
        self.kept = box["ref"]
        return True

    def read(self):
        return oxray.get(self.kept)

    def drop(self):
        self.kept = None
        gc.collect()
        return True

    def make(self, n):
        return [oxray.put("made by the actor") for _ in range(n)]


def test_refs_nested_in_arguments_are_read_by_the_task(private_cluster):
    ref = oxray.put({"a": 1})
    assert oxray.get(read_first.remote([ref])) == {"a": 1}


def test_refs_returned_by_a_task_outlive_it(private_cluster):
    refs = oxray.get(make_refs.remote(3))
    for _ in range(3):  # other tasks run on the same worker meanwhile
        oxray.get(make_refs.remote(1))
    assert oxray.get(refs) == [0, 10, 20]
    assert oxray.get(oxray.get(passthrough.remote([refs[1]]))[0]) == 10


def test_a_put_value_keeps_the_refs_inside_it(private_cluster):
    inner = oxray.put("inner")
    outer = oxray.put([inner])
    del inner
    assert oxray.get(oxray.get(outer)[0]) == "inner"


def test_an_object_lives_while_an_actor_holds_it_and_then_goes(private_cluster):
    keeper = Keeper.remote()
    before = _objects()
    ref = oxray.put("kept")
    assert oxray.get(keeper.keep.remote({"ref": ref}))
    del ref
    assert oxray.get(keeper.read.remote()) == "kept"
    assert _objects() > before, "the actor's reference keeps it here"
    oxray.get(keeper.drop.remote())
    _eventually(lambda: _objects() <= before)
    oxray.kill(keeper)


def test_an_object_whose_owner_died_is_lost(private_cluster):
    keeper = Keeper.remote()
    read, unread = oxray.get(keeper.make.remote(2))
    assert oxray.get(read) == "made by the actor"
    oxray.kill(keeper)
    assert oxray.get(read) == "made by the actor", "a value already here stays readable"
    with pytest.raises(OwnerDiedError) as info:
        oxray.get(unread, timeout=30)
    assert isinstance(info.value, ObjectLostError)


np = pytest.importorskip("numpy")


@oxray.remote
def array_info(x):
    return x.flags.writeable, float(x.sum())


@oxray.remote
def ones(n):
    return np.ones(n)


def test_large_arrays_are_read_zero_copy_from_shared_memory(private_cluster):
    client = oxray._private.worker.client()
    before = client.object_store_used()
    a = np.arange(1_000_000, dtype=np.float64)
    ref = oxray.put(a)
    assert client.object_store_used() >= before + a.nbytes, "the array went to the node's store"
    b = oxray.get(ref)
    assert (a == b).all()
    assert not b.flags.writeable and not b.flags.owndata, "a read-only view, not a copy"
    with pytest.raises(ValueError):
        b[0] = 1.0
    assert oxray.get(array_info.remote(ref)) == (False, float(a.sum())), "another process maps it too"
    returned = oxray.get(ones.remote(200_000))
    assert returned.sum() == 200_000 and not returned.flags.writeable
    del b, ref
    gc.collect()
    _eventually(lambda: client.object_store_used() <= before)


def test_a_stored_array_keeps_its_offset_within_a_page(private_cluster):
    # Copies into the store run at memory speed only so; small arrays in a stored value keep
    # Ray's 64-byte alignment.
    for offset in (0, 1, 8, 4000):
        a = np.arange(1_000_000, dtype=np.uint8)[offset:]
        b = oxray.get(oxray.put(a))
        assert (a == b).all()
        assert b.ctypes.data % 4096 == a.ctypes.data % 4096
    small = oxray.get(oxray.put([np.arange(1_000, dtype=np.uint8)[3:] for _ in range(200)]))
    assert all(s.ctypes.data % 64 == 0 for s in small)


@oxray.remote
def large(n):
    return np.arange(n, dtype=np.float64)


def test_a_large_task_result_is_handed_over_in_shared_memory(private_cluster):
    client = oxray._private.worker.client()
    before = client.object_store_used()
    ref = large.remote(500_000)
    value = oxray.get(ref)
    assert client.object_store_used() >= before + value.nbytes, "the result is a file of the node's store"
    assert not value.flags.writeable and not value.flags.owndata, "read in place, not copied"
    assert oxray.get(array_info.remote(ref)) == (False, float(value.sum())), "other processes map it too"
    del value, ref
    gc.collect()
    _eventually(lambda: client.object_store_used() <= before)


@oxray.remote(num_returns=2)
def two_large(n):
    return np.arange(n, dtype=np.float64), np.ones(n)


def test_each_large_result_of_a_multi_return_task_is_in_shared_memory(private_cluster):
    client = oxray._private.worker.client()
    before = client.object_store_used()
    first, second = two_large.remote(500_000)
    a, b = oxray.get([first, second])
    assert client.object_store_used() >= before + a.nbytes + b.nbytes, "both results are files of the store"
    assert not a.flags.owndata and not b.flags.owndata and float(b.sum()) == 500_000.0
    assert oxray.get(array_info.remote(second)) == (False, 500_000.0), "other processes map it too"
    del a, b, first, second
    gc.collect()
    _eventually(lambda: client.object_store_used() <= before)


def test_freed_memory_is_reused_but_never_under_a_live_view(private_cluster):
    client = oxray._private.worker.client()
    first = oxray.get(oxray.put(np.full(500_000, 1.0)))  # its ref is gone; the view is not
    for i in range(3):  # each freed at once: its file is kept and taken by the next
        oxray.put(np.full(500_000, float(i)))
    assert float(first.sum()) == 500_000.0, "a file someone maps is never written again"
    used = client.object_store_used()
    later = oxray.get(oxray.put(np.full(500_000, 7.0)))
    assert float(later[0]) == 7.0 and client.object_store_used() == used
    del first, later
    gc.collect()


def test_objects_spill_to_disk_when_the_store_is_full(tmp_path):
    import subprocess
    import sys

    script = (
        "import numpy as np, oxray\n"
        "oxray.init(num_cpus=1, object_store_memory=3_000_000)\n"
        "client = oxray._private.worker.client()\n"
        "refs = [oxray.put(np.full(250_000, i, dtype=np.float64)) for i in range(4)]\n"
        "assert client.object_store_used() <= 3_000_000, client.object_store_used()\n"
        "assert [float(oxray.get(r)[0]) for r in refs] == [0.0, 1.0, 2.0, 3.0]\n"
        "print('spilled and read back')\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("OXRAY_")}
    env.update(OXRAY_HOME=str(tmp_path / "home"), OXRAY_BIN=OXRAY_BIN)
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
    assert "spilled and read back" in done.stdout, done.stderr


def test_values_put_again_into_reused_files_read_back_right(private_cluster):
    np = pytest.importorskip("numpy")
    from oxray._private import serialization

    held = []
    for i in range(8):
        size = (1 << 20) if i % 2 else (3 << 20)  # two sizes, so files are reused and replaced
        held.append(oxray.put(np.full(size // 8, i, dtype=np.int64)))
        held = held[-2:]  # as `ref = put(x)` in a loop: the one before is still alive
        for ref in held:
            value = oxray.get(ref)
            assert value[0] == value[-1] and len(set(np.unique(value))) == 1
        assert oxray.get(held[-1])[0] == i
    assert serialization._mappings._held, "the writer keeps its mappings for the next value"
