import asyncio


class ObjectRef:
    """A reference to an object (a task's result or a `put` value). Hashable, passable to
    other tasks, awaitable in asyncio."""

    __slots__ = ("_id", "_client", "__weakref__")

    def __init__(self, object_id: str, client=None):
        self._id = object_id
        self._client = client
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
        # A copy in another process refers to the same object but holds no reference here.
        return (ObjectRef, (self._id,))

    def future(self):
        from oxray._private import worker

        loop = asyncio.get_event_loop()
        return loop.run_in_executor(None, worker.get, self)

    def __await__(self):
        return self.future().__await__()
