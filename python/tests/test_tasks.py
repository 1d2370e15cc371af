import asyncio
import os

import pytest

import oxray
from oxray.exceptions import GetTimeoutError, RayTaskError, WorkerCrashedError



@oxray.remote
def square(x):
    return x * x


@oxray.remote
def add(a, b=0):
    return a + b


@oxray.remote
def fail(message):
    raise KeyError(message)


@oxray.remote(resources={"accel": 1})
def where():
    return os.getpid(), os.environ.get("OXRAY_NODE_ID")


def test_tasks_return_values_and_take_refs(private_cluster):
    assert oxray.get(square.remote(7)) == 49
    refs = [square.remote(i) for i in range(20)]
    assert oxray.get(refs) == [i * i for i in range(20)]
    assert oxray.get(add.remote(square.remote(3), b=oxray.put(100))) == 109
    big = oxray.put(list(range(10_000)))
    assert oxray.get(add.remote(big, b=[1])) == list(range(10_000)) + [1]
    pid, node = oxray.get(where.remote())
    assert pid != os.getpid() and len(node) == 56


def test_errors_come_back_as_the_original_type(private_cluster):
    with pytest.raises(KeyError) as info:
        oxray.get(fail.remote("missing-key"))
    assert isinstance(info.value, RayTaskError)
    assert "missing-key" in str(info.value) and "Traceback" in str(info.value)
    # A failed argument fails the task that takes it.
    with pytest.raises(KeyError):
        oxray.get(add.remote(fail.remote("upstream")))


def test_put_get_wait_and_timeouts(private_cluster):
    ref = oxray.put({"a": 1})
    assert oxray.get(ref) == {"a": 1} and hash(ref) == hash(oxray.ObjectRef(ref.hex()))
    slow = [add.remote(i) for i in range(3)]
    ready, rest = oxray.wait(slow, num_returns=3, timeout=30)
    assert len(ready) == 3 and not rest

    @oxray.remote
    def sleepy():
        import time
        time.sleep(5)

    with pytest.raises(GetTimeoutError):
        oxray.get(sleepy.remote(), timeout=0.2)
    ready, rest = oxray.wait([sleepy.remote()], timeout=0.1)
    assert ready == [] and len(rest) == 1


def test_wait_answers_the_first_ready_refs_in_order(private_cluster):
    @oxray.remote
    def slow():
        import time
        time.sleep(60)

    running = slow.remote()
    done = [oxray.put(i) for i in range(3)]
    refs = [running] + done
    ready, rest = oxray.wait(refs, num_returns=2)
    assert ready == done[:2] and rest == [running, done[2]]
    ready, rest = oxray.wait(refs, num_returns=4, timeout=0.2)
    assert ready == done and rest == [running]
    with pytest.raises(ValueError, match="unique"):
        oxray.wait([done[0], done[0]])
    oxray.cancel(running, force=True)


def test_refs_are_awaitable(private_cluster):
    async def main():
        return await square.remote(5)

    assert asyncio.run(main()) == 25


def test_a_crashed_worker_fails_its_task_clearly(private_cluster):
    @oxray.remote
    def die():
        os._exit(1)

    with pytest.raises(WorkerCrashedError, match="died"):
        oxray.get(die.options(max_retries=0).remote(), timeout=30)
    assert oxray.get(square.remote(2)) == 4, "the cluster goes on"


def test_a_task_whose_worker_dies_runs_again(private_cluster, tmp_path):
    marker = tmp_path / "attempts"

    @oxray.remote(max_retries=2)
    def die_once(path):
        with open(path, "a") as f:
            f.write("x")
        if len(open(path).read()) == 1:
            os._exit(1)
        return "second attempt"

    assert oxray.get(die_once.remote(str(marker)), timeout=60) == "second attempt"

    @oxray.remote(max_retries=1, retry_exceptions=True)
    def flaky(path):
        with open(path, "a") as f:
            f.write("y")
        if open(path).read().count("y") == 1:
            raise ConnectionError("transient")
        return "recovered"

    assert oxray.get(flaky.remote(str(marker)), timeout=60) == "recovered"


def test_bad_calls_are_refused(private_cluster):
    with pytest.raises(TypeError, match="cannot be called directly"):
        square(2)
    with pytest.raises(ValueError, match="unknown option"):
        square.options(bogus=1)
    with pytest.raises(TypeError, match="remote takes"):
        oxray.remote(42)
    with pytest.raises(WorkerCrashedError, match="can never hold"):
        oxray.get(square.options(num_cpus=64).remote(1), timeout=30)


def test_several_return_values_and_printed_output(private_cluster, capfd):
    @oxray.remote(num_returns=3)
    def three():
        print("hello from a task")
        return 1, 2, 3

    refs = three.remote()
    assert isinstance(refs, list) and oxray.get(refs) == [1, 2, 3]
    assert oxray.get(refs[1]) == 2
    out = capfd.readouterr().out
    assert "(three pid=" in out and "hello from a task" in out, out

    @oxray.remote(num_returns=2)
    def wrong():
        return 1, 2, 3

    with pytest.raises(ValueError, match="num_returns=2"):
        oxray.get(wrong.remote()[0])


def test_runtime_env_vars_reach_tasks_and_actors(private_cluster):
    @oxray.remote
    def read(name):
        return os.environ.get(name)

    @oxray.remote
    class Reader:
        def read(self, name):
            return os.environ.get(name)

    env = {"env_vars": {"OXRAY_TEST_SETTING": "on"}}
    assert oxray.get(read.options(runtime_env=env).remote("OXRAY_TEST_SETTING")) == "on"
    assert oxray.get(read.remote("OXRAY_TEST_SETTING")) is None, "workers with other settings are not shared"
    reader = Reader.options(runtime_env=env).remote()
    assert oxray.get(reader.read.remote("OXRAY_TEST_SETTING")) == "on"
    oxray.kill(reader)


def test_cancel_stops_running_and_waiting_tasks(private_cluster):
    import time

    from oxray.exceptions import TaskCancelledError

    @oxray.remote(num_cpus=2)
    def long_running():
        time.sleep(60)
        return "finished"

    running = long_running.remote()
    waiting = long_running.remote()  # needs both CPUs too: it waits for the first
    time.sleep(1.0)
    oxray.cancel(waiting)
    oxray.cancel(running)
    for ref in (running, waiting):
        with pytest.raises(TaskCancelledError):
            oxray.get(ref, timeout=30)
    stuck = long_running.remote()
    time.sleep(1.0)
    oxray.cancel(stuck, force=True)
    with pytest.raises(TaskCancelledError):
        oxray.get(stuck, timeout=30)
    assert oxray.get(square.remote(3)) == 9, "the cluster goes on"
