"""Ray's public core API as ported scripts use it: argument checks at the call, `wait([])`,
futures from refs, the methods every actor has, runtime context names, error details,
named actor listing, unnamed detached actors."""

import asyncio
import concurrent.futures
import gc
import os
import signal
import time

import pytest

import oxray
from oxray.exceptions import ActorDiedError, RayTaskError


@oxray.remote
def double(x):
    return 2 * x


@oxray.remote
def fail():
    raise ValueError("no good")


@oxray.remote
def task_name():
    return oxray.get_runtime_context().get_task_name(), oxray.get_gpu_ids()


@oxray.remote
def function_name():
    return oxray.get_runtime_context().get_task_function_name()


@oxray.remote
class Named:
    def function_name(self):
        return oxray.get_runtime_context().get_task_function_name()


@oxray.remote
class Counter:
    def __init__(self, start=0):
        self.n = start

    def incr(self, by=1):
        self.n += by
        return self.n

    def pid(self):
        return os.getpid()

    def name(self):
        return oxray.get_runtime_context().get_actor_name()


@oxray.remote
class AsyncCounter:
    def __init__(self):
        self.n = 0

    async def incr(self):
        self.n += 1
        return self.n


@oxray.remote
def raise_stubborn():
    class Stubborn(Exception):
        """Pickles, but cannot be rebuilt from its args."""

        def __init__(self, a, b):
            super().__init__(f"{a}-{b}")

    raise Stubborn(1, 2)


def test_arguments_that_do_not_fit_fail_at_the_call(private_cluster):
    with pytest.raises(TypeError, match="double"):
        double.remote(1, 2)
    with pytest.raises(TypeError):
        double.remote(y=1)
    with pytest.raises(TypeError, match="Counter"):
        Counter.remote(1, 2, 3)
    c = Counter.remote(5)
    with pytest.raises(TypeError, match="incr"):
        c.incr.remote(1, 2)
    assert oxray.get(c.incr.remote(by=2)) == 7


def test_bad_option_values_fail_where_ray_checks_them():
    for options, error in [({"num_cpus": "x"}, TypeError), ({"num_gpus": -1}, ValueError),
                           ({"memory": True}, TypeError), ({"resources": {"disk": "1"}}, TypeError), ({"resources": {"disk": -1}}, ValueError),
                           ({"max_retries": -2}, ValueError), ({"retry_exceptions": [42]}, TypeError),
                           ({"runtime_env": ["pip"]}, TypeError), ({"name": 3}, TypeError)]:
        with pytest.raises(error):
            oxray.remote(**options)(lambda: 1)
        with pytest.raises(error):
            double.options(**options)
    with pytest.raises(ValueError, match="lifetime"):
        Counter.options(lifetime="forever")
    with pytest.raises(ValueError, match="max_restarts"):
        oxray.remote(max_restarts=1.5)(type("A", (), {}))
    assert double.options(num_cpus=0.5, resources={"disk": 1}, retry_exceptions=[ValueError], max_retries=-1)
    with pytest.raises(RuntimeError, match="Unknown keyword argument.*num_cpu\\b"):
        oxray.init(num_cpu=2)


def test_wait_takes_an_empty_list_and_refuses_a_single_ref(private_cluster):
    assert oxray.wait([]) == ([], [])
    with pytest.raises(TypeError):
        oxray.wait(double.remote(1))
    with pytest.raises(ValueError):
        oxray.wait([double.remote(1)], timeout=-1)


def test_refs_give_futures(private_cluster):
    ref = double.remote(21)
    future = ref.future()
    assert isinstance(future, concurrent.futures.Future)
    assert future.result(timeout=30) == 42
    futures = [double.remote(i).future() for i in range(20)]
    assert [f.result(timeout=30) for f in futures] == [2 * i for i in range(20)]
    with pytest.raises(ValueError, match="no good"):
        fail.remote().future().result(timeout=30)

    async def main():
        return await double.remote(4), await double.remote(5).as_future()

    assert asyncio.run(main()) == (8, 10)
    assert ref.task_id() == ref.hex() and isinstance(ref.job_id(), str)
    assert oxray.ObjectID is oxray.ObjectRef


def test_every_actor_has_ready_and_call(private_cluster):
    for cls in (Counter, AsyncCounter):
        actor = cls.remote()
        assert oxray.get(actor.__ray_ready__.remote(), timeout=30) is True
        assert oxray.get(actor.__ray_call__.remote(lambda self, k: self.n + k, 10), timeout=30) == 10


def test_runtime_context_names_the_task_and_the_actor(private_cluster):
    assert oxray.get(task_name.remote()) == ("task_name", [])
    assert oxray.get(function_name.remote()) == f"{__name__}.function_name"
    assert oxray.get(Named.remote().function_name.remote()) == f"{__name__}.Named.function_name"
    assert oxray.get_runtime_context().get_task_function_name() is None, "a driver runs no task"
    named = Counter.options(name="the-counter").remote()
    assert oxray.get(named.name.remote()) == "the-counter"
    assert oxray.get(Counter.remote().name.remote()) is None
    assert "the-counter" in oxray.util.list_named_actors()
    everywhere = oxray.util.list_named_actors(all_namespaces=True)
    assert {"name": "the-counter", "namespace": "default"} in everywhere
    oxray.kill(named)
    assert "the-counter" not in oxray.util.list_named_actors()


def test_errors_carry_their_details(private_cluster):
    actor = Counter.remote()
    oxray.get(actor.incr.remote())
    oxray.kill(actor)
    with pytest.raises(ActorDiedError) as info:
        oxray.get(actor.incr.remote(), timeout=30)
    assert info.value.actor_id == actor._actor_id
    with pytest.raises(RayTaskError, match="Stubborn: 1-2"):
        oxray.get(raise_stubborn.remote())


def test_an_unnamed_detached_actor_outlives_its_handles(private_cluster):
    actor = Counter.options(lifetime="detached").remote()
    pid = oxray.get(actor.pid.remote())
    del actor
    gc.collect()
    time.sleep(1.0)
    os.kill(pid, 0)  # still there
    os.kill(pid, signal.SIGKILL)


@oxray.remote
def omp():
    return os.environ.get("OMP_NUM_THREADS")


def test_omp_num_threads_follows_the_cpus_a_task_holds(private_cluster):
    if "OMP_NUM_THREADS" in os.environ:
        pytest.skip("set by the user: left as it is")
    assert oxray.get(omp.remote()) == "1"
    assert oxray.get(omp.options(num_cpus=2).remote()) == "2"
    assert oxray.get(omp.options(runtime_env={"env_vars": {"OMP_NUM_THREADS": "3"}}).remote()) == "3"
