"""How an actor's calls run in its worker: one at a time (the default), on threads of their
own (`max_concurrency > 1`; see `worker_main._serve_threaded`), or as coroutines on an event loop (any `async def` method; up to
`max_concurrency` at once, 1000 by default, as in Ray)."""

import asyncio
import inspect


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
        self.threads = 0
        self.loop = None
        if self.is_async:
            # Run by the worker's main thread, which starts each call as it arrives.
            self.loop = asyncio.new_event_loop()
            self.slots = None
            self.limit = max_concurrency or 1000
        elif max_concurrency and max_concurrency > 1:
            self.threads = max_concurrency

    def submit(self, method, args, kwargs, done):
        """Starts a call of an async actor on its loop (from the loop's thread) without
        waiting; `done(result, error)` is called when it ends."""
        target = method_of(self.instance, method)

        async def call():
            if self.slots is None:
                self.slots = asyncio.Semaphore(self.limit)
            async with self.slots:
                result = target(*args, **kwargs)
                if inspect.isawaitable(result):
                    result = await result
                return result

        future = self.loop.create_task(call())

        def finished(f):
            error = f.exception()
            done(None if error else f.result(), error)

        future.add_done_callback(finished)
