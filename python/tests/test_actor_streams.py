"""Streaming generators from actors that run several calls at once (threaded, with
concurrency groups, async), and exit_actor() on such actors letting the calls already
running end first, as in Ray."""

import asyncio
import threading
import time

import pytest

import oxray
from oxray.exceptions import ActorDiedError

from conftest import driver_of


@pytest.fixture(scope="module")
def driver(cluster):
    """conftest's one-node cluster, and this process as its driver."""
    with driver_of(cluster):
        yield cluster


def values(gen):
    return [oxray.get(ref, timeout=20) for ref in gen]


@oxray.remote(max_concurrency=2)
class Threaded:
    def __init__(self):
        self.b_started = threading.Event()

    def first(self):
        # Goes on only once the other stream has started: both must run at once.
        yield "a0"
        yield self.b_started.wait(timeout=10)
        yield "a1"

    def second(self):
        yield "b0"
        self.b_started.set()
        yield "b1"

    def fail_after(self, n):
        for i in range(n):
            yield i
        raise KeyError("midway")

    def slow(self, seconds):
        time.sleep(seconds)
        return "slow done"

    def leave(self):
        oxray.actor.exit_actor()

    def ping(self):
        return "pong"


def test_two_streams_of_a_threaded_actor_interleave(driver):
    actor = Threaded.remote()
    a = actor.first.remote()
    assert oxray.get(next(a), timeout=20) == "a0", "the first value before the call ends"
    b = actor.second.remote()
    assert values(b) == ["b0", "b1"]
    assert values(a) == [True, "a1"]
    assert oxray.get(a.completed(), timeout=20) is None


def test_an_error_midway_ends_a_threaded_actors_stream(driver):
    actor = Threaded.remote()
    refs = list(actor.fail_after.remote(2))
    assert len(refs) == 3
    assert oxray.get(refs[:2], timeout=20) == [0, 1]
    with pytest.raises(KeyError, match="midway"):
        oxray.get(refs[2], timeout=20)
    assert oxray.get(actor.ping.remote(), timeout=20) == "pong", "the actor lives on"


@oxray.remote(concurrency_groups={"io": 1})
class Grouped:
    def __init__(self):
        self.gate = threading.Event()

    @oxray.method(concurrency_group="io")  # a generator method streams by default
    def through_gate(self):
        yield "before"
        yield self.gate.wait(timeout=10)

    def open_gate(self):
        self.gate.set()
        return "opened"


def test_a_stream_in_a_concurrency_group(driver):
    actor = Grouped.remote()
    stream = actor.through_gate.remote()
    assert oxray.get(next(stream), timeout=20) == "before"
    # The stream waits in the io group; the default group opens its gate.
    assert oxray.get(actor.open_gate.remote(), timeout=20) == "opened"
    assert values(stream) == [True]


@oxray.remote
class Async:
    def __init__(self):
        self.b_started = asyncio.Event()

    async def first(self):  # an async generator streams by default
        yield "a0"
        await asyncio.sleep(0.1)
        yield await asyncio.wait_for(self.b_started.wait(), 10)
        yield "a1"

    async def second(self):
        yield "b0"
        self.b_started.set()
        await asyncio.sleep(0.1)
        yield "b1"

    @oxray.method(num_returns="streaming")
    async def fail_after(self, n):
        for i in range(n):
            await asyncio.sleep(0)
            yield i
        raise KeyError("midway")

    def sync_lines(self, n):
        for i in range(n):
            yield f"line {i}"

    async def slow(self, seconds):
        await asyncio.sleep(seconds)
        return "slow done"

    async def leave(self):
        oxray.actor.exit_actor()

    async def ping(self):
        return "pong"


def test_two_async_generators_of_an_async_actor_interleave(driver):
    actor = Async.remote()
    a = actor.first.remote()
    assert oxray.get(next(a), timeout=20) == "a0"
    b = actor.second.remote()
    assert values(b) == ["b0", "b1"]
    assert values(a) == [True, "a1"]


def test_async_actor_errors_midway_and_sync_generators(driver):
    actor = Async.remote()
    refs = list(actor.fail_after.remote(2))
    assert len(refs) == 3
    assert oxray.get(refs[:2], timeout=20) == [0, 1]
    with pytest.raises(KeyError, match="midway"):
        oxray.get(refs[2], timeout=20)
    # A plain generator method of an async actor streams by default.
    assert values(actor.sync_lines.remote(3)) == ["line 0", "line 1", "line 2"]
    assert oxray.get(actor.ping.remote(), timeout=20) == "pong"


@pytest.mark.parametrize("cls", [Threaded, Async], ids=["threaded", "async"])
def test_exit_actor_lets_running_calls_finish(driver, cls):
    actor = cls.remote()
    assert oxray.get(actor.ping.remote(), timeout=20) == "pong"
    slow = actor.slow.remote(1.5)
    time.sleep(0.3)  # the slow call runs by now
    with pytest.raises(ActorDiedError, match="exit"):
        oxray.get(actor.leave.remote(), timeout=20)
    late = actor.ping.remote()  # sent while the slow call still runs: it does not run
    assert oxray.get(slow, timeout=20) == "slow done"
    for call in (late, actor.ping.remote()):
        with pytest.raises(ActorDiedError):
            oxray.get(call, timeout=20)
