"""`ActorPool`, as Ray's `ray.util.ActorPool`: spreads work over a fixed set of actors,
giving each one call at a time, so a slow actor never has a queue of calls behind it while
another one sits idle."""

import time
from typing import Any, Callable, Dict, List, Optional, Tuple

from oxray._private import worker
from oxray.exceptions import ActorDiedError

_TIMED_OUT = "Timed out waiting for result"


def _refs(future) -> List[Any]:
    """A call's result is one ObjectRef, or a list of them (a method with num_returns > 1)."""
    return list(future) if isinstance(future, (list, tuple)) else [future]


class ActorPool:
    """A pool over `actors`. `fn(actor, value)` starts one call and returns its ObjectRef;
    the actor counts as busy until the pool has handed that call's result back."""

    def __init__(self, actors: list):
        self._idle_actors = list(actors)
        # Calls started and not yet handed back: their index, in the order they started,
        # to (ObjectRef or list of them, actor).
        self._running: Dict[int, Tuple[Any, Any]] = {}
        self._next_task_index = 0
        self._next_return_index = 0
        # Submitted while every actor was busy; each starts as an actor comes back.
        self._pending_submits: List[Tuple[Callable, Any]] = []

    def map(self, fn: Callable, values):
        """Submits every value now; the iterator yields their results in submission order.
        Results of earlier submissions still outstanding are dropped first (those already
        done are read, so their errors still raise)."""
        while self.has_next():
            try:
                self.get_next(timeout=0, ignore_if_timedout=True)
            except TimeoutError:
                pass
        for value in values:
            self.submit(fn, value)

        def results():
            while self.has_next():
                yield self.get_next()

        return results()

    def map_unordered(self, fn: Callable, values):
        """As `map`, with results yielded as they finish. Earlier submissions still
        outstanding are waited for and their results dropped first."""
        while self.has_next():
            self.get_next_unordered()
        for value in values:
            self.submit(fn, value)

        def results():
            while self.has_next():
                yield self.get_next_unordered()

        return results()

    def submit(self, fn: Callable, value) -> None:
        """Starts `fn(actor, value)` on an idle actor, or once one is free."""
        if not self._idle_actors:
            self._pending_submits.append((fn, value))
            return
        actor = self._idle_actors.pop()
        future = fn(actor, value)
        self._running[self._next_task_index] = (future, actor)
        self._next_task_index += 1

    def has_next(self) -> bool:
        """Whether some submitted call's result has not been handed back yet."""
        return bool(self._running)

    def get_next(self, timeout: Optional[float] = None, ignore_if_timedout: bool = False):
        """The result of the oldest call not handed back yet, in submission order.

        Raises StopIteration when nothing is outstanding, TimeoutError when the result is
        not ready within `timeout` (with `ignore_if_timedout`, that call is dropped first and
        its actor taken back), and ValueError once `get_next_unordered` has handed back the
        most recent call (submission order is then lost).
        """
        if not self.has_next():
            raise StopIteration("No more results to get")
        if self._next_return_index >= self._next_task_index:
            raise ValueError("It is not allowed to call get_next() after get_next_unordered().")
        index = self._next_return_index
        future, actor = self._running[index]
        if timeout is not None:
            refs = _refs(future)
            ready, _ = worker.wait(refs, num_returns=len(refs), timeout=timeout)
            if len(ready) < len(refs):
                if not ignore_if_timedout:
                    raise TimeoutError(_TIMED_OUT)
                self._drop(index)
                raise TimeoutError(f"{_TIMED_OUT}. The task {future} has been ignored.")
        del self._running[index]
        self._next_return_index += 1
        return self._result(future, actor)

    def get_next_unordered(self, timeout: Optional[float] = None, ignore_if_timedout: bool = False):
        """The result of whichever outstanding call finishes first (of those already done,
        the oldest). Raises as `get_next`; on a timeout with `ignore_if_timedout`, the
        oldest outstanding call is the one dropped."""
        if not self.has_next():
            raise StopIteration("No more results to get")
        index = self._first_done(timeout)
        if index is None:
            if not ignore_if_timedout:
                raise TimeoutError(_TIMED_OUT)
            index = min(self._running)
            future = self._running[index][0]
            self._drop(index)
            raise TimeoutError(f"{_TIMED_OUT}. The task {future} has been ignored.")
        future, actor = self._running.pop(index)
        self._next_return_index = max(self._next_return_index, index + 1)
        return self._result(future, actor)

    def has_free(self) -> bool:
        """Whether an actor is idle and no submission waits for one."""
        return bool(self._idle_actors) and not self._pending_submits

    def pop_idle(self):
        """Takes an idle actor out of the pool; None when none is free."""
        return self._idle_actors.pop() if self.has_free() else None

    def push(self, actor) -> None:
        """Adds an actor to the pool (it starts the oldest waiting submission, if any)."""
        busy = [a for _, a in self._running.values()]
        if actor in self._idle_actors or actor in busy:
            raise ValueError("Actor already belongs to current ActorPool")
        self._return_actor(actor)

    def _first_done(self, timeout: Optional[float]) -> Optional[int]:
        """The index of an outstanding call all of whose results are ready, waiting up to
        `timeout`; None if none is by then."""
        owners = {}
        for index in sorted(self._running):
            for ref in _refs(self._running[index][0]):
                owners.setdefault(ref, index)
        waiting = list(owners)
        deadline = None if timeout is None else time.monotonic() + timeout
        while waiting:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            ready, waiting = worker.wait(waiting, num_returns=1, timeout=left)
            if not ready:
                return None
            index = owners[ready[0]]
            if all(owners[ref] != index for ref in waiting):
                return index
        return None

    def _drop(self, index: int) -> None:
        """Gives up on a call: its result is never read and its actor takes new work at once
        (behind that call, in the actor's own order)."""
        _, actor = self._running.pop(index)
        self._next_return_index = max(self._next_return_index, index + 1)
        self._return_actor(actor)

    def _result(self, future, actor):
        alive = True
        try:
            return worker.get(future)
        except ActorDiedError:
            alive = False
            raise
        finally:
            self._return_actor(actor, alive)

    def _return_actor(self, actor, alive: bool = True) -> None:
        # A dead actor leaves the pool: handed out again, it would fail every call.
        if alive:
            self._idle_actors.append(actor)
        if self._pending_submits and self._idle_actors:
            self.submit(*self._pending_submits.pop(0))

