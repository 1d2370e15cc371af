"""Actor lifetime as in Ray: `.remote()` hands back the handle at once and the actor waits
for its resources; an actor no node could ever hold is dead with the reason; an actor that
is not named ends once no handle to it is left in any process, after the calls made before."""

import gc
import os
import time

import pytest

import oxray
from oxray.exceptions import ActorDiedError


@oxray.remote
class Counter:
    def __init__(self):
        self.n = 0

    def pid(self):
        return os.getpid()

    def incr(self, pause=0.0):
        time.sleep(pause)
        self.n += 1
        return self.n

    def my_id(self):
        return oxray.get_runtime_context().get_actor_id()


@oxray.remote
def sleepy(seconds):
    time.sleep(seconds)


@oxray.remote
def call_later(handle, pause):
    time.sleep(pause)
    return oxray.get(handle.incr.remote())


def _wait_exit(pid, limit=15.0):
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.05)
    return False


def test_an_actor_ends_after_its_last_handle_and_its_calls(private_cluster):
    counter = Counter.remote()
    pid = oxray.get(counter.pid.remote())
    assert oxray.get(counter.my_id.remote()) == counter._actor_id
    calls = [counter.incr.remote(0.2) for _ in range(3)]
    del counter
    gc.collect()
    assert oxray.get(calls, timeout=30) == [1, 2, 3], "calls made before the last handle went still run"
    assert _wait_exit(pid), "the actor's worker is gone"


def test_a_handle_lent_to_a_task_keeps_the_actor(private_cluster):
    counter = Counter.remote()
    pid = oxray.get(counter.pid.remote())
    later = call_later.remote(counter, 1.0)
    del counter
    gc.collect()
    assert oxray.get(later, timeout=30) == 1
    assert _wait_exit(pid), "it ends once the task has let go of its handle too"


def test_remote_returns_at_once_and_the_actor_waits_for_its_resources(private_cluster):
    busy = sleepy.remote(2.0)
    time.sleep(0.3)
    started = time.monotonic()
    waiting = Counter.options(num_cpus=2).remote()
    assert time.monotonic() - started < 0.5, "the handle comes back before the actor is placed"
    first = waiting.incr.remote()
    assert oxray.get(first, timeout=30) == 1
    assert time.monotonic() - started > 1.0, "it was placed once the task let go of the CPUs"
    oxray.get(busy)


def test_an_actor_no_node_can_hold_is_dead_with_the_reason(private_cluster):
    started = time.monotonic()
    huge = Counter.options(num_cpus=64).remote()
    assert time.monotonic() - started < 0.5
    with pytest.raises(ActorDiedError, match="cannot be placed"):
        oxray.get(huge.incr.remote(), timeout=30)
