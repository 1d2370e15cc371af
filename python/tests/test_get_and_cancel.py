"""`get`, `wait` and `cancel` as Ray's users rely on them: the first error at once, Ctrl-C
and alarms delivered while waiting, cancelled results that read as cancelled at once, and
nested tasks that never starve for the CPUs their parents hold."""

import signal
import time

import pytest

import oxray
from oxray.exceptions import TaskCancelledError


@oxray.remote
def sleepy(seconds, value=None):
    time.sleep(seconds)
    return value


@oxray.remote
def fail():
    raise KeyError("failed-fast")


@oxray.remote
def add_one(x):
    return x + 1


@oxray.remote
def nest(depth):
    """Each level waits for the next: without lending its CPU meanwhile, a chain deeper than
    the node's CPUs never ends."""
    if depth == 0:
        return 0
    return oxray.get(nest.remote(depth - 1)) + 1


def test_get_raises_the_first_error_without_waiting_for_the_rest(private_cluster):
    slow = sleepy.remote(30)
    started = time.monotonic()
    with pytest.raises(KeyError, match="failed-fast"):
        oxray.get([slow, fail.remote()], timeout=20)
    assert time.monotonic() - started < 10
    oxray.cancel(slow, force=True)


def test_a_signal_handler_interrupts_get(private_cluster):
    class Alarm(Exception):
        pass

    def on_alarm(signum, frame):
        raise Alarm()

    previous = signal.signal(signal.SIGALRM, on_alarm)
    slow = sleepy.remote(30)
    started = time.monotonic()
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.5)
        with pytest.raises(Alarm):
            oxray.get(slow)
        assert time.monotonic() - started < 5
        signal.setitimer(signal.ITIMER_REAL, 0.5)
        with pytest.raises(Alarm):
            oxray.wait([slow], num_returns=1)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    oxray.cancel(slow, force=True)


def test_nested_tasks_deeper_than_the_cpus_finish(private_cluster):
    assert oxray.cluster_resources()["CPU"] == 2
    assert oxray.get(nest.remote(4), timeout=60) == 4
    # The CPUs lent while waiting are taken back: two more fill the node again.
    assert oxray.get([sleepy.remote(0.2, i) for i in range(4)], timeout=60) == [0, 1, 2, 3]


def test_cancelled_results_read_as_cancelled_at_once(private_cluster):
    running = sleepy.remote(60)
    time.sleep(0.5)
    follower = add_one.remote(running)  # waits for its argument
    oxray.cancel(running)
    started = time.monotonic()
    with pytest.raises(TaskCancelledError):
        oxray.get(running, timeout=30)
    with pytest.raises(TaskCancelledError):
        oxray.get(follower, timeout=30)
    assert time.monotonic() - started < 5

    argument = sleepy.remote(2, 1)
    waiting_for_it = add_one.remote(argument)
    oxray.cancel(waiting_for_it)
    with pytest.raises(TaskCancelledError):
        oxray.get(waiting_for_it, timeout=1)
    assert oxray.get(argument, timeout=30) == 1, "its argument's task goes on"


@oxray.remote
def start_slow():
    return [sleepy.remote(60)]


@oxray.remote
def wait_for_slow():
    return oxray.get(sleepy.remote(60))


def test_cancel_reaches_tasks_of_other_processes_and_tasks_blocked_in_get(private_cluster):
    [borrowed] = oxray.get(start_slow.remote())
    oxray.cancel(borrowed)
    with pytest.raises(TaskCancelledError):
        oxray.get(borrowed, timeout=10)

    blocked = wait_for_slow.remote()
    time.sleep(1.0)
    oxray.cancel(blocked)
    started = time.monotonic()
    with pytest.raises(TaskCancelledError):
        oxray.get(blocked, timeout=10)
    assert time.monotonic() - started < 5
    assert oxray.get(add_one.remote(1), timeout=30) == 2, "the cluster goes on"
