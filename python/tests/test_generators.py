"""Generators across processes, as in Ray: `num_returns="streaming"` (and generator
functions and methods by default) hand out each value's ref as the task yields it;
`"dynamic"` gives the refs once the task has ended; a fixed `num_returns` filled short
fails only the refs it could not fill."""

import asyncio
import time

import pytest

import oxray
from oxray.exceptions import GetTimeoutError, RaySystemError, WorkerCrashedError


@oxray.remote
def count_slowly(n, pause):
    for i in range(n):
        yield i
        time.sleep(pause)


@oxray.remote(num_returns="streaming")
def fail_after(n):
    for i in range(n):
        yield i
    raise KeyError("midway")


@oxray.remote
def nested():
    yield {"inner": oxray.put("inside")}


@oxray.remote(num_returns="dynamic")
def dynamic(n):
    for i in range(n):
        yield i * 10


@oxray.remote(num_returns=3)
def too_few():
    return 1, 2


@oxray.remote
class Reader:
    def lines(self, n):
        for i in range(n):
            yield f"line {i}"

    def plain(self):
        return "plain"


def test_values_come_as_the_task_yields_them(private_cluster):
    started = time.monotonic()
    gen = count_slowly.remote(3, 1.0)
    first = next(gen)
    assert time.monotonic() - started < 0.9, "the first value before the task ends"
    assert oxray.get(first) == 0
    assert [oxray.get(r) for r in gen] == [1, 2]
    assert oxray.get(gen.completed()) is None
    with pytest.raises(StopIteration):
        next(gen)


def test_an_error_midway_comes_after_the_values(private_cluster):
    refs = list(fail_after.remote(2))
    assert len(refs) == 3
    assert oxray.get(refs[:2]) == [0, 1]
    with pytest.raises(KeyError, match="midway"):
        oxray.get(refs[2])


def test_refs_inside_yielded_values_and_dynamic_generators(private_cluster):
    [value] = [oxray.get(r) for r in nested.remote()]
    assert oxray.get(value["inner"]) == "inside"
    assert [oxray.get(r) for r in oxray.get(dynamic.remote(3))] == [0, 10, 20]


def test_actor_methods_stream_and_async_iteration_works(private_cluster):
    reader = Reader.remote()
    assert [oxray.get(r) for r in reader.lines.remote(3)] == ["line 0", "line 1", "line 2"]
    assert oxray.get(reader.plain.remote()) == "plain"

    async def main():
        return [await ref async for ref in count_slowly.remote(3, 0.0)]

    assert asyncio.run(main()) == [0, 1, 2]


def test_next_ready_times_out_and_short_fixed_returns_fail_only_the_rest(private_cluster):
    gen = count_slowly.options(num_returns="streaming").remote(2, 2.0)
    assert oxray.get(gen.next_ready(timeout=10)) == 0
    with pytest.raises(GetTimeoutError):
        gen.next_ready(timeout=0.2)
    one, two, three = too_few.remote()
    assert oxray.get([one, two]) == [1, 2]
    with pytest.raises((RaySystemError, WorkerCrashedError), match="returned 2 values"):
        oxray.get(three)


def test_wait_takes_generators_ready_when_next_would_not_block(private_cluster):
    slow = count_slowly.remote(2, 0.5)  # first value at once, the second after 0.5 s
    ready, rest = oxray.wait([slow], timeout=5)
    assert ready == [slow] and rest == []
    first = next(slow)
    ready, rest = oxray.wait([slow], timeout=0.1)
    assert ready == [] and rest == [slow], "the second value is not there yet"
    ref = oxray.put(1)
    ready, rest = oxray.wait([slow, ref], num_returns=1, timeout=5)
    assert ready == [ref] and rest == [slow], "order kept, at most num_returns"
    ready, _ = oxray.wait([slow], timeout=5)
    assert ready == [slow] and oxray.get([first, next(slow)]) == [0, 1]
    ready, _ = oxray.wait([slow], timeout=5)
    assert ready == [slow], "an ended stream is ready: next raises StopIteration at once"
    with pytest.raises(StopIteration):
        next(slow)
    with pytest.raises(TypeError):
        oxray.wait([slow, "x"])
