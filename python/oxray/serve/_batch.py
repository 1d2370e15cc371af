"""`@serve.batch`: callers pass one item each; the wrapped `async def` gets a list and
returns (or, as an async generator, yields) a list of as many results."""

import asyncio
import functools
import inspect
import time
from typing import Any, Callable, List, Optional

_STOP = object()


def _check(max_batch_size, batch_wait_timeout_s, max_concurrent_batches):
    if isinstance(max_batch_size, bool) or not isinstance(max_batch_size, int) or max_batch_size < 1:
        raise ValueError(f"max_batch_size must be an integer >= 1, got {max_batch_size!r}")
    if isinstance(batch_wait_timeout_s, bool) or not isinstance(batch_wait_timeout_s, (int, float)) \
            or batch_wait_timeout_s < 0:
        raise ValueError(f"batch_wait_timeout_s must be a number >= 0, got {batch_wait_timeout_s!r}")
    if isinstance(max_concurrent_batches, bool) or not isinstance(max_concurrent_batches, int) \
            or max_concurrent_batches < 1:
        raise ValueError(f"max_concurrent_batches must be an integer >= 1, got {max_concurrent_batches!r}")


class _Item:
    __slots__ = ("self_arg", "args", "kwargs", "model_id", "future", "queue")

    def __init__(self, self_arg, args, kwargs, model_id, stream: bool):
        self.self_arg = self_arg
        self.args = args
        self.kwargs = kwargs
        self.model_id = model_id
        self.future = None if stream else asyncio.get_running_loop().create_future()
        self.queue = asyncio.Queue() if stream else None


class _BatchQueue:
    """The items waiting for the next batch, on one event loop, and the task that forms and
    runs batches."""

    def __init__(self, func, owner: "_Batcher"):
        self.func = func
        self.owner = owner
        self.pending: List[_Item] = []
        self.arrived = asyncio.Event()
        self.slots = asyncio.Semaphore(owner.max_concurrent_batches)
        self.task = asyncio.get_running_loop().create_task(self._run())
        self.running = set()

    def put(self, item: _Item) -> None:
        self.pending.append(item)
        self.arrived.set()

    def _size(self, items: List[_Item]) -> int:
        fn = self.owner.batch_size_fn
        return fn([i.args[0] if i.args else None for i in items]) if fn else len(items)

    def _take(self) -> List[_Item]:
        """The oldest item and those after it with the same model id, up to the batch size."""
        model = self.pending[0].model_id
        batch, rest = [], []
        for item in self.pending:
            if item.model_id == model and (not batch or self._size(batch + [item]) <= self.owner.max_batch_size):
                batch.append(item)
            else:
                rest.append(item)
        self.pending = rest
        return batch

    def _full(self) -> bool:
        model = self.pending[0].model_id
        same = [i for i in self.pending if i.model_id == model]
        return self._size(same) >= self.owner.max_batch_size

    async def _run(self) -> None:
        while True:
            while not self.pending:
                self.arrived.clear()
                await self.arrived.wait()
            deadline = time.monotonic() + self.owner.batch_wait_timeout_s
            while not self._full():
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self.arrived.clear()
                try:
                    await asyncio.wait_for(self.arrived.wait(), left)
                except asyncio.TimeoutError:
                    break
            await self.slots.acquire()
            batch = self._take()
            task = asyncio.get_running_loop().create_task(self._call(batch))
            self.running.add(task)
            task.add_done_callback(self.running.discard)

    def _arguments(self, batch: List[_Item]):
        first = batch[0]
        args = [[i.args[n] for i in batch] for n in range(len(first.args))]
        kwargs = {k: [i.kwargs[k] for i in batch] for k in first.kwargs}
        if first.self_arg is not None:
            args.insert(0, first.self_arg)
        return args, kwargs

    async def _call(self, batch: List[_Item]) -> None:
        from oxray.serve import _context

        token = _context.set_request(_context.RequestContext(multiplexed_model_id=batch[0].model_id))
        try:
            args, kwargs = self._arguments(batch)
            if inspect.isasyncgenfunction(self.func):
                await self._stream(batch, self.func(*args, **kwargs))
                return
            results = await self.func(*args, **kwargs)
            results = list(results) if results is not None else None
            if results is None or len(results) != len(batch):
                raise TypeError(f"Batched function {self.func.__name__} returned "
                                f"{'None' if results is None else len(results)} results for a batch of "
                                f"{len(batch)}: it must return a list of one result per input.")
            for item, result in zip(batch, results):
                if not item.future.done():
                    item.future.set_result(result)
        except BaseException as error:  # every caller of the batch gets it
            for item in batch:
                if item.future is not None and not item.future.done():
                    item.future.set_exception(error)
                elif item.queue is not None:
                    item.queue.put_nowait(error)
            if not isinstance(error, Exception):
                raise
        finally:
            _context.reset_request(token)
            self.slots.release()

    async def _stream(self, batch: List[_Item], gen) -> None:
        done = [False] * len(batch)
        async for values in gen:
            values = list(values)
            if len(values) != len(batch):
                raise TypeError(f"Batched generator {self.func.__name__} yielded {len(values)} results for a "
                                f"batch of {len(batch)}.")
            for n, (item, value) in enumerate(zip(batch, values)):
                if done[n]:
                    continue
                if value is StopIteration or isinstance(value, StopIteration):
                    done[n] = True
                    item.queue.put_nowait(_STOP)
                else:
                    item.queue.put_nowait(value)
        for n, item in enumerate(batch):
            if not done[n]:
                item.queue.put_nowait(_STOP)


class _Batcher:
    def __init__(self, func, max_batch_size, batch_wait_timeout_s, max_concurrent_batches, batch_size_fn):
        self.func = func
        self.max_batch_size = max_batch_size
        self.batch_wait_timeout_s = batch_wait_timeout_s
        self.max_concurrent_batches = max_concurrent_batches
        self.batch_size_fn = batch_size_fn
        self.queues = {}

    def queue(self) -> _BatchQueue:
        loop = asyncio.get_running_loop()
        queue = self.queues.get(loop)
        if queue is None:
            queue = self.queues[loop] = _BatchQueue(self.func, self)
        return queue

    def set_max_batch_size(self, value: int) -> None:
        _check(value, self.batch_wait_timeout_s, self.max_concurrent_batches)
        self.max_batch_size = value

    def set_batch_wait_timeout_s(self, value: float) -> None:
        _check(self.max_batch_size, value, self.max_concurrent_batches)
        self.batch_wait_timeout_s = value


def _is_method(func) -> bool:
    params = list(inspect.signature(func).parameters)
    return bool(params) and params[0] == "self"


def batch(_func: Optional[Callable] = None, max_batch_size: int = 10, batch_wait_timeout_s: float = 0.01,
          max_concurrent_batches: int = 1, batch_size_fn: Optional[Callable[[List[Any]], int]] = None):
    """`@serve.batch` or `@serve.batch(max_batch_size=..., batch_wait_timeout_s=...)`."""
    if _func is not None and not callable(_func):
        raise TypeError("@serve.batch can only be used to decorate functions or methods.")
    _check(max_batch_size, batch_wait_timeout_s, max_concurrent_batches)

    def decorate(func):
        if not (inspect.iscoroutinefunction(func) or inspect.isasyncgenfunction(func)):
            raise TypeError("Functions decorated with @serve.batch must be 'async def'.")
        batcher = _Batcher(func, max_batch_size, batch_wait_timeout_s, max_concurrent_batches, batch_size_fn)
        method = _is_method(func)

        def enqueue(args, kwargs, stream):
            from oxray.serve import _context

            self_arg = args[0] if method else None
            item = _Item(self_arg, args[1:] if method else args, kwargs,
                         _context.current_request().multiplexed_model_id, stream)
            batcher.queue().put(item)
            return item

        if inspect.isasyncgenfunction(func):
            @functools.wraps(func)
            async def wrapper(*args, **kwargs):
                item = enqueue(args, kwargs, True)
                while True:
                    value = await item.queue.get()
                    if value is _STOP:
                        return
                    if isinstance(value, BaseException):
                        raise value
                    yield value
        else:
            @functools.wraps(func)
            async def wrapper(*args, **kwargs):
                return await enqueue(args, kwargs, False).future

        wrapper.set_max_batch_size = batcher.set_max_batch_size
        wrapper.set_batch_wait_timeout_s = batcher.set_batch_wait_timeout_s
        wrapper._get_curr_max_batch_size = lambda: batcher.max_batch_size
        wrapper._get_curr_batch_wait_timeout_s = lambda: batcher.batch_wait_timeout_s
        wrapper._serve_batcher = batcher
        return wrapper

    return decorate(_func) if _func is not None else decorate
