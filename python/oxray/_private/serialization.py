"""How values cross processes: cloudpickle, with the ObjectRefs among a task's arguments
replaced by placeholders the worker fills with their values.

ObjectRefs nested deeper travel as references: pickling one records it (the sender keeps
the object alive until the receiver has told the owner it holds it), and unpickling one in
another process borrows it from its owner (`announce` below)."""

import threading
import traceback
from contextlib import contextmanager
from typing import Any, Dict, List, Tuple

import cloudpickle

from oxray.exceptions import RayTaskError
from oxray.object_ref import ObjectRef

_local = threading.local()


class _Dependency:
    __slots__ = ("object_id",)

    def __init__(self, object_id: str):
        self.object_id = object_id


@contextmanager
def _collecting():
    """Records the ObjectRefs pickled inside the block."""
    outer = getattr(_local, "refs", None)
    _local.refs = refs = []
    try:
        yield refs
    finally:
        _local.refs = outer


def note_pickled(ref: ObjectRef) -> None:
    refs = getattr(_local, "refs", None)
    if refs is not None:
        refs.append(ref)


def note_borrowed() -> None:
    _local.borrowed = True


def dumps(value: Any) -> bytes:
    return cloudpickle.dumps(value)


def dumps_with_refs(value: Any) -> Tuple[bytes, List[ObjectRef]]:
    """The bytes, and the ObjectRefs inside the value."""
    with _collecting() as refs:
        data = cloudpickle.dumps(value)
    return data, refs


def loads(data: bytes) -> Any:
    _local.borrowed = False
    value = cloudpickle.loads(data)
    _announce()
    return value


def _announce() -> None:
    """Owners of objects first borrowed by the last read learn of it before it is used."""
    if getattr(_local, "borrowed", False):
        _local.borrowed = False
        from oxray._private import worker

        worker.client().announce_borrows()


def dumps_args(args: tuple, kwargs: Dict[str, Any]) -> Tuple[bytes, List[str], List[str]]:
    """Top-level ObjectRefs become placeholders (resolved before the task runs), as in Ray.
    Returns the payload, their ids, and the ids of the ObjectRefs nested deeper."""
    dependencies = []

    def swap(value):
        if isinstance(value, ObjectRef):
            dependencies.append(value.hex())
            return _Dependency(value.hex())
        return value

    payload = (tuple(swap(a) for a in args), {k: swap(v) for k, v in kwargs.items()})
    data, nested = dumps_with_refs(payload)
    return data, dependencies, [r.hex() for r in nested]


def loads_args(data: bytes, values: Dict[str, Any]) -> Tuple[tuple, Dict[str, Any]]:
    args, kwargs = loads(data)

    def fill(value):
        return values[value.object_id] if isinstance(value, _Dependency) else value

    return tuple(fill(a) for a in args), {k: fill(v) for k, v in kwargs.items()}


def dumps_error(function_name: str, error: BaseException) -> bytes:
    tb = "".join(traceback.format_exception(type(error), error, error.__traceback__))
    try:
        return cloudpickle.dumps(RayTaskError(function_name, tb, error))
    except Exception:  # the exception itself does not pickle: keep its text
        return cloudpickle.dumps(RayTaskError(function_name, tb, RuntimeError(f"{type(error).__name__}: {error}")))
