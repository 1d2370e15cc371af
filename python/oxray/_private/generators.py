"""Generators across processes, as Ray's: `num_returns="streaming"` gives an
`ObjectRefGenerator` that yields an ObjectRef per value as the task produces it;
`num_returns="dynamic"` gives one ObjectRef whose value, a `DynamicObjectRefGenerator`,
holds a ref per value once the task has ended."""

from typing import List, Optional

STREAMING, DYNAMIC = "streaming", "dynamic"


def mode(num_returns, function) -> Optional[str]:
    """STREAMING, DYNAMIC, or None for a fixed number of returns. A generator function
    without `num_returns` streams, as in Ray."""
    import inspect

    if num_returns in (STREAMING, DYNAMIC):
        return num_returns
    if num_returns is None and (inspect.isgeneratorfunction(function) or inspect.isasyncgenfunction(function)):
        return STREAMING
    return None


class ObjectRefGenerator:
    """The refs of the values a streaming task yields, in order, each as soon as it is
    there. Iterating waits for the next; an error the task raised comes as one last ref
    that raises it on `get`. Works with `for` and `async for`."""

    def __init__(self, completed, client):
        self._completed = completed
        self._client = client
        self._next = 0
        self._error_given = False

    def __iter__(self):
        return self

    def __next__(self):
        return self._take(None)

    def next_ready(self, timeout: Optional[float] = None):
        """The next ref, waiting at most `timeout` seconds (GetTimeoutError past it)."""
        return self._take(timeout)

    def _take(self, timeout):
        from oxray import exceptions
        from oxray._private import worker
        from oxray.object_ref import ObjectRef

        try:
            object_id = self._client.stream_next(self._completed.hex(), self._next, timeout)
        except TimeoutError as e:
            raise exceptions.GetTimeoutError(f"Get timed out: {e}") from None
        if object_id is not None:
            self._next += 1
            return ObjectRef._adopt(object_id, self._client)
        if not self._error_given:
            try:
                worker.get(self._completed)
            except Exception:
                self._error_given = True
                return self._completed
        raise StopIteration

    def __aiter__(self):
        return self

    async def __anext__(self):
        import asyncio

        ref = await asyncio.get_running_loop().run_in_executor(None, self._take_or_none)
        if ref is None:
            raise StopAsyncIteration
        return ref

    def _take_or_none(self):
        # A future cannot carry StopIteration.
        try:
            return self._take(None)
        except StopIteration:
            return None

    def completed(self):
        """The ref that is ready once the task has ended (and raises its error, if any)."""
        return self._completed

    def _next_is_ready(self) -> bool:
        """Whether `next` would return at once: its ref is there, or the stream has ended."""
        try:
            self._client.stream_next(self._completed.hex(), self._next, 0)
        except TimeoutError:
            return False
        return True

    def is_finished(self) -> bool:
        from oxray._private import worker

        ready, _ = worker.wait([self._completed], timeout=0)
        return bool(ready) and self._client.stream_next(self._completed.hex(), self._next, 0) is None

    def __del__(self):
        try:
            self._client.stream_drop(self._completed.hex())
        except Exception:  # interpreter shutdown
            pass


class DynamicObjectRefGenerator:
    """The value of a `num_returns="dynamic"` task's ref: a ref per value it yielded."""

    def __init__(self, refs: List):
        self._refs = list(refs)

    def __iter__(self):
        return iter(self._refs)

    def __len__(self):
        return len(self._refs)


def run_dynamic(function, *args, **kwargs):
    """In the worker: each value a dynamic generator yields becomes an object of the
    worker's (passed on to the caller inside the result)."""
    from oxray._private import worker

    return DynamicObjectRefGenerator([worker.put(v) for v in function(*args, **kwargs)])


def stream(executor, task_id: str, values) -> None:
    """In the worker: sends each value a streaming task yields to the caller as it comes,
    with the refs inside it held at their owners for the caller. Safe from several threads
    at once (a threaded actor's streams) and from an event loop's thread."""
    for index, value in enumerate(values):
        _send(executor, task_id, index, value)


async def stream_async(executor, task_id: str, values) -> None:
    """`stream` for a call of an async actor, on its event loop: an async generator's values
    go as it yields them; a plain generator's too, with the loop let go between values so
    that the actor's other calls move on while it streams."""
    import asyncio

    index = 0
    if hasattr(values, "__aiter__"):
        async for value in values:
            _send(executor, task_id, index, value)
            index += 1
        return
    for value in values:
        _send(executor, task_id, index, value)
        index += 1
        await asyncio.sleep(0)


def _send(executor, task_id: str, index: int, value) -> None:
    from oxray._private import serialization, worker

    data, refs = serialization.dumps_with_refs(value)
    held = worker.client().hold_for_caller([r.hex() for r in refs]) if refs else []
    executor.report_item(task_id, index, data, held)
