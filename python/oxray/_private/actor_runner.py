"""How an actor's calls run in its worker: one at a time (the default), on threads of their
own (`max_concurrency > 1`; see `worker_main._serve_threaded`), or as coroutines on an event loop (any `async def` method; up to
`max_concurrency` at once, 1000 by default, as in Ray). With `concurrency_groups`, each
group has threads (or a concurrency limit) of its own, so a busy group never holds up the
calls of another."""

import asyncio
import inspect
import time
from typing import Any, Dict, Optional, Tuple

# The group of methods that name none (Ray's name for it).
DEFAULT_GROUP = "_ray_system_default"

# How long an exiting actor lets the calls already running go on before it ends anyway.
EXIT_GRACE_S = 30.0


class ActorExit(SystemExit):
    """Raised by `exit_actor()`: the actor ends once the call that raised it is answered
    and the calls running beside it have ended. A SystemExit, so that a method's
    `except Exception` does not swallow it."""


class _Exiting(Exception):
    """Carries a SystemExit (an ActorExit, a sys.exit()) out of a call's task: a SystemExit
    raised out of a task would stop the event loop itself, before the call is answered."""


def _terminate():
    raise ActorExit("the actor exited: __ray_terminate__ was called")


def method_of(instance, name: str):
    """The callable behind a call: the actor's method, or one of the methods every actor has
    (`__ray_ready__`, `__ray_call__(fn, *args)` running `fn(actor, *args)`,
    `__ray_terminate__` ending the actor once the calls before it ran)."""
    if name == "__ray_ready__":
        return lambda: True
    if name == "__ray_call__":
        return lambda fn, *args, **kwargs: fn(instance, *args, **kwargs)
    if name == "__ray_terminate__":
        return _terminate
    return getattr(instance, name)


def declared(cls, name: str, option: str):
    """What `@oxray.method(option=...)` said on the class's method, else None."""
    return getattr(getattr(cls, name, None), f"__oxray_{option}__", None)


def group_of(method: str, call_group: Optional[str], method_group: Optional[str], groups: Dict[str, int]) -> str:
    """The concurrency group a call runs in: the call's own choice, else its method's, else
    the default group. A name the actor does not have is refused."""
    chosen = call_group or method_group
    if chosen is None:
        return DEFAULT_GROUP
    if chosen not in groups:
        raise ValueError(f"{method}: concurrency group {chosen!r} is not one of this actor's "
                         f"concurrency_groups {sorted(groups)}")
    return chosen


def retry_policy(call: Dict[str, Any], method_options: Dict[str, Any], actor_retries: int) -> Tuple[int, Any]:
    """(how often a call that raised runs again, which exceptions count) from the call's
    options, else its method's, else the actor's `max_task_retries`. Ray retries raised
    exceptions only where `retry_exceptions` asks for it."""
    def pick(name, default):
        for source in (call, method_options):
            if source.get(name) is not None:
                return source[name]
        return default

    retry_exceptions = pick("retry_exceptions", False)
    if not retry_exceptions:
        return 0, False
    return pick("max_task_retries", actor_retries), retry_exceptions


def should_retry(error: BaseException, retry_exceptions, retries_left: int) -> bool:
    """Whether a call that raised `error` runs again (-1 retries: without limit)."""
    if retries_left == 0 or not isinstance(error, Exception):
        return False
    if retry_exceptions is True:
        return True
    return isinstance(error, tuple(retry_exceptions))


class ActorRunner:
    def __init__(self, instance, max_concurrency, concurrency_groups=None, max_task_retries=0):
        self.instance = instance
        self.cls = type(instance)
        self.max_task_retries = max_task_retries or 0
        self._policies: Dict[str, Tuple[int, Any]] = {}
        # Looked up on the class, so no property of the instance runs.
        self.is_async = any(inspect.iscoroutinefunction(m) or inspect.isasyncgenfunction(m)
                            for _, m in inspect.getmembers(self.cls))
        # The ids of the calls running now, on an actor that runs several at once: once one
        # of them calls exit_actor(), the others still end and reply, and no new one starts.
        self.running = set()
        self.exiting = False
        self.groups = dict(concurrency_groups or {})
        self.grouped = bool(self.groups) or any(declared(self.cls, name, "concurrency_group")
                                                for name, _ in inspect.getmembers(self.cls))
        self.threads = 0
        self.loop = None
        if self.is_async:
            # Run by the worker's main thread, which starts each call as it arrives.
            self.loop = asyncio.new_event_loop()
            self.slots = {}
            self.limit = max_concurrency or 1000
        elif self.grouped or (max_concurrency and max_concurrency > 1):
            self.threads = max_concurrency or 1

    def group_sizes(self) -> Dict[str, int]:
        """How many calls of each group run at once: the default group's is max_concurrency."""
        return {DEFAULT_GROUP: self.limit if self.is_async else max(1, self.threads), **self.groups}

    def group(self, method: str, call_options: Dict[str, Any]) -> str:
        return group_of(method, (call_options or {}).get("concurrency_group"),
                        declared(self.cls, method, "concurrency_group"), self.groups)

    def call(self, method: str, args, kwargs, call_options: Optional[Dict[str, Any]]):
        """Runs a call here, again as its retry options allow when it raises."""
        target = method_of(self.instance, method)
        if not call_options:
            # The common call: its method's policy, worked out once.
            policy = self._policies.get(method)
            if policy is None:
                policy = self._policies[method] = self.retries(method, None)
            if not policy[0]:
                return target(*args, **kwargs)
        elif call_options.get("concurrency_group"):
            self.group(method, call_options)  # refuses a group the actor does not have
        retries, which = policy if not call_options else self.retries(method, call_options)
        while True:
            try:
                return target(*args, **kwargs)
            except BaseException as error:
                if not should_retry(error, which, retries):
                    raise
                retries -= 1

    def retries(self, method: str, call_options: Optional[Dict[str, Any]]):
        method_options = {name: declared(self.cls, method, name) for name in ("max_task_retries", "retry_exceptions")}
        return retry_policy(call_options or {}, method_options, self.max_task_retries)

    def wait_for_others(self, own: str, timeout: float = EXIT_GRACE_S) -> None:
        """Waits (at most `timeout`) until the calls running beside `own` have ended."""
        self.running.discard(own)
        deadline = time.monotonic() + timeout
        while self.running and time.monotonic() < deadline:
            time.sleep(0.01)

    async def wait_for_others_async(self, timeout: float = EXIT_GRACE_S) -> None:
        """`wait_for_others` on the actor's loop, whose other calls go on meanwhile."""
        deadline = time.monotonic() + timeout
        while self.running and time.monotonic() < deadline:
            await asyncio.sleep(0.01)

    def submit(self, method, args, kwargs, done, call_options=None, consume=None):
        """Starts a call of an async actor on its loop (from the loop's thread) without
        waiting; `done(result, error)` is called when it ends. `consume`: a coroutine
        function that takes what a streaming call returned (a generator, sync or async)
        and sends its values; the call holds its group's slot until it is through, and is
        not run again on an error, as values may have gone already."""
        target = method_of(self.instance, method)
        try:
            group = self.group(method, call_options)
        except ValueError as error:
            return done(None, error)
        retries, which = (0, False) if consume else self.retries(method, call_options)

        async def attempt():
            result = target(*args, **kwargs)
            if inspect.isawaitable(result):
                result = await result
            if consume is not None:
                await consume(result)
                return None
            return result

        async def call():
            slots = self.slots.get(group)
            if slots is None:
                slots = self.slots[group] = asyncio.Semaphore(self.group_sizes()[group])
            left = retries
            async with slots:
                while True:
                    try:
                        return await attempt()
                    except SystemExit as error:  # exit_actor() or sys.exit()
                        raise _Exiting() from error
                    except BaseException as error:
                        if not should_retry(error, which, left):
                            raise
                        left -= 1

        future = self.loop.create_task(call())

        def finished(f):
            error = f.exception()
            if type(error) is _Exiting:
                error = error.__cause__
            done(None if error else f.result(), error)

        future.add_done_callback(finished)
