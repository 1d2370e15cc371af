"""Who a replica is (`serve.get_replica_context()`) and what request is running (per task:
contextvars, which asyncio tasks and the replica's threads each carry)."""

import contextvars
import dataclasses
from typing import Any, Optional

from oxray.serve.exceptions import RayServeException


@dataclasses.dataclass
class ReplicaContext:
    app_name: str
    deployment: str
    replica_id: str
    servable_object: Any = None
    rank: int = 0
    world_size: int = 1

    @property
    def replica_tag(self) -> str:
        return self.replica_id


@dataclasses.dataclass
class RequestContext:
    request_id: str = ""
    multiplexed_model_id: str = ""
    app_name: str = ""
    route: str = ""


_replica: Optional[ReplicaContext] = None
_request: contextvars.ContextVar = contextvars.ContextVar("oxray_serve_request", default=RequestContext())


def set_replica(context: Optional[ReplicaContext]) -> None:
    global _replica
    _replica = context


def current_replica() -> Optional[ReplicaContext]:
    return _replica


def get_replica_context() -> ReplicaContext:
    if _replica is None:
        raise RayServeException("`serve.get_replica_context()` may only be called from within a Ray Serve deployment.")
    return _replica


def current_request() -> RequestContext:
    return _request.get()


def set_request(context: RequestContext):
    return _request.set(context)


def reset_request(token) -> None:
    _request.reset(token)
