"""How values cross processes: cloudpickle, with the ObjectRefs among a task's arguments
replaced by placeholders the worker fills with their values."""

import traceback
from typing import Any, Dict, List, Tuple

import cloudpickle

from oxray.exceptions import RayTaskError
from oxray.object_ref import ObjectRef


class _Dependency:
    __slots__ = ("object_id",)

    def __init__(self, object_id: str):
        self.object_id = object_id


def dumps(value: Any) -> bytes:
    return cloudpickle.dumps(value)


def loads(data: bytes) -> Any:
    return cloudpickle.loads(data)


def dumps_args(args: tuple, kwargs: Dict[str, Any]) -> Tuple[bytes, List[str]]:
    """Top-level ObjectRefs become placeholders (resolved before the task runs), as in Ray."""
    dependencies = []

    def swap(value):
        if isinstance(value, ObjectRef):
            dependencies.append(value.hex())
            return _Dependency(value.hex())
        return value

    payload = (tuple(swap(a) for a in args), {k: swap(v) for k, v in kwargs.items()})
    return cloudpickle.dumps(payload), dependencies


def loads_args(data: bytes, values: Dict[str, Any]) -> Tuple[tuple, Dict[str, Any]]:
    args, kwargs = cloudpickle.loads(data)

    def fill(value):
        return values[value.object_id] if isinstance(value, _Dependency) else value

    return tuple(fill(a) for a in args), {k: fill(v) for k, v in kwargs.items()}


def dumps_error(function_name: str, error: BaseException) -> bytes:
    tb = "".join(traceback.format_exception(type(error), error, error.__traceback__))
    try:
        return cloudpickle.dumps(RayTaskError(function_name, tb, error))
    except Exception:  # the exception itself does not pickle: keep its text
        return cloudpickle.dumps(RayTaskError(function_name, tb, RuntimeError(f"{type(error).__name__}: {error}")))
