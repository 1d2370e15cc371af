"""Ray's actor and task options beyond the basics: concurrency groups, per-method retries,
exit_actor and __ray_terminate__, max_calls, the runtime context's actor, label selectors."""

import os
import tempfile
import threading
import time
from pathlib import Path

import pytest

import oxray
from oxray.exceptions import ActorDiedError, GetTimeoutError

from conftest import Cluster, driver_of


@pytest.fixture(scope="module")
def driver():
    """A one-node cluster whose node has labels, and this process as its driver."""
    with tempfile.TemporaryDirectory(prefix="oxray-actor-api-") as tmp:
        cluster = Cluster(Path(tmp))
        cluster.oxray("start", "--head", "--port", "0", "--dashboard-port", "0", "--num-cpus", "2",
                      "--node-ip-address", "127.0.0.1", "--labels", "zone=a,disk=ssd")
        try:
            with driver_of(cluster):
                yield cluster
        finally:
            cluster.stop()


@oxray.remote(concurrency_groups={"io": 1, "compute": 2})
class Grouped:
    def __init__(self):
        self.gate = threading.Event()

    @oxray.method(concurrency_group="io")
    def wait_for_gate(self):
        return self.gate.wait(timeout=20)

    @oxray.method(concurrency_group="compute")
    def open_gate(self):
        self.gate.set()
        return "opened"

    def default(self):
        return threading.current_thread().name

    @oxray.method(concurrency_group="compute")
    def thread_name(self):
        return threading.current_thread().name


def test_a_blocked_group_does_not_hold_up_another(driver):
    actor = Grouped.remote()
    blocked = actor.wait_for_gate.remote()
    # The io group's one thread waits for the gate: the default group still answers, and
    # the compute group opens the gate.
    assert "default" in oxray.get(actor.default.remote(), timeout=10)
    assert oxray.get(actor.open_gate.remote(), timeout=10) == "opened"
    assert oxray.get(blocked, timeout=10) is True
    # A call may choose its group; the name of the running thread says which.
    assert "compute" in oxray.get(actor.thread_name.remote(), timeout=10)
    assert "io" in oxray.get(actor.thread_name.options(concurrency_group="io").remote(), timeout=10)
    with pytest.raises(ValueError, match="nope"):
        oxray.get(actor.default.options(concurrency_group="nope").remote(), timeout=10)


@oxray.remote(concurrency_groups={"slow": 1})
class AsyncGrouped:
    def __init__(self):
        import asyncio

        self.gate = asyncio.Event()

    @oxray.method(concurrency_group="slow")
    async def wait_for_gate(self):
        import asyncio

        await asyncio.wait_for(self.gate.wait(), 20)
        return "through"

    async def open_gate(self):
        self.gate.set()
        return "opened"


def test_async_groups_have_their_own_limits(driver):
    actor = AsyncGrouped.options(max_concurrency=1).remote()
    blocked = actor.wait_for_gate.remote()
    assert oxray.get(actor.open_gate.remote(), timeout=10) == "opened"
    assert oxray.get(blocked, timeout=10) == "through"


def test_bad_concurrency_groups_fail_at_the_definition():
    with pytest.raises(ValueError, match="positive"):
        oxray.remote(concurrency_groups={"io": 0})(type("A", (), {}))
    with pytest.raises(TypeError):
        oxray.method(concurrency_group=3)

    class Undeclared:
        @oxray.method(concurrency_group="io")
        def f(self):
            pass

    with pytest.raises(ValueError, match="io"):
        oxray.remote(Undeclared)


@oxray.remote
class Flaky:
    def __init__(self):
        self.calls = 0

    @oxray.method(max_task_retries=2, retry_exceptions=[KeyError])
    def fail_twice(self):
        self.calls += 1
        if self.calls < 3:
            raise KeyError(self.calls)
        return self.calls

    def fail_once(self):
        self.calls += 1
        if self.calls == 1:
            raise ValueError("first")
        return self.calls


def test_methods_retry_raised_exceptions_as_asked(driver):
    actor = Flaky.remote()
    assert oxray.get(actor.fail_twice.remote(), timeout=10) == 3
    other = Flaky.remote()
    with pytest.raises(ValueError, match="first"):
        oxray.get(other.fail_once.remote(), timeout=10)
    third = Flaky.remote()
    call = third.fail_once.options(max_task_retries=1, retry_exceptions=True)
    assert oxray.get(call.remote(), timeout=10) == 2
    with pytest.raises(TypeError):
        third.fail_once.options(retry_exceptions="yes")
    with pytest.raises(ValueError):
        third.fail_once.options(max_task_retries=-2)


@oxray.remote(max_restarts=2)
class Leaving:
    def pid(self):
        return os.getpid()

    def leave(self):
        oxray.actor.exit_actor()
        return "not reached"


def test_exit_actor_ends_the_actor_for_good(driver):
    actor = Leaving.remote()
    assert oxray.get(actor.pid.remote(), timeout=20)
    with pytest.raises(ActorDiedError, match="exit"):
        oxray.get(actor.leave.remote(), timeout=20)
    # Not a failure: max_restarts is not spent on it.
    with pytest.raises(ActorDiedError):
        oxray.get(actor.pid.remote(), timeout=20)
    with pytest.raises(TypeError, match="outside an actor"):
        oxray.actor.exit_actor()


def test_ray_terminate_ends_the_actor_after_earlier_calls(driver):
    actor = Leaving.remote()
    first = actor.pid.remote()
    actor.__ray_terminate__.remote()
    assert oxray.get(first, timeout=20)
    with pytest.raises(ActorDiedError):
        oxray.get(actor.pid.remote(), timeout=20)


@oxray.remote(max_restarts=1)
class Reborn:
    def reconstructed(self):
        return oxray.get_runtime_context().was_current_actor_reconstructed

    def crash(self):
        os._exit(1)


def test_a_restarted_actor_knows_it_was_reconstructed(driver):
    actor = Reborn.remote()
    assert oxray.get(actor.reconstructed.remote(), timeout=20) is False
    with pytest.raises(ActorDiedError):
        oxray.get(actor.crash.remote(), timeout=20)
    assert oxray.get(actor.reconstructed.remote(), timeout=30) is True
    with pytest.raises(RuntimeError, match="inside an actor"):
        oxray.get_runtime_context().was_current_actor_reconstructed


@oxray.remote(max_restarts=1)
class Exiting:
    def pid(self):
        return os.getpid()

    def exit(self, code):
        import sys

        sys.exit(code)


@oxray.remote(max_restarts=1)
class AsyncExiting:
    async def exit(self):
        import sys

        sys.exit(0)


@oxray.remote(max_retries=1)
def exit_once(marker, code):
    import sys

    if not os.path.exists(marker):
        Path(marker).write_text("exited")
        sys.exit(code)
    return "second attempt"


def test_sys_exit_ends_the_worker_as_in_ray(driver, tmp_path):
    # An actor's sys.exit(0) ends it on purpose: the call fails, no restart is spent.
    actor = Exiting.remote()
    assert oxray.get(actor.pid.remote(), timeout=20)
    with pytest.raises(ActorDiedError, match="exit code 0"):
        oxray.get(actor.exit.remote(0), timeout=20)
    with pytest.raises(ActorDiedError):
        oxray.get(actor.pid.remote(), timeout=20)
    async_actor = AsyncExiting.remote()
    with pytest.raises(ActorDiedError, match="exit code 0"):
        oxray.get(async_actor.exit.remote(), timeout=20)
    # Any other code is a crash: the process ends with it and the actor is restarted.
    actor = Exiting.remote()
    first = oxray.get(actor.pid.remote(), timeout=20)
    with pytest.raises(ActorDiedError):
        oxray.get(actor.exit.remote(4), timeout=20)
    assert oxray.get(actor.pid.remote(), timeout=30) != first
    # A task's worker ends too; the task runs again as its retries allow, else crashes.
    assert oxray.get(exit_once.remote(str(tmp_path / "a"), 0), timeout=30) == "second attempt"
    with pytest.raises(oxray.exceptions.WorkerCrashedError):
        oxray.get(exit_once.options(max_retries=0).remote(str(tmp_path / "b"), "bye"), timeout=30)


def test_exit_decisions():
    from oxray._private.actor_runner import ActorExit
    from oxray._private.worker_main import exit_decision

    assert exit_decision(ActorExit("x"), True) == ("actor", 0)
    assert exit_decision(SystemExit(), True) == ("actor", 0)
    assert exit_decision(SystemExit(0), False) == ("process", 0), "a task's worker ends"
    assert exit_decision(SystemExit(4), True) == ("process", 4)
    assert exit_decision(SystemExit("bye"), True) == ("process", 1)


@oxray.remote
class Tidy:
    def __init__(self, marker):
        self.marker = marker

    def ping(self):
        return "pong"

    def __ray_shutdown__(self):
        Path(self.marker).write_text("tidied")


def _appears(path, timeout=20):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if Path(path).exists():
            return True
        time.sleep(0.05)
    return False


def test_ray_shutdown_runs_when_an_actor_ends_gracefully_but_not_when_killed(driver, tmp_path):
    out_of_scope = Tidy.remote(str(tmp_path / "scope"))
    assert oxray.get(out_of_scope.ping.remote(), timeout=20) == "pong"
    del out_of_scope
    assert _appears(tmp_path / "scope"), "an actor whose last handle went away"

    terminated = Tidy.remote(str(tmp_path / "terminate"))
    terminated.__ray_terminate__.remote()
    assert _appears(tmp_path / "terminate"), "__ray_terminate__"

    killed = Tidy.remote(str(tmp_path / "kill"))
    assert oxray.get(killed.ping.remote(), timeout=20) == "pong"
    oxray.kill(killed)
    time.sleep(1)
    assert not (tmp_path / "kill").exists(), "kill ends the actor at once, with no cleanup"


@oxray.remote(max_calls=1, max_retries=0)  # no retry hides a call sent to an exiting worker
def pid_once():
    return os.getpid()


def test_max_calls_gives_each_call_a_fresh_process(driver):
    pids = [oxray.get(pid_once.remote(), timeout=30) for _ in range(3)]
    pids += oxray.get([pid_once.remote() for _ in range(4)], timeout=60)
    assert len(set(pids)) == 7, pids
    with pytest.raises(ValueError, match="max_calls"):
        pid_once.options(max_calls=-1)


@oxray.remote
class Self:
    def me(self):
        return oxray.get_runtime_context().current_actor

    def ping(self):
        return "pong"

    def resources(self):
        return oxray.get_runtime_context().get_assigned_resources()


@oxray.remote(num_cpus=1)
def task_resources():
    return oxray.get_runtime_context().get_assigned_resources()


def test_runtime_context_gives_the_current_actor(driver):
    actor = Self.options(num_cpus=0.5).remote()
    me = oxray.get(actor.me.remote(), timeout=20)
    assert me == actor
    assert oxray.get(me.ping.remote(), timeout=20) == "pong"
    assert oxray.get(actor.resources.remote(), timeout=20) == {"CPU": 0.5}
    assert oxray.get(task_resources.remote(), timeout=20) == {"CPU": 1.0}
    with pytest.raises(RuntimeError, match="inside an actor"):
        oxray.get_runtime_context().current_actor


@oxray.remote(num_cpus=0)
def where():
    return oxray.get_runtime_context().get_node_id()


@oxray.remote(num_cpus=0)
def streamed():
    yield oxray.get_runtime_context().get_node_id()


@oxray.remote(num_cpus=0)
class Placed:
    def node(self):
        return oxray.get_runtime_context().get_node_id()


def test_label_selectors_choose_matching_nodes(driver):
    node = oxray.nodes()[0]
    assert node["Labels"]["zone"] == "a"
    here = node["NodeID"]
    assert oxray.get(where.options(label_selector={"zone": "a"}).remote(), timeout=20) == here
    assert oxray.get(where.options(label_selector={"disk": "in(hdd,ssd)", "zone": "!b"}).remote(), timeout=20) == here
    actor = Placed.options(label_selector={"zone": "a"}).remote()
    assert oxray.get(actor.node.remote(), timeout=20) == here
    # No node matches: the task, the generator and the actor wait, as in Ray, unless a
    # fallback matches.
    with pytest.raises(GetTimeoutError):
        oxray.get(where.options(label_selector={"zone": "b"}).remote(), timeout=1.5)
    stream = streamed.options(label_selector={"zone": "b"}).remote()
    with pytest.raises(GetTimeoutError):
        stream.next_ready(timeout=1.5)
    waiting = Placed.options(label_selector={"zone": "b"}).remote()
    with pytest.raises(GetTimeoutError):
        oxray.get(waiting.node.remote(), timeout=1.5)
    oxray.kill(waiting)
    fallback = [{"label_selector": {"zone": "c"}}, {"label_selector": {"disk": "ssd"}}]
    assert oxray.get(where.options(label_selector={"zone": "b"}, fallback_strategy=fallback).remote(),
                     timeout=20) == here
    with pytest.raises(TypeError):
        where.options(label_selector={"zone": 1})
    with pytest.raises(ValueError):
        where.options(fallback_strategy=[{"zone": "a"}])
    with pytest.raises(ValueError):
        where.options(label_selector={"zone": "a"}, scheduling_strategy="SPREAD")


def test_label_options_and_group_choice_decisions():
    from oxray._private.actor_runner import DEFAULT_GROUP, group_of, retry_policy, should_retry
    from oxray.util import _labels, scheduling_strategies

    chosen = _labels.strategy({"label_selector": {"zone": "a"}, "fallback_strategy": [{"label_selector": {}}]}, None)
    assert scheduling_strategies.native(chosen) == ("LABELS", '[{"zone": "a"}, {}]', False, -1)
    assert _labels.strategy({}, "SPREAD") == "SPREAD"
    assert group_of("m", None, None, {"io": 1}) == DEFAULT_GROUP
    assert group_of("m", "io", "cpu", {"io": 1, "cpu": 1}) == "io", "the call's choice wins"
    assert retry_policy({}, {"max_task_retries": None, "retry_exceptions": True}, 3) == (3, True)
    assert retry_policy({"max_task_retries": 1}, {"retry_exceptions": True}, 3) == (1, True)
    assert retry_policy({}, {}, 3) == (0, False), "raised exceptions are retried only when asked"
    assert should_retry(KeyError(), [KeyError], -1) and not should_retry(ValueError(), [KeyError], 1)
    assert not should_retry(SystemExit(), True, 1)


@oxray.remote
class Described:
    KIND = "described"

    @classmethod
    def make_kind(cls):
        return cls.KIND.upper()

    @staticmethod
    def helper(x):
        return x + 1

    def kind(self):
        return self.KIND


def test_the_class_behind_remote_keeps_its_attributes_and_refuses_subclasses(driver):
    assert Described.KIND == "described" and Described.make_kind() == "DESCRIBED" and Described.helper(1) == 2
    assert oxray.get(Described.remote().kind.remote(), timeout=20) == "described"
    with pytest.raises(AttributeError, match="no attribute 'missing'"):
        Described.missing
    from oxray.exceptions import ActorClassInheritanceException

    with pytest.raises(ActorClassInheritanceException, match="inheriting from actor classes is not supported"):
        class Sub(Described):
            pass


@oxray.remote
class Keeper:
    def ping(self):
        return os.getpid()


def test_put_with_an_owner_makes_the_actor_own_the_object(driver):
    from oxray.exceptions import ObjectLostError

    keeper = Keeper.remote()
    oxray.get(keeper.ping.remote(), timeout=20)
    assert oxray.get(oxray.put("kept", _owner=keeper), timeout=20) == "kept"
    owned = oxray.put(list(range(1000)), _owner=keeper)
    mine = oxray.put(list(range(1000)))
    oxray.kill(keeper)
    with pytest.raises(ObjectLostError):
        oxray.get(owned, timeout=20)
    assert oxray.get(mine, timeout=20)[-1] == 999, "what this process owns stays"
    with pytest.raises(TypeError, match="_owner must be an actor handle"):
        oxray.put(1, _owner="someone")
