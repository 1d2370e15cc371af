"""How an actor's calls run in its worker: one at a time (the default), on a thread pool
(`max_concurrency > 1`), or as coroutines on an event loop (any `async def` method; up to
`max_concurrency` at once, 1000 by default, as in Ray)."""

import asyncio
import inspect
from concurrent.futures import ThreadPoolExecutor


def method_of(instance, name: str):
    """The callable behind a call: the actor's method, or one of the methods every actor has
    (`__ray_ready__`, `__ray_call__(fn, *args)` running `fn(actor, *args)`)."""
    if name == "__ray_ready__":
        return lambda: True
    if name == "__ray_call__":
        return lambda fn, *args, **kwargs: fn(instance, *args, **kwargs)
    return getattr(instance, name)


class ActorRunner:
    def __init__(self, instance, max_concurrency):
        self.instance = instance
        # Looked up on the class, so no property of the instance runs.
        self.is_async = any(inspect.iscoroutinefunction(m) for _, m in inspect.getmembers(type(instance)))
        self.pool = None
        self.loop = None
        if self.is_async:
            # Run by the worker's main thread, which starts each call as it arrives.
            self.loop = asyncio.new_event_loop()
            self.slots = None
            self.limit = max_concurrency or 1000
        elif max_concurrency and max_concurrency > 1:
            self.pool = ThreadPoolExecutor(max_workers=max_concurrency, thread_name_prefix="actor")

    @property
    def concurrent(self):
        return self.is_async or self.pool is not None

    def submit(self, method, args, kwargs, done):
        """Runs a call without waiting; `done(result, error)` is called when it ends. An
        async actor's calls are submitted from its loop's thread."""
        target = method_of(self.instance, method)
        if self.is_async:
            async def call():
                if self.slots is None:
                    self.slots = asyncio.Semaphore(self.limit)
                async with self.slots:
                    result = target(*args, **kwargs)
                    if inspect.isawaitable(result):
                        result = await result
                    return result

            future = self.loop.create_task(call())
        else:
            future = self.pool.submit(target, *args, **kwargs)

        def finished(f):
            error = f.exception()
            done(None if error else f.result(), error)

        future.add_done_callback(finished)
