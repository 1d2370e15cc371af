"""Ray's state API (`ray.util.state`): lists, lookups and summaries of the cluster's actors,
tasks, nodes, jobs, placement groups, workers and objects, read from the head's
`/api/v0/...` routes (the ones `oxray list`, `ray list` and Ray's dashboard read), with
Ray's arguments and records."""

import json
import os
import socket
import urllib.error
import urllib.parse
import urllib.request
import warnings
from typing import Any, Dict, List, Optional, Tuple, Union

from oxray.util.state.common import (
    DEFAULT_LIMIT,
    DEFAULT_RPC_TIMEOUT,
    ActorState,
    GetApiOptions,
    JobState,
    ListApiOptions,
    NodeState,
    ObjectState,
    PlacementGroupState,
    StateResource,
    SummaryApiOptions,
    SummaryResource,
    TaskState,
    WorkerState,
    dict_to_state,
)
from oxray.util.state.exception import RayStateApiException, ServerUnavailable

Filters = Optional[List[Tuple[str, str, Union[str, bool, int, float]]]]

# The column `get_*` looks an id up by, as Ray's client does.
_ID_KEYS = {
    StateResource.NODES: "node_id",
    StateResource.ACTORS: "actor_id",
    StateResource.PLACEMENT_GROUPS: "placement_group_id",
    StateResource.WORKERS: "worker_id",
    StateResource.TASKS: "task_id",
    StateResource.OBJECTS: "object_id",
    StateResource.JOBS: "submission_id",
}


def _connected_target() -> Tuple[str, Optional[str]]:
    from oxray._private import worker

    client = worker.client()
    return client.dashboard_url.rstrip("/"), client.token or None


def _local_cluster() -> Dict[str, Any]:
    from oxray.job_submission._client import _oxray_home

    try:
        return json.loads((_oxray_home() / "current_cluster.json").read_text())
    except (OSError, ValueError):
        return {}


def _url_of(address: str) -> Tuple[str, Optional[str]]:
    """A dashboard URL as given; a bare `host:port` is the cluster's bootstrap address when it
    is the one this process joined or this machine started, else taken as the dashboard's
    (as JobSubmissionClient takes it)."""
    from oxray._private import worker
    from oxray.job_submission._client import _resolve_token

    if address.startswith("ray://"):
        raise ValueError(f"{address}: Ray Client addresses are not supported by oxray; pass the cluster's "
                         "dashboard address (http://HEAD:8265)")
    if "://" not in address:
        if worker.is_initialized() and address == worker.client().address:
            return _connected_target()
        local = _local_cluster()
        address = local["dashboard_url"] if local.get("address") == address and local.get("dashboard_url") \
            else "http://" + address
    url = address.rstrip("/")
    return url, _resolve_token(url)


def api_target(address: Optional[str]) -> Tuple[str, Optional[str]]:
    """(URL of the cluster's API port, its token). RAY_API_SERVER_ADDRESS wins, as in Ray;
    then the address given; then the cluster this process is connected to (a private one
    has no other record); then the job's own (OXRAY_DASHBOARD_URL, RAY_ADDRESS); in a
    worker, the cluster it works for; else the cluster started on this machine. Listing never
    connects a driver: its own `init` would then find it connected."""
    from oxray._private import worker

    address = os.environ.get("RAY_API_SERVER_ADDRESS") or (None if address == "auto" else address)
    if address:
        return _url_of(address)
    if worker.is_initialized():
        return _connected_target()
    for name in ("OXRAY_DASHBOARD_URL", "RAY_ADDRESS"):
        if os.environ.get(name, "").strip() not in ("", "auto"):
            return _url_of(os.environ[name].strip())
    if os.environ.get("OXRAY_NODE_ID"):
        return _connected_target()  # a worker: it connects to its cluster for any call
    local = _local_cluster().get("dashboard_url")
    if not local:
        raise ServerUnavailable("No cluster to ask: pass address='http://HEAD:8265', set RAY_API_SERVER_ADDRESS, "
                                "connect with oxray.init(), or start a cluster here with `oxray start --head`.")
    return _url_of(local)


class StateApiClient:
    """Sends the state API's GET requests to one cluster (`address` as the functions take it;
    `headers`, `cookies` and `verify` as for JobSubmissionClient)."""

    def __init__(self, address: Optional[str] = None, cookies: Optional[Dict[str, Any]] = None,
                 headers: Optional[Dict[str, Any]] = None, verify: Optional[Union[str, bool]] = True):
        from oxray._private.tls import ssl_context

        self._address, token = api_target(address)
        self._headers = dict(headers or {})
        if token and not any(k.lower() == "authorization" for k in self._headers):
            self._headers["Authorization"] = f"Bearer {token}"
        if cookies:
            self._headers["Cookie"] = "; ".join(f"{k}={v}" for k, v in cookies.items())
        self._ssl = ssl_context(verify)

    def get_address(self) -> str:
        return self._address

    def _open(self, endpoint: str, params: Dict[str, Any], timeout: float):
        """The HTTP response, or the cluster's reason for refusing, as RayStateApiException."""
        query = urllib.parse.urlencode({k: v for k, v in params.items() if v is not None}, doseq=True)
        request = urllib.request.Request(f"{self._address}{endpoint}?{query}", headers=self._headers)
        try:
            return urllib.request.urlopen(request, timeout=timeout, context=self._ssl)
        except urllib.error.HTTPError as e:
            text = e.read().decode(errors="replace")
            try:
                text = json.loads(text).get("msg") or text
            except (ValueError, AttributeError):
                pass
            raise RayStateApiException(f"{self._address}{endpoint} refused the request ({e.code}): {text}") from None
        except (urllib.error.URLError, OSError) as e:
            reason = getattr(e, "reason", e)
            raise ServerUnavailable(f"Failed to connect to the cluster's API server at {self._address}: {reason}") \
                from None

    def _request(self, endpoint: str, params: Dict[str, Any], timeout: float) -> Dict[str, Any]:
        """`data.result` of Ray's envelope."""
        try:
            with self._open(endpoint, params, timeout) as response:
                body = json.loads(response.read())
        except socket.timeout:
            raise ServerUnavailable(f"{self._address}{endpoint} did not answer within {timeout} s") from None
        except ValueError as e:
            raise RayStateApiException(f"{self._address}{endpoint} answered with something else than JSON: {e}") \
                from None
        if body.get("result") is False:
            raise RayStateApiException(f"{self._address}{endpoint} failed: {body.get('msg')}")
        return body["data"]["result"]

    @staticmethod
    def _params(options: Union[ListApiOptions, GetApiOptions]) -> Dict[str, Any]:
        params: Dict[str, Any] = {"timeout": options.timeout}
        if isinstance(options, ListApiOptions):
            params.update(limit=options.limit, detail=options.detail, exclude_driver=options.exclude_driver)
            params["filter_keys"] = [str(k) for k, _, _ in options.filters]
            params["filter_predicates"] = [p for _, p, _ in options.filters]
            params["filter_values"] = [str(v) for _, _, v in options.filters]
        return params

    def list(self, resource: StateResource, options: ListApiOptions, raise_on_missing_output: bool,
             _explain: bool = False) -> List[Any]:
        _served(resource)
        if options.has_conflicting_filters():
            return []
        # The caller waits the whole timeout, the server a part of it (ListApiOptions).
        response = self._request(f"/api/v0/{resource.value}", self._params(options), _http_timeout(options))
        if raise_on_missing_output:
            _raise_on_missing_output(resource, response)
        if _explain:
            _warn(resource, response, limit=True)
        return [dict_to_state(row, resource) for row in response["result"]]

    def get(self, resource: StateResource, id: str, options: Optional[GetApiOptions], _explain: bool = False):
        if resource not in _ID_KEYS:
            raise ValueError(f"Can't get {resource.name} by id.")
        options = options or GetApiOptions()
        params = self._params(options)
        params.update(filter_keys=[_ID_KEYS[resource]], filter_predicates=["="], filter_values=[id], detail=True)
        response = self._request(f"/api/v0/{resource.value}", params, _http_timeout(options))
        if _explain:
            _warn(resource, response, limit=False)
        rows = [dict_to_state(row, resource) for row in response["result"]]
        if not rows:
            return None
        if resource == StateResource.OBJECTS:
            return rows  # one row per place that holds a reference
        if resource == StateResource.TASKS and len(rows) > 1:
            return rows  # one row per attempt
        return rows[0]

    def summary(self, resource: SummaryResource, *, options: SummaryApiOptions, raise_on_missing_output: bool,
                _explain: bool = False) -> Dict[str, Any]:
        response = self._request(f"/api/v0/{resource.value}/summarize", {"timeout": options.timeout},
                                 options.timeout)
        if raise_on_missing_output:
            _raise_on_missing_output(resource, response)
        if _explain:
            _warn(resource, response, limit=False)
        return response["result"]["node_id_to_summary"]


def _http_timeout(options) -> float:
    return options.timeout / options.server_timeout_multiplier


def _served(resource: StateResource) -> None:
    if resource in (StateResource.RUNTIME_ENVS, StateResource.CLUSTER_EVENTS):
        raise RayStateApiException(f"oxray does not keep {resource.value.replace('_', ' ')}: the state API lists "
                                   "actors, tasks, nodes, jobs, placement groups, workers and objects")


def _raise_on_missing_output(resource, response: Dict[str, Any]) -> None:
    if response.get("partial_failure_warning"):
        raise RayStateApiException(
            f"Failed to retrieve all {resource.value} from the cluster: {response['partial_failure_warning']} "
            "To allow missing output, set `raise_on_missing_output=False`.")
    if response.get("total", 0) != response.get("num_after_truncation", 0):
        raise RayStateApiException(
            f"Failed to retrieve all {response['total']} {resource.value} from the cluster: the answer was "
            f"truncated to {response['num_after_truncation']}. To allow missing output, set "
            "`raise_on_missing_output=False`.")


def _warn(resource, response: Dict[str, Any], limit: bool) -> None:
    """What `_explain=True` tells: missing sources, truncation, a limit that hid rows, and the
    head's own notes (e.g. ended tasks it no longer keeps)."""
    if response.get("partial_failure_warning"):
        warnings.warn(response["partial_failure_warning"])
    if response.get("total", 0) > response.get("num_after_truncation", 0):
        warnings.warn(f"{response['num_after_truncation']} of {response['total']} {resource.value} were retrieved.")
    shown = len(response.get("result") or [])
    if limit and response.get("num_filtered", 0) > shown:
        warnings.warn(f"Limit last {shown} entries (Total {response['num_filtered']}). Use filters to narrow the "
                      "result or a higher limit to see all of it.")
    for note in response.get("warnings") or []:
        warnings.warn(note)


def _list(resource: StateResource, address, filters, limit, timeout, detail, raise_on_missing_output, _explain):
    options = ListApiOptions(limit=limit, timeout=timeout, filters=filters, detail=detail)
    return StateApiClient(address=address).list(resource, options=options,
                                                 raise_on_missing_output=raise_on_missing_output, _explain=_explain)


def _get(resource: StateResource, id: str, address, timeout, _explain):
    return StateApiClient(address=address).get(resource, id, GetApiOptions(timeout=timeout), _explain=_explain)


def _summary(resource: SummaryResource, address, timeout, raise_on_missing_output, _explain) -> Dict:
    return StateApiClient(address=address).summary(resource, options=SummaryApiOptions(timeout=timeout),
                                                   raise_on_missing_output=raise_on_missing_output,
                                                   _explain=_explain)


def get_actor(id: str, address: Optional[str] = None, timeout: int = DEFAULT_RPC_TIMEOUT,
              _explain: bool = False) -> Optional[ActorState]:
    return _get(StateResource.ACTORS, id, address, timeout, _explain)


def get_job(id: str, address: Optional[str] = None, timeout: int = DEFAULT_RPC_TIMEOUT,
            _explain: bool = False) -> Optional[JobState]:
    """A submitted job by its submission id, as in Ray."""
    return _get(StateResource.JOBS, id, address, timeout, _explain)


def get_placement_group(id: str, address: Optional[str] = None, timeout: int = DEFAULT_RPC_TIMEOUT,
                        _explain: bool = False) -> Optional[PlacementGroupState]:
    return _get(StateResource.PLACEMENT_GROUPS, id, address, timeout, _explain)


def get_node(id: str, address: Optional[str] = None, timeout: int = DEFAULT_RPC_TIMEOUT,
             _explain: bool = False) -> Optional[NodeState]:
    return _get(StateResource.NODES, id, address, timeout, _explain)


def get_worker(id: str, address: Optional[str] = None, timeout: int = DEFAULT_RPC_TIMEOUT,
               _explain: bool = False) -> Optional[WorkerState]:
    return _get(StateResource.WORKERS, id, address, timeout, _explain)


def get_task(id, address: Optional[str] = None, timeout: int = DEFAULT_RPC_TIMEOUT,
             _explain: bool = False) -> Optional[Union[TaskState, List[TaskState]]]:
    """A task by id or by the ObjectRef it returns: its attempt, or a list of attempts."""
    if not isinstance(id, str):
        task_id = id.task_id()
        id = task_id if isinstance(task_id, str) else task_id.hex()
    return _get(StateResource.TASKS, id, address, timeout, _explain)


def get_objects(id: str, address: Optional[str] = None, timeout: int = DEFAULT_RPC_TIMEOUT,
                _explain: bool = False) -> List[ObjectState]:
    return _get(StateResource.OBJECTS, id, address, timeout, _explain) or []


def list_actors(address: Optional[str] = None, filters: Filters = None, limit: int = DEFAULT_LIMIT,
                timeout: int = DEFAULT_RPC_TIMEOUT, detail: bool = False, raise_on_missing_output: bool = True,
                _explain: bool = False) -> List[ActorState]:
    return _list(StateResource.ACTORS, address, filters, limit, timeout, detail, raise_on_missing_output, _explain)


def list_placement_groups(address: Optional[str] = None, filters: Filters = None, limit: int = DEFAULT_LIMIT,
                          timeout: int = DEFAULT_RPC_TIMEOUT, detail: bool = False,
                          raise_on_missing_output: bool = True, _explain: bool = False) -> List[PlacementGroupState]:
    return _list(StateResource.PLACEMENT_GROUPS, address, filters, limit, timeout, detail, raise_on_missing_output,
                 _explain)


def list_nodes(address: Optional[str] = None, filters: Filters = None, limit: int = DEFAULT_LIMIT,
               timeout: int = DEFAULT_RPC_TIMEOUT, detail: bool = False, raise_on_missing_output: bool = True,
               _explain: bool = False) -> List[NodeState]:
    return _list(StateResource.NODES, address, filters, limit, timeout, detail, raise_on_missing_output, _explain)


def list_jobs(address: Optional[str] = None, filters: Filters = None, limit: int = DEFAULT_LIMIT,
              timeout: int = DEFAULT_RPC_TIMEOUT, detail: bool = False, raise_on_missing_output: bool = True,
              _explain: bool = False) -> List[JobState]:
    return _list(StateResource.JOBS, address, filters, limit, timeout, detail, raise_on_missing_output, _explain)


def list_workers(address: Optional[str] = None, filters: Filters = None, limit: int = DEFAULT_LIMIT,
                 timeout: int = DEFAULT_RPC_TIMEOUT, detail: bool = False, raise_on_missing_output: bool = True,
                 _explain: bool = False) -> List[WorkerState]:
    return _list(StateResource.WORKERS, address, filters, limit, timeout, detail, raise_on_missing_output, _explain)


def list_tasks(address: Optional[str] = None, filters: Filters = None, limit: int = DEFAULT_LIMIT,
               timeout: int = DEFAULT_RPC_TIMEOUT, detail: bool = False, raise_on_missing_output: bool = True,
               _explain: bool = False) -> List[TaskState]:
    return _list(StateResource.TASKS, address, filters, limit, timeout, detail, raise_on_missing_output, _explain)


def list_objects(address: Optional[str] = None, filters: Filters = None, limit: int = DEFAULT_LIMIT,
                 timeout: int = DEFAULT_RPC_TIMEOUT, detail: bool = False, raise_on_missing_output: bool = True,
                 _explain: bool = False) -> List[ObjectState]:
    return _list(StateResource.OBJECTS, address, filters, limit, timeout, detail, raise_on_missing_output, _explain)


def list_runtime_envs(address: Optional[str] = None, filters: Filters = None, limit: int = DEFAULT_LIMIT,
                      timeout: int = DEFAULT_RPC_TIMEOUT, detail: bool = False, raise_on_missing_output: bool = True,
                      _explain: bool = False) -> List[Any]:
    """Refused with a clear error: oxray keeps no record of runtime environments."""
    _served(StateResource.RUNTIME_ENVS)


def list_cluster_events(address: Optional[str] = None, filters: Filters = None, limit: int = DEFAULT_LIMIT,
                        timeout: int = DEFAULT_RPC_TIMEOUT, detail: bool = False,
                        raise_on_missing_output: bool = True, _explain: bool = False) -> List[Dict]:
    """Refused with a clear error: oxray keeps no cluster event log."""
    _served(StateResource.CLUSTER_EVENTS)


def summarize_tasks(address: Optional[str] = None, timeout: int = DEFAULT_RPC_TIMEOUT,
                    raise_on_missing_output: bool = True, _explain: bool = False) -> Dict:
    """Tasks by function with their counts per state: `{"cluster": {"summary": ..., ...}}`."""
    return _summary(SummaryResource.TASKS, address, timeout, raise_on_missing_output, _explain)


def summarize_actors(address: Optional[str] = None, timeout: int = DEFAULT_RPC_TIMEOUT,
                     raise_on_missing_output: bool = True, _explain: bool = False) -> Dict:
    return _summary(SummaryResource.ACTORS, address, timeout, raise_on_missing_output, _explain)


def summarize_objects(address: Optional[str] = None, timeout: int = DEFAULT_RPC_TIMEOUT,
                      raise_on_missing_output: bool = True, _explain: bool = False) -> Dict:
    return _summary(SummaryResource.OBJECTS, address, timeout, raise_on_missing_output, _explain)
