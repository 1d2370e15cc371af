"""`Queue`, as Ray's `ray.util.queue`: a FIFO queue that any task, actor or driver holding
it can use. The items live in an async actor around an `asyncio.Queue`, so a `get` waiting
on an empty queue (or a `put` on a full one) holds no thread and other callers go on."""

import asyncio
import queue
from collections.abc import Iterable
from typing import Any, Dict, List, Optional

from oxray._private import worker
from oxray.exceptions import RayTaskError


class Empty(queue.Empty):
    """Nothing to get (at once, or within the timeout)."""


class Full(queue.Full):
    """No room to put (at once, or within the timeout)."""


class Queue:
    """A queue of at most `maxsize` items (0: no limit). `actor_options` go to the
    `.options(...)` of the actor that holds the items (resources, a name, ...). A Queue
    passed to a task or actor is the same queue there."""

    def __init__(self, maxsize: int = 0, actor_options: Optional[Dict] = None) -> None:
        self.maxsize = maxsize
        self.actor = worker.remote(_QueueActor).options(**(actor_options or {})).remote(maxsize)

    def __len__(self) -> int:
        return self.size()

    def size(self) -> int:
        return _get(self.actor.qsize.remote())

    def qsize(self) -> int:
        return self.size()

    def empty(self) -> bool:
        return _get(self.actor.empty.remote())

    def full(self) -> bool:
        return _get(self.actor.full.remote())

    def put(self, item: Any, block: bool = True, timeout: Optional[float] = None) -> None:
        """Adds an item; raises Full if there is no room at once (`block=False`) or within
        `timeout` seconds (None: waits as long as it takes)."""
        _get(self._put(item, block, timeout))

    async def put_async(self, item: Any, block: bool = True, timeout: Optional[float] = None) -> None:
        """`put` for a coroutine: the event loop goes on while it waits."""
        await _get_async(self._put(item, block, timeout))

    def get(self, block: bool = True, timeout: Optional[float] = None) -> Any:
        """Takes the oldest item; raises Empty if there is none at once (`block=False`) or
        within `timeout` seconds (None: waits as long as it takes)."""
        return _get(self._get(block, timeout))

    async def get_async(self, block: bool = True, timeout: Optional[float] = None) -> Any:
        """`get` for a coroutine: the event loop goes on while it waits."""
        return await _get_async(self._get(block, timeout))

    def put_nowait(self, item: Any) -> None:
        return self.put(item, block=False)

    def put_nowait_batch(self, items: Iterable) -> None:
        """Adds all the items in order, or none of them (Full) if they do not all fit."""
        if not isinstance(items, Iterable):
            raise TypeError("Argument 'items' must be an Iterable")
        _get(self.actor.put_nowait_batch.remote(list(items)))

    def get_nowait(self) -> Any:
        return self.get(block=False)

    def get_nowait_batch(self, num_items: int) -> List[Any]:
        """The `num_items` oldest items, in order, or none of them (Empty) if there are
        fewer."""
        if not isinstance(num_items, int):
            raise TypeError("Argument 'num_items' must be an int")
        if num_items < 0:
            raise ValueError("'num_items' must be nonnegative")
        return _get(self.actor.get_nowait_batch.remote(num_items))

    def shutdown(self, force: bool = False, grace_period_s: int = 5) -> None:
        """Ends the queue's actor, releasing what it holds. Unless `force`, calls already
        under way get up to `grace_period_s` seconds to finish first."""
        if self.actor is not None:
            if not force:
                worker.wait([self.actor.drain.remote()], timeout=grace_period_s)
            worker.kill(self.actor, no_restart=True)
        self.actor = None

    def _put(self, item, block, timeout):
        if not block:
            return self.actor.put_nowait.remote(item)
        _check_timeout(timeout)
        return self.actor.put.remote(item, timeout)

    def _get(self, block, timeout):
        if not block:
            return self.actor.get_nowait.remote()
        _check_timeout(timeout)
        return self.actor.get.remote(timeout)


def _check_timeout(timeout):
    if timeout is not None and timeout < 0:
        raise ValueError("'timeout' must be a non-negative number")


def _get(ref):
    try:
        return worker.get(ref)
    except RayTaskError as error:
        _raise_queue_error(error)
        raise


async def _get_async(ref):
    try:
        return await ref
    except RayTaskError as error:
        _raise_queue_error(error)
        raise


def _raise_queue_error(error: RayTaskError):
    """The actor's Empty or Full, as the caller's own: `except Empty` reads plainly and the
    message does not carry the actor's traceback."""
    if isinstance(error.cause, (Empty, Full)):
        raise error.cause from None


class _QueueActor:
    """Holds the items. Every call runs on its event loop, so no lock is needed."""

    def __init__(self, maxsize):
        self.maxsize = maxsize
        self._items = None
        # Calls waiting for an item or for room: what a graceful shutdown waits out.
        self.waiting = 0
        self.idle = None

    @property
    def queue(self) -> asyncio.Queue:
        # Made on the actor's event loop: the constructor runs before that loop exists, and
        # before Python 3.10 an asyncio.Queue binds to the loop current when it is made.
        if self._items is None:
            self._items = asyncio.Queue(self.maxsize)
        return self._items

    def qsize(self):
        return self.queue.qsize()

    def empty(self):
        return self.queue.empty()

    def full(self):
        return self.queue.full()

    async def put(self, item, timeout=None):
        if timeout is not None and timeout <= 0:
            return self.put_nowait(item)
        try:
            await self._waiting(self.queue.put(item), timeout)
        except asyncio.TimeoutError:
            raise Full from None

    async def get(self, timeout=None):
        # A zero timeout takes an item that is already there, as `queue.Queue` does.
        if timeout is not None and timeout <= 0:
            return self.get_nowait()
        try:
            return await self._waiting(self.queue.get(), timeout)
        except asyncio.TimeoutError:
            raise Empty from None

    def put_nowait(self, item):
        try:
            self.queue.put_nowait(item)
        except asyncio.QueueFull:
            raise Full from None

    def put_nowait_batch(self, items):
        if self.maxsize > 0 and len(items) + self.queue.qsize() > self.maxsize:
            raise Full(f"Cannot add {len(items)} items to queue of size {self.queue.qsize()} "
                       f"and maxsize {self.maxsize}.")
        for item in items:
            self.queue.put_nowait(item)

    def get_nowait(self):
        try:
            return self.queue.get_nowait()
        except asyncio.QueueEmpty:
            raise Empty from None

    def get_nowait_batch(self, num_items):
        if num_items > self.queue.qsize():
            raise Empty(f"Cannot get {num_items} items from queue of size {self.queue.qsize()}.")
        return [self.queue.get_nowait() for _ in range(num_items)]

    async def drain(self):
        """Returns once no call waits for an item or for room."""
        if self.idle is None:
            self.idle = asyncio.Event()
        if self.waiting:
            self.idle.clear()
            await self.idle.wait()

    async def _waiting(self, operation, timeout):
        self.waiting += 1
        try:
            return await asyncio.wait_for(operation, timeout)
        finally:
            self.waiting -= 1
            if not self.waiting and self.idle is not None:
                self.idle.set()
