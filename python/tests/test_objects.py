"""ObjectRefs inside other values: passed to tasks and actors, returned by them, stored in
`put` values; fetched from their owner wherever they are read, freed once no process
holds them."""

import gc
import time

import pytest

import oxray
from oxray.exceptions import ObjectLostError, OwnerDiedError


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
