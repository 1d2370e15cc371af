import threading
import types


class ObjectRef:
    """A reference to an object (a task's result or a `put` value). Hashable, passable to
    other tasks (also inside other values), awaitable in asyncio. The process that made the
    object owns it; other processes borrow it, and it is freed once no reference is left
    anywhere."""

    __slots__ = ("_id", "_client", "_owner", "__weakref__")

    # `ObjectRef[int]` in annotations, as Ray's ObjectRef allows.
    __class_getitem__ = classmethod(types.GenericAlias)

    def __init__(self, object_id: str, client=None):
        self._id = object_id
        self._client = client
        self._owner = None
        if client is not None:
            client.add_ref(object_id)

    def hex(self) -> str:
        return self._id

    def __hash__(self):
        return hash(self._id)

    def __eq__(self, other):
        return isinstance(other, ObjectRef) and other._id == self._id

    def __repr__(self):
        return f"ObjectRef({self._id})"

    def __del__(self):
        client = self._client
        if client is not None:
            try:
                client.release(self._id)
            except Exception:  # interpreter shutdown: nothing left to free
                pass

    def __reduce__(self):
        from oxray._private import serialization, worker

        serialization.note_pickled(self)
        owner = self._owner or (self._client or worker.client()).owner_address()
        return (_restore, (self._id, owner))

    def job_id(self) -> str:
        """The job this process works for (Ray's JobID in hex): that of the objects it makes."""
        from oxray import _native

        return _native.current_job_id() or ""

    def task_id(self) -> str:
        """The task that makes the object: a task's first result shares its id."""
        return self._id

    def future(self):
        """A `concurrent.futures.Future` that gets the value (or the error) once ready."""
        from oxray._private import futures

        return futures.of(self)

    def as_future(self):
        """An asyncio future of the running loop, for the value."""
        import asyncio  # only awaiting needs it, and importing it costs a new process 20 ms

        return asyncio.wrap_future(self.future())

    def __await__(self):
        return self.as_future().__await__()


def _adopt(object_id: str, client) -> ObjectRef:
    """An ObjectRef that takes over a reference the native side already holds for it."""
    ref = ObjectRef.__new__(ObjectRef)
    ref._id, ref._client, ref._owner = object_id, client, None
    return ref


ObjectRef._adopt = staticmethod(_adopt)


def _restore(object_id: str, owner: str) -> ObjectRef:
    """An ObjectRef read from bytes: the owner's own, or one borrowed from it."""
    if _client is None:
        _bind()
    ref = ObjectRef.__new__(ObjectRef)
    ref._id, ref._owner = object_id, owner
    batch = getattr(_reading, "batch", None)
    if batch is not None:
        # Inside `serialization.loads`: the references are taken for all refs at once
        # when the value is read (values holding thousands of refs are read often).
        if batch[0] is None:
            batch[0] = _client()
        ref._client = batch[0]
        batch[1].append(object_id)
        batch[2].append(owner)
        return ref
    ref._client = client = _client()
    if client.hold(object_id, owner) == _NEW_BORROW:
        _note_borrowed()
    return ref


def begin_reading():
    """Collects the refs read from here on (until `end_reading`); returns the batch of an
    outer read, if any."""
    outer = getattr(_reading, "batch", None)
    _reading.batch = [None, [], []]
    return outer


def end_reading(outer) -> None:
    """Takes the references of the refs read since `begin_reading`; also when the read
    failed, since those refs give theirs back as they go."""
    client, ids, owners = _reading.batch
    _reading.batch = outer
    if ids and client.hold_many(ids, owners):
        _note_borrowed()


_NEW_BORROW = 2
_client = None
_note_borrowed = None
_reading = threading.local()


def _bind():
    """Binds the worker's client and the serializer's hook (their modules import this one)."""
    global _client, _note_borrowed
    from oxray._private import serialization, worker

    _client, _note_borrowed = worker.client, serialization.note_borrowed


# Ray's older name for an object's id.
ObjectID = ObjectRef
