import os

import pytest

import oxray
from oxray.exceptions import ActorDiedError



@oxray.remote
class Counter:
    def __init__(self, start=0):
        self.n = start

    def incr(self, by=1):
        self.n += by
        return self.n

    def pid(self):
        return os.getpid()

    def fail(self):
        raise ZeroDivisionError("by design")


@oxray.remote
def bump(counter, times):
    return oxray.get([counter.incr.remote() for _ in range(times)])[-1]


def test_calls_run_in_order_on_one_process(private_cluster):  # noqa: F811
    counter = Counter.remote(10)
    assert oxray.get([counter.incr.remote() for _ in range(50)]) == list(range(11, 61))
    pids = set(oxray.get([counter.pid.remote() for _ in range(5)]))
    assert len(pids) == 1 and os.getpid() not in pids
    oxray.kill(counter)


@oxray.remote
def later(value, seconds):
    import time

    time.sleep(seconds)
    return value


def test_calls_waiting_for_arguments_keep_their_place_before_later_calls(private_cluster):  # noqa: F811
    counter = Counter.remote()
    # The first call waits for its argument; the plain calls after it must not overtake it.
    refs = [counter.incr.remote(later.remote(1, 0.5)), counter.incr.remote(), counter.incr.remote(oxray.put(5)),
            counter.incr.remote()]
    assert oxray.get(refs) == [1, 2, 7, 8]
    assert oxray.get(counter.incr.remote()) == 9, "and calls made once the queue is empty follow"


@oxray.remote
def broken():
    raise ValueError("no value")


def test_a_call_with_a_failed_argument_fails_and_later_calls_still_run(private_cluster):  # noqa: F811
    counter = Counter.remote()
    with pytest.raises(ValueError, match="no value"):
        oxray.get(counter.incr.remote(broken.remote()))
    assert oxray.get([counter.incr.remote() for _ in range(3)]) == [1, 2, 3]


def test_an_actor_whose_creation_argument_failed_is_dead(private_cluster):  # noqa: F811
    counter = Counter.remote(broken.remote())
    with pytest.raises(ActorDiedError):
        oxray.get(counter.incr.remote(), timeout=30)


def test_handles_pass_to_tasks(private_cluster):  # noqa: F811
    counter = Counter.remote()
    assert oxray.get(bump.remote(counter, 5)) == 5
    assert oxray.get(counter.incr.remote(0)) == 5, "the task's calls reached the same actor"
    oxray.kill(counter)


def test_errors_kill_and_bad_calls(private_cluster):  # noqa: F811
    counter = Counter.remote()
    with pytest.raises(ZeroDivisionError):
        oxray.get(counter.fail.remote())
    assert oxray.get(counter.incr.remote()) == 1, "an error in a method leaves the actor alive"
    with pytest.raises(AttributeError, match="no method 'nope'"):
        counter.nope
    oxray.kill(counter)
    with pytest.raises(ActorDiedError):
        oxray.get(counter.incr.remote(), timeout=30)

    @oxray.remote
    class Broken:
        def __init__(self):
            raise RuntimeError("cannot start")

        def ping(self):
            return "pong"

    broken = Broken.remote()
    with pytest.raises(ActorDiedError, match="could not be created"):
        oxray.get(broken.ping.remote(), timeout=30)
    oxray.kill(broken)


def test_named_actors_are_found_from_other_processes(private_cluster):  # noqa: F811
    counter = Counter.options(name="shared-counter", namespace="team").remote(100)
    assert oxray.get(counter.incr.remote()) == 101
    with pytest.raises(ValueError, match="already exists"):
        Counter.options(name="shared-counter", namespace="team").remote()
    found = oxray.get_actor("shared-counter", namespace="team")
    assert oxray.get(found.incr.remote()) == 102

    @oxray.remote
    def from_a_task():
        return oxray.get(oxray.get_actor("shared-counter", namespace="team").incr.remote())

    assert oxray.get(from_a_task.remote()) == 103
    same = Counter.options(name="shared-counter", namespace="team", get_if_exists=True).remote()
    assert oxray.get(same.incr.remote()) == 104
    with pytest.raises(ValueError, match="no actor named"):
        oxray.get_actor("nobody", namespace="team")
    oxray.kill(found)
    with pytest.raises(ValueError):
        oxray.get_actor("shared-counter", namespace="team")
    with pytest.raises(ActorDiedError):
        oxray.get(counter.incr.remote(), timeout=30)


def test_detached_actors_outlive_their_creator(private_cluster):  # noqa: F811
    import subprocess
    import sys

    script = ("import oxray\n"
              "@oxray.remote\n"
              "class Keeper:\n"
              "    def ping(self):\n"
              "        return 'still here'\n"
              "k = Keeper.options(name='keeper', lifetime='detached').remote()\n"
              "print(oxray.get(k.ping.remote()))\n")
    env = dict(os.environ, OXRAY_ADDRESS=oxray._private.worker.client().address)
    env["OXRAY_AUTH_TOKEN"] = open(os.path.join(oxray._private.worker.client().local_home, "auth_token")).read().strip()
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=60)
    assert "still here" in done.stdout, done.stderr
    keeper = oxray.get_actor("keeper")
    assert oxray.get(keeper.ping.remote()) == "still here"
    oxray.kill(keeper)


def test_async_and_threaded_actors_run_calls_concurrently(private_cluster):  # noqa: F811
    import time

    @oxray.remote(max_concurrency=4)
    class AsyncWorker:
        async def wait_then(self, value, seconds):
            import asyncio

            await asyncio.sleep(seconds)
            return value

    @oxray.remote(max_concurrency=4)
    class Threaded:
        def wait_then(self, value, seconds):
            time.sleep(seconds)
            return value

    for cls in (AsyncWorker, Threaded):
        actor = cls.remote()
        oxray.get(actor.wait_then.remote(0, 0))
        began = time.time()
        assert oxray.get([actor.wait_then.remote(i, 0.5) for i in range(4)]) == [0, 1, 2, 3]
        assert time.time() - began < 1.5, f"{cls.__name__} calls overlapped"
        began = time.time()
        assert oxray.get([actor.wait_then.remote(i, 0.4) for i in range(8)]) == list(range(8))
        assert time.time() - began >= 0.8, f"{cls.__name__}: no more than max_concurrency calls at once"
        oxray.kill(actor)


def test_actor_methods_return_several_values(private_cluster):  # noqa: F811
    @oxray.remote
    class Pairs:
        @oxray.method(num_returns=2)
        def split(self, a, b):
            return a, b

        def three(self):
            return 1, 2, 3

    @oxray.remote
    class AsyncPairs:
        @oxray.method(num_returns=2)
        async def split(self, a, b):
            return a, b

    for kind, cls in enumerate((Pairs, Pairs.options(max_concurrency=2), AsyncPairs)):
        actor = cls.options(name=f"pairs-{kind}").remote()
        first, second = actor.split.remote("x", "y")
        assert oxray.get([first, second]) == ["x", "y"]
        found = oxray.get_actor(f"pairs-{kind}")
        assert oxray.get(found.split.remote(1, 2)) == [1, 2], "a handle found by name knows num_returns"

        @oxray.remote
        def through_a_task(handle):
            return oxray.get(handle.split.remote(3, 4))

        assert oxray.get(through_a_task.remote(actor)) == [3, 4], "a passed handle knows num_returns"
        oxray.kill(actor)
    pairs = Pairs.remote()
    assert oxray.get(pairs.three.options(num_returns=3).remote()) == [1, 2, 3]
    assert oxray.get(pairs.three.remote()) == (1, 2, 3)
    wrong = pairs.split.options(num_returns=3).remote(1, 2)
    assert oxray.get(wrong[:2]) == [1, 2], "the refs a short return fills"
    with pytest.raises(Exception, match="returned 2 values where 3 were expected"):
        oxray.get(wrong[2])
    with pytest.raises(ValueError, match="returned 3 values, but num_returns=2"):
        oxray.get(pairs.three.options(num_returns=2).remote()[0])
    with pytest.raises(ValueError, match="num_returns"):
        pairs.three.options(num_returns=0)
    oxray.kill(pairs)


def test_runtime_context_names_the_task_and_the_actor(private_cluster):  # noqa: F811
    @oxray.remote
    def ids():
        ctx = oxray.get_runtime_context()
        return ctx.get_task_id(), ctx.get_actor_id(), ctx.get_node_id()

    @oxray.remote
    class Who:
        def ids(self):
            ctx = oxray.get_runtime_context()
            return ctx.get_task_id(), ctx.get_actor_id()

    task_id, actor_id, node_id = oxray.get(ids.remote())
    assert task_id and actor_id is None and len(node_id) == 56
    who = Who.remote()
    first, second = oxray.get([who.ids.remote(), who.ids.remote()])
    assert first[1] == second[1] == who._actor_id and first[0] != second[0]
    oxray.kill(who)


def test_leases_of_a_killed_driver_are_taken_back(private_cluster):  # noqa: F811
    import signal
    import subprocess
    import sys
    import time

    client = oxray._private.worker.client()
    token = open(os.path.join(client.local_home, "auth_token")).read().strip()
    env = dict(os.environ, OXRAY_ADDRESS=client.address, OXRAY_AUTH_TOKEN=token)
    script = ("import oxray, sys\n"
              "@oxray.remote(num_cpus=1)\n"
              "class Holder:\n"
              "    def ping(self):\n"
              "        return 1\n"
              "h = Holder.remote()\n"
              "oxray.get(h.ping.remote())\n"
              "print('holding', flush=True)\n"
              "sys.stdin.read()\n")
    driver = subprocess.Popen([sys.executable, "-c", script], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True)
    assert driver.stdout.readline().strip() == "holding"

    def cpus_free():
        return oxray.available_resources().get("CPU", 0)

    deadline = time.time() + 10
    while cpus_free() != 1 and time.time() < deadline:
        time.sleep(0.1)
    assert cpus_free() == 1, "the actor holds one of the two CPUs"
    driver.send_signal(signal.SIGKILL)
    driver.wait()
    deadline = time.time() + 15
    while cpus_free() != 2 and time.time() < deadline:
        time.sleep(0.2)
    assert cpus_free() == 2, "the agent took the dead driver's lease back"


@oxray.remote(max_restarts=1, max_task_retries=1)
class Phoenix:
    def __init__(self):
        self.calls = 0

    def pid(self):
        self.calls += 1
        return os.getpid(), self.calls


@oxray.remote
def call_pid(handle):
    return oxray.get(handle.pid.remote())


def _sigkill(pid):
    import signal

    os.kill(pid, signal.SIGKILL)


def test_a_crashed_actor_restarts_up_to_max_restarts(private_cluster):
    actor = Phoenix.remote()
    first, calls = oxray.get(actor.pid.remote())
    assert calls == 1
    _sigkill(first)
    second, calls = oxray.get(actor.pid.remote(), timeout=60)
    assert second != first and calls == 1, "the call was retried on a new instance"
    assert oxray.get(call_pid.remote(actor), timeout=60)[0] == second, "other processes follow the restart"
    _sigkill(second)
    with pytest.raises(ActorDiedError, match="max_restarts"):
        oxray.get(actor.pid.remote(), timeout=60)
    with pytest.raises(ActorDiedError):
        oxray.get(call_pid.remote(actor), timeout=60)


@oxray.remote
def kill_and_call_by_name(name):
    import signal

    handle = oxray.get_actor(name)
    first, _ = oxray.get(handle.pid.remote())
    os.kill(first, signal.SIGKILL)
    second, calls = oxray.get(handle.pid.remote(), timeout=60)
    return first, second, calls


def test_a_handle_found_by_name_retries_as_its_actor_was_told(private_cluster):
    actor = Phoenix.options(name="phoenix-by-name").remote()
    oxray.get(actor.pid.remote())
    first, second, calls = oxray.get(kill_and_call_by_name.remote("phoenix-by-name"), timeout=90)
    assert second != first and calls == 1, "the call was retried on the restarted actor"
    oxray.kill(actor)


def test_calls_are_not_retried_without_max_task_retries(private_cluster):
    actor = Phoenix.options(max_task_retries=0).remote()
    first, _ = oxray.get(actor.pid.remote())
    _sigkill(first)
    with pytest.raises(ActorDiedError, match="not retried"):
        oxray.get(actor.pid.remote(), timeout=60)
    second, calls = oxray.get(actor.pid.remote(), timeout=60)
    assert second != first and calls == 1


def test_kill_with_restart_brings_the_actor_back(private_cluster):
    actor = Phoenix.remote()
    first, _ = oxray.get(actor.pid.remote())
    oxray.kill(actor, no_restart=False)
    second, _ = oxray.get(actor.pid.remote(), timeout=60)
    assert second != first
    oxray.kill(actor)
    with pytest.raises(ActorDiedError, match="killed"):
        oxray.get(actor.pid.remote(), timeout=60)


@oxray.remote(max_restarts=1)
class Starter:
    def __init__(self, path):
        with open(path, "a") as f:
            f.write(f"{os.getpid()}\n")

    def pid(self):
        return os.getpid()


def test_a_dead_actor_restarts_without_waiting_for_a_call(private_cluster, tmp_path):
    import time

    log = tmp_path / "starts"
    actor = Starter.remote(str(log))
    first = oxray.get(actor.pid.remote())
    _sigkill(first)
    deadline = time.time() + 30
    while len(log.read_text().split()) < 2:
        assert time.time() < deadline, "the actor was not restarted on its own"
        time.sleep(0.1)
    second = int(log.read_text().split()[1])
    assert oxray.get(actor.pid.remote(), timeout=60) == second != first


def test_what_concurrent_calls_print_reaches_the_caller(private_cluster, capfd):
    @oxray.remote
    class Speaker:
        async def say(self, word):
            print(f"async says {word}")
            return word

    @oxray.remote(max_concurrency=2)
    class Threaded:
        def say(self, word):
            print(f"thread says {word}")
            return word

    assert oxray.get(Speaker.remote().say.remote("hello")) == "hello"
    assert oxray.get(Threaded.remote().say.remote("hi")) == "hi"
    out = capfd.readouterr().out
    assert "async says hello" in out and "thread says hi" in out, out
    assert "(Threaded pid=" in out and "(Speaker pid=" in out, "an actor's output carries its class name, as in Ray"
