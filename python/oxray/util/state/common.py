"""The records and options of Ray's state API (`ray.util.state.common`): one class per kind of
row the head's `/api/v0/...` lists serve, with Ray's columns. Rows are read leniently: a
column the head leaves out is None, and one Ray's schema lacks is dropped, as Ray's own
models drop it."""

import dataclasses
import warnings
from enum import Enum, unique
from typing import Any, Dict, List, Optional, Set, Tuple, Union

from oxray.job_submission._models import JobDetails

DEFAULT_RPC_TIMEOUT = 30
DEFAULT_LIMIT = 100

SupportedFilterType = Union[str, bool, int, float]
PredicateType = str  # "=" or "!="
PREDICATES = ("=", "!=")


@unique
class StateResource(Enum):
    ACTORS = "actors"
    JOBS = "jobs"
    PLACEMENT_GROUPS = "placement_groups"
    NODES = "nodes"
    WORKERS = "workers"
    TASKS = "tasks"
    OBJECTS = "objects"
    RUNTIME_ENVS = "runtime_envs"
    CLUSTER_EVENTS = "cluster_events"


@unique
class SummaryResource(Enum):
    ACTORS = "actors"
    TASKS = "tasks"
    OBJECTS = "objects"


def check_filters(filters) -> List[Tuple[str, str, Any]]:
    """Ray's checks, made before anything is sent: (key, predicate, value) triples with a
    predicate the server knows."""
    checked = []
    for one in filters or []:
        if not isinstance(one, (tuple, list)) or len(one) != 3:
            raise ValueError(f"The given filter has incorrect input type, {one}. "
                             "Provide (key, predicate, value) tuples.")
        key, predicate, value = one
        if predicate not in PREDICATES:
            raise ValueError(f"Unsupported filter predicate {predicate} is given. Available predicates: =, !=.")
        checked.append((key, predicate, value))
    return checked


def _server_timeout(timeout, multiplier: float) -> int:
    # The server gets less than the caller waits, so that a slow node shows as a warning in
    # the answer rather than as the caller's timeout.
    if not isinstance(timeout, (int, float)) or isinstance(timeout, bool) or timeout <= 0:
        raise ValueError(f"timeout must be a positive number of seconds, got {timeout!r}")
    return max(1, int(timeout * multiplier))


@dataclasses.dataclass
class ListApiOptions:
    limit: int = DEFAULT_LIMIT
    timeout: int = DEFAULT_RPC_TIMEOUT
    detail: bool = False
    filters: Optional[List[Tuple[str, PredicateType, SupportedFilterType]]] = dataclasses.field(default_factory=list)
    exclude_driver: bool = True
    server_timeout_multiplier: float = 0.8

    def __post_init__(self):
        self.timeout = _server_timeout(self.timeout, self.server_timeout_multiplier)
        # The limit is the server's to check, as in Ray: its refusal names the bounds.
        self.filters = check_filters(self.filters)

    def has_conflicting_filters(self) -> bool:
        """Two `=` filters on one key with different values: nothing can match."""
        equal: Dict[str, Any] = {}
        for key, predicate, value in self.filters:
            if predicate != "=":
                continue
            if key in equal and equal[key] != value:
                warnings.warn(f"There are multiple '=' filters with the same key '{key}' but different values "
                              f"'{equal[key]}' & '{value}'. Empty result set will be returned", UserWarning)
                return True
            equal.setdefault(key, value)
        return False


@dataclasses.dataclass
class GetApiOptions:
    timeout: int = DEFAULT_RPC_TIMEOUT
    server_timeout_multiplier: float = 0.8

    def __post_init__(self):
        self.timeout = _server_timeout(self.timeout, self.server_timeout_multiplier)


@dataclasses.dataclass
class SummaryApiOptions:
    timeout: int = DEFAULT_RPC_TIMEOUT
    filters: Optional[List[Tuple[str, PredicateType, SupportedFilterType]]] = dataclasses.field(default_factory=list)
    summary_by: Optional[str] = None

    def __post_init__(self):
        _server_timeout(self.timeout, 1)
        if check_filters(self.filters):
            # The head's summaries are over every row; a filtered one would be silently wrong.
            raise ValueError("summaries with filters are not supported by oxray; list with filters instead")
        if self.summary_by is not None:
            raise ValueError("summary_by is not supported by oxray: tasks are summarized by function, actors by class")


def state_column(*, filterable: bool, detail: bool = False):
    return dataclasses.field(default=None, metadata={"filterable": filterable, "detail": detail})


class StateSchema:
    """What every record has: attribute and dict-style access, and its columns."""

    @classmethod
    def from_row(cls, row: Dict[str, Any]) -> "StateSchema":
        known = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in row.items() if k in known})

    @classmethod
    def list_columns(cls, detail: bool = True) -> List[str]:
        return [f.name for f in dataclasses.fields(cls) if detail or not f.metadata.get("detail")]

    @classmethod
    def columns(cls) -> Set[str]:
        return set(cls.list_columns(detail=True))

    @classmethod
    def filterable_columns(cls) -> Set[str]:
        return {f.name for f in dataclasses.fields(cls) if f.metadata.get("filterable")}

    @classmethod
    def base_columns(cls) -> Set[str]:
        return set(cls.list_columns(detail=False))

    @classmethod
    def detail_columns(cls) -> Set[str]:
        return set(cls.list_columns(detail=True))

    def asdict(self) -> Dict[str, Any]:
        return dataclasses.asdict(self)

    def __getitem__(self, key):
        return getattr(self, key)

    def __setitem__(self, key, value):
        setattr(self, key, value)

    def get(self, key, default=None):
        return getattr(self, key, default)


@dataclasses.dataclass
class ActorState(StateSchema):
    actor_id: str = state_column(filterable=True)
    class_name: str = state_column(filterable=True)
    state: str = state_column(filterable=True)
    job_id: str = state_column(filterable=True)
    name: Optional[str] = state_column(filterable=True)
    node_id: Optional[str] = state_column(filterable=True)
    pid: Optional[int] = state_column(filterable=True)
    ray_namespace: Optional[str] = state_column(filterable=True)
    serialized_runtime_env: Optional[str] = state_column(filterable=False, detail=True)
    required_resources: Optional[dict] = state_column(filterable=False, detail=True)
    death_cause: Optional[dict] = state_column(filterable=False, detail=True)
    is_detached: Optional[bool] = state_column(filterable=False, detail=True)
    placement_group_id: Optional[str] = state_column(filterable=True, detail=True)
    repr_name: Optional[str] = state_column(filterable=True, detail=True)
    num_restarts: Optional[int] = state_column(filterable=False, detail=True)
    num_restarts_due_to_lineage_reconstruction: Optional[int] = state_column(filterable=False, detail=True)
    num_restarts_due_to_node_preemption: Optional[int] = state_column(filterable=False, detail=True)
    call_site: Optional[str] = state_column(filterable=False, detail=True)
    label_selector: Optional[dict] = state_column(filterable=False, detail=True)
    fallback_strategy: Optional[dict] = state_column(filterable=False, detail=True)


@dataclasses.dataclass
class PlacementGroupState(StateSchema):
    placement_group_id: str = state_column(filterable=True)
    name: str = state_column(filterable=True)
    creator_job_id: str = state_column(filterable=True)
    state: str = state_column(filterable=True)
    bundles: Optional[List[dict]] = state_column(filterable=False, detail=True)
    is_detached: Optional[bool] = state_column(filterable=True, detail=True)
    stats: Optional[dict] = state_column(filterable=False, detail=True)
    topology_strategy: Optional[dict] = state_column(filterable=False, detail=True)
    topology_assignments: Optional[dict] = state_column(filterable=False, detail=True)


@dataclasses.dataclass
class NodeState(StateSchema):
    node_id: str = state_column(filterable=True)
    node_ip: str = state_column(filterable=True)
    is_head_node: bool = state_column(filterable=True)
    state: str = state_column(filterable=True)
    state_message: Optional[str] = state_column(filterable=False)
    node_name: str = state_column(filterable=True)
    resources_total: dict = state_column(filterable=False)
    labels: dict = state_column(filterable=False)
    start_time_ms: Optional[int] = state_column(filterable=False, detail=True)
    end_time_ms: Optional[int] = state_column(filterable=False, detail=True)


class JobState(StateSchema, JobDetails):
    """A job, driver or submitted: the record `JobSubmissionClient` gives, as Ray's is."""

    _PLAIN = ("job_id", "submission_id", "entrypoint", "type", "status", "message", "error_type", "driver_info")

    @classmethod
    def from_row(cls, row: Dict[str, Any]) -> "JobState":
        return cls.from_json(row)

    @classmethod
    def list_columns(cls, detail: bool = True) -> List[str]:
        return [f.name for f in dataclasses.fields(cls)] if detail else list(cls._PLAIN)

    @classmethod
    def filterable_columns(cls) -> Set[str]:
        return {"job_id", "type", "status", "submission_id"}


@dataclasses.dataclass
class WorkerState(StateSchema):
    worker_id: str = state_column(filterable=True)
    is_alive: bool = state_column(filterable=True)
    worker_type: str = state_column(filterable=True)
    exit_type: Optional[str] = state_column(filterable=True)
    node_id: str = state_column(filterable=True)
    ip: str = state_column(filterable=True)
    pid: int = state_column(filterable=True)
    exit_detail: Optional[str] = state_column(filterable=False, detail=True)
    worker_launch_time_ms: Optional[int] = state_column(filterable=False, detail=True)
    worker_launched_time_ms: Optional[int] = state_column(filterable=False, detail=True)
    start_time_ms: Optional[int] = state_column(filterable=False, detail=True)
    end_time_ms: Optional[int] = state_column(filterable=False, detail=True)
    debugger_port: Optional[int] = state_column(filterable=True, detail=True)
    num_paused_threads: Optional[int] = state_column(filterable=True, detail=True)


@dataclasses.dataclass
class TaskState(StateSchema):
    task_id: str = state_column(filterable=True)
    attempt_number: int = state_column(filterable=True)
    name: str = state_column(filterable=True)
    state: str = state_column(filterable=True)
    job_id: str = state_column(filterable=True)
    actor_id: Optional[str] = state_column(filterable=True)
    type: str = state_column(filterable=True)
    func_or_class_name: str = state_column(filterable=True)
    parent_task_id: str = state_column(filterable=True)
    node_id: Optional[str] = state_column(filterable=True)
    worker_id: Optional[str] = state_column(filterable=True)
    worker_pid: Optional[int] = state_column(filterable=True)
    error_type: Optional[str] = state_column(filterable=True)
    language: Optional[str] = state_column(filterable=True, detail=True)
    required_resources: Optional[dict] = state_column(filterable=False, detail=True)
    runtime_env_info: Optional[dict] = state_column(filterable=False, detail=True)
    placement_group_id: Optional[str] = state_column(filterable=True, detail=True)
    events: Optional[List[dict]] = state_column(filterable=False, detail=True)
    profiling_data: Optional[dict] = state_column(filterable=False, detail=True)
    creation_time_ms: Optional[int] = state_column(filterable=False, detail=True)
    start_time_ms: Optional[int] = state_column(filterable=False, detail=True)
    end_time_ms: Optional[int] = state_column(filterable=False, detail=True)
    task_log_info: Optional[dict] = state_column(filterable=False, detail=True)
    error_message: Optional[str] = state_column(filterable=False, detail=True)
    is_debugger_paused: Optional[bool] = state_column(filterable=True, detail=True)
    call_site: Optional[str] = state_column(filterable=False, detail=True)
    label_selector: Optional[dict] = state_column(filterable=False, detail=True)
    fallback_strategy: Optional[dict] = state_column(filterable=False, detail=True)


@dataclasses.dataclass
class ObjectState(StateSchema):
    object_id: str = state_column(filterable=True)
    object_size: int = state_column(filterable=True)
    task_status: str = state_column(filterable=True)
    attempt_number: int = state_column(filterable=True)
    reference_type: str = state_column(filterable=True)
    call_site: str = state_column(filterable=True)
    type: str = state_column(filterable=True)
    pid: int = state_column(filterable=True)
    ip: str = state_column(filterable=True)


_SCHEMAS = {
    StateResource.ACTORS: ActorState,
    StateResource.JOBS: JobState,
    StateResource.PLACEMENT_GROUPS: PlacementGroupState,
    StateResource.NODES: NodeState,
    StateResource.WORKERS: WorkerState,
    StateResource.TASKS: TaskState,
    StateResource.OBJECTS: ObjectState,
}


def resource_to_schema(resource: StateResource) -> type:
    if resource not in _SCHEMAS:
        raise ValueError(f"oxray does not serve {resource.value} through the state API")
    return _SCHEMAS[resource]


def dict_to_state(d: Dict[str, Any], state_resource: StateResource) -> StateSchema:
    from oxray.util.state.exception import RayStateApiException

    try:
        return resource_to_schema(state_resource).from_row(d)
    except (TypeError, ValueError, KeyError) as e:
        raise RayStateApiException(f"Failed to convert {d} to StateSchema: {e}") from e
