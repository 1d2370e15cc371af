"""oxray.util's library helpers on a real cluster: ActorPool, Queue, as_completed,
map_unordered and get_node_ip_address."""

import asyncio
import time

import pytest

import oxray
from oxray.exceptions import ActorDiedError
from oxray.util import ActorPool, as_completed, get_node_ip_address, map_unordered
from oxray.util.queue import Empty, Full, Queue


@oxray.remote
class Doubler:
    def double(self, value, seconds=0.0):
        time.sleep(seconds)
        return 2 * value

    def pair(self, value):
        return value, -value


@oxray.remote
def slow_identity(value, seconds=0.0):
    time.sleep(seconds)
    return value


@oxray.remote
def produce(queue, items):
    for item in items:
        queue.put(item)
    return len(items)


@oxray.remote
def node_ip():
    return get_node_ip_address()


@pytest.fixture(scope="module")
def actors(private_cluster):
    pair = [Doubler.remote(), Doubler.remote()]
    oxray.get([a.double.remote(0) for a in pair])  # both placed and warm
    return pair


def double(actor, value):
    return actor.double.remote(value)


def test_map_keeps_submission_order(actors):
    pool = ActorPool(actors)
    # The first value is the slowest: an unordered pool would yield it last.
    results = pool.map(lambda a, v: a.double.remote(v, 0.3 if v == 0 else 0.0), range(6))
    assert list(results) == [0, 2, 4, 6, 8, 10]
    assert not pool.has_next()


def test_map_unordered_yields_fast_results_first(actors):
    pool = ActorPool(actors)
    results = list(pool.map_unordered(lambda a, v: a.double.remote(v, 0.5 if v == 0 else 0.0), range(5)))
    assert sorted(results) == [0, 2, 4, 6, 8]
    assert results[-1] == 0


def test_submit_queues_behind_busy_actors(actors):
    pool = ActorPool(actors[:1])
    for value in (1, 2, 3):
        pool.submit(double, value)
    assert pool.has_next() and not pool.has_free()
    assert [pool.get_next(), pool.get_next(), pool.get_next()] == [2, 4, 6]
    assert pool.has_free() and not pool.has_next()
    with pytest.raises(StopIteration):
        pool.get_next()
    with pytest.raises(StopIteration):
        pool.get_next_unordered()


def test_get_next_timeout_leaves_the_call_or_drops_it(actors):
    pool = ActorPool(actors)
    pool.submit(lambda a, v: a.double.remote(v, 0.4), 5)
    with pytest.raises(TimeoutError):
        pool.get_next(timeout=0.05)
    assert pool.has_next()
    assert pool.get_next(timeout=5) == 10

    pool.submit(lambda a, v: a.double.remote(v, 0.4), 6)
    with pytest.raises(TimeoutError, match="ignored"):
        pool.get_next(timeout=0.05, ignore_if_timedout=True)
    assert not pool.has_next() and pool.has_free()

    pool.submit(lambda a, v: a.double.remote(v, 0.4), 7)
    with pytest.raises(TimeoutError):
        pool.get_next_unordered(timeout=0.05)
    assert pool.get_next_unordered(timeout=5) == 14
    pool.submit(lambda a, v: a.double.remote(v, 0.4), 8)
    with pytest.raises(TimeoutError, match="ignored"):
        pool.get_next_unordered(timeout=0.05, ignore_if_timedout=True)
    assert not pool.has_next()
    # The actors finish the dropped calls before the next ones.
    assert list(pool.map(double, [1, 2])) == [2, 4]


def test_get_next_after_get_next_unordered_is_refused(actors):
    pool = ActorPool(actors)
    pool.submit(lambda a, v: a.double.remote(v, 0.3), 1)
    pool.submit(double, 2)
    assert pool.get_next_unordered() == 4
    with pytest.raises(ValueError):
        pool.get_next()
    assert pool.get_next_unordered() == 2


def test_calls_returning_several_refs(actors):
    pool = ActorPool(actors)
    results = pool.map(lambda a, v: a.pair.options(num_returns=2).remote(v), [1, 2, 3])
    assert list(results) == [[1, -1], [2, -2], [3, -3]]
    unordered = pool.map_unordered(lambda a, v: a.pair.options(num_returns=2).remote(v), [4, 5])
    assert sorted(unordered) == [[4, -4], [5, -5]]


def test_pop_idle_and_push(actors):
    first, second = actors
    pool = ActorPool([first])
    pool.submit(double, 1)
    assert pool.pop_idle() is None
    assert pool.get_next() == 2
    assert pool.pop_idle() == first
    assert pool.pop_idle() is None and not pool.has_free()
    pool.submit(double, 3)  # waits: the pool has no actor
    assert pool.has_next() is False
    pool.push(second)  # starts the waiting call
    assert pool.get_next() == 6
    with pytest.raises(ValueError):
        pool.push(second)


def test_dead_actor_leaves_the_pool(private_cluster):
    doomed = Doubler.remote()
    pool = ActorPool([doomed])
    oxray.kill(doomed)
    pool.submit(double, 1)
    with pytest.raises(ActorDiedError):
        pool.get_next()
    assert pool.pop_idle() is None and not pool.has_free()


def test_queue_is_fifo_with_sizes(private_cluster):
    q = Queue()
    assert q.empty() and not q.full() and q.qsize() == 0
    for item in ("a", "b", {"c": 3}):
        q.put(item)
    assert len(q) == 3 and q.size() == 3 and not q.empty()
    assert [q.get(), q.get_nowait(), q.get(block=False)] == ["a", "b", {"c": 3}]
    assert q.empty()
    q.shutdown()
    assert q.actor is None


def test_queue_limits_raise_empty_and_full(private_cluster):
    q = Queue(maxsize=1)
    assert q.maxsize == 1
    with pytest.raises(Empty):
        q.get_nowait()
    started = time.monotonic()
    with pytest.raises(Empty):
        q.get(timeout=0.2)
    assert 0.15 < time.monotonic() - started < 3
    q.put_nowait(1)
    assert q.full()
    with pytest.raises(Full):
        q.put(2, block=False)
    with pytest.raises(Full):
        q.put(2, timeout=0.1)
    assert q.get(timeout=0) == 1  # a zero timeout takes what is there
    with pytest.raises(ValueError):
        q.put(3, timeout=-1)
    with pytest.raises(ValueError):
        q.get(timeout=-1)
    q.shutdown(force=True)


def test_queue_batches_are_all_or_nothing(private_cluster):
    q = Queue(maxsize=3)
    q.put_nowait_batch([1, 2])
    with pytest.raises(Full):
        q.put_nowait_batch([3, 4])
    assert q.qsize() == 2
    q.put_nowait_batch(x for x in [3])
    with pytest.raises(Empty):
        q.get_nowait_batch(4)
    assert q.get_nowait_batch(2) == [1, 2]
    assert q.get_nowait_batch(0) == []
    assert q.get_nowait_batch(1) == [3]
    with pytest.raises(TypeError):
        q.put_nowait_batch(5)
    with pytest.raises(TypeError):
        q.get_nowait_batch("2")
    with pytest.raises(ValueError):
        q.get_nowait_batch(-1)
    q.shutdown()


def test_queue_passed_to_a_task(private_cluster):
    q = Queue(maxsize=2)  # the task blocks on a full queue until the driver takes items
    done = produce.remote(q, list(range(6)))
    assert [q.get(timeout=30) for _ in range(6)] == list(range(6))
    assert oxray.get(done) == 6
    assert q.empty()
    q.shutdown()


def test_queue_async_variants(private_cluster):
    q = Queue(maxsize=1)

    async def main():
        # The get waits on the event loop while the puts go in.
        getter = asyncio.ensure_future(asyncio.gather(*(q.get_async(timeout=10) for _ in range(3))))
        for item in ("x", "y", "z"):
            await q.put_async(item, timeout=10)
        got = await getter
        with pytest.raises(Empty):
            await q.get_async(block=False)
        with pytest.raises(Empty):
            await q.get_async(timeout=0.05)
        await q.put_async("w")
        with pytest.raises(Full):
            await q.put_async("v", block=False)
        with pytest.raises(Full):
            await q.put_async("v", timeout=0.05)
        return got, await q.get_async()

    got, last = asyncio.run(main())
    assert sorted(got) == ["x", "y", "z"] and last == "w"
    q.shutdown()


def test_queue_actor_options_and_shutdown(private_cluster):
    q = Queue(actor_options={"resources": {"accel": 1}})
    q.put(1)  # placed: it holds the node's only accel
    assert accel_becomes(0)
    assert q.get() == 1
    waiting = q.actor.get.remote(None)  # never served: the graceful shutdown gives up on it
    started = time.monotonic()
    q.shutdown(grace_period_s=0.3)
    assert q.actor is None and time.monotonic() - started < 5
    with pytest.raises(ActorDiedError):
        oxray.get(waiting, timeout=10)
    assert accel_becomes(1)


def accel_becomes(amount):
    """Whether the free accel reaches `amount` (the head learns of it a moment later)."""
    deadline = time.monotonic() + 10
    while oxray.available_resources().get("accel", 0) != amount:
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def test_as_completed_yields_in_completion_order(private_cluster):
    oxray.get([slow_identity.remote(v, 0.1) for v in range(2)])  # two workers up: the tasks run side by side
    refs = [slow_identity.remote(0, 0.6), slow_identity.remote(1)]
    assert list(as_completed(refs, chunk_size=1)) == [1, 0]
    refs = [oxray.put(v) for v in range(5)]
    assert set(as_completed(refs, yield_obj_refs=True)) == set(refs)
    assert list(as_completed([])) == []
    with pytest.raises(ValueError):
        next(as_completed(refs, chunk_size=0))
    with pytest.raises(ValueError):
        next(as_completed(refs, num_returns=2))


def test_map_unordered_with_backpressure(private_cluster):
    assert sorted(map_unordered(slow_identity, range(8), backpressure_size=2, chunk_size=1)) == list(range(8))
    refs = list(map_unordered(slow_identity, [5, 6], yield_obj_refs=True, backpressure_size=None))
    assert sorted(oxray.get(refs)) == [5, 6]
    with pytest.raises(ValueError):
        next(map_unordered(slow_identity, [1], backpressure_size=0))
    with pytest.raises(ValueError):
        next(map_unordered(slow_identity, [1], num_returns=1))


def test_get_node_ip_address(private_cluster):
    node_ips = {n["NodeManagerAddress"] for n in oxray.nodes() if n["Alive"]}
    assert get_node_ip_address() in node_ips
    assert oxray.get(node_ip.remote()) in node_ips
