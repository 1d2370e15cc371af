"""The driver's global state: one connection to one cluster per process, as in Ray."""

import atexit
import json
import operator
import os
import sys
import threading
from typing import Any, Dict, List, Optional

from oxray import _native

_lock = threading.Lock()
_client: Optional["_native.Client"] = None
_shut_down = False
_namespace: Optional[str] = None
_runtime_env: Optional[Dict[str, Any]] = None
# JobConfig(code_search_path=...): directories the driver's workers put on their sys.path.
_code_search_path: List[str] = []
# Named actors this process created that are not detached (their names leave the head's
# directory when this process shuts down; the core ends every actor this process owns), and
# placement groups: they end with it, as in Ray.
_owned_actors: Dict[str, Any] = {}
_owned_groups: List[Any] = []
# Every named actor this process created, detached ones too: it owns them.
_created_here: set = set()


def _home_file(name: str) -> str:
    # os.path, not pathlib: pathlib's imports cost a new driver ~5 ms.
    return os.path.join(os.environ.get("OXRAY_HOME") or os.path.expanduser("~/.oxray"), name)


def _current_address() -> Optional[str]:
    try:
        with open(_home_file("current_cluster.json")) as f:
            return json.load(f).get("address")
    except (OSError, ValueError):
        return None


def _read_token(path: str) -> Optional[str]:
    try:
        with open(path) as f:
            return f.read().strip() or None
    except OSError:
        return None


def _token() -> Optional[str]:
    """oxray's token settings, then Ray's (`RAY_AUTH_TOKEN`, `RAY_AUTH_TOKEN_PATH`), then the
    token files: oxray's, then Ray's `~/.ray/auth_token`."""
    for name in ("OXRAY_AUTH_TOKEN", "RAY_AUTH_TOKEN"):
        token = os.environ.get(name, "").strip()
        if token:
            return token
    path = os.environ.get("RAY_AUTH_TOKEN_PATH", "").strip()
    if path:
        token = _read_token(path)
        if token is None:
            raise RuntimeError(f"RAY_AUTH_TOKEN_PATH={path}: no token could be read from that file")
        return token
    return _read_token(_home_file("auth_token")) or _read_token(os.path.expanduser("~/.ray/auth_token"))


class RayContext(dict):
    """What `init` returns: the addresses of the cluster it joined, as a dict and as
    attributes, like Ray's context."""

    def __getattr__(self, name):
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None

    def disconnect(self):
        shutdown()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        shutdown()


def init(
    address: Optional[str] = None,
    *,
    num_cpus: Optional[int] = None,
    num_gpus: Optional[int] = None,
    resources: Optional[Dict[str, float]] = None,
    object_store_memory: Optional[int] = None,
    namespace: Optional[str] = None,
    runtime_env: Optional[Dict[str, Any]] = None,
    ignore_reinit_error: bool = False,
    job_config: Any = None,
    **kwargs: Any,
) -> RayContext:
    """Connects this process to a cluster.

    With no address: the cluster of the job this process runs in (OXRAY_ADDRESS, or Ray's
    RAY_ADDRESS), else the
    cluster started on this machine with `oxray start`, else a new private cluster for this
    process, stopped when it exits. "auto" only joins; "local" always starts a new one.
    """
    global _client, _namespace, _runtime_env, _code_search_path
    check_init_options(kwargs)
    if job_config is not None:
        namespace = namespace or job_config.ray_namespace
        runtime_env = runtime_env if runtime_env is not None else job_config.runtime_env
    # A worker is in the namespace of the process that started its work.
    namespace = namespace or os.environ.get("OXRAY_NAMESPACE") or None
    with _lock:
        if _client is not None:
            if ignore_reinit_error:
                return _context(_client)
            raise RuntimeError("Maybe you called oxray.init twice by accident? "
                               "Pass ignore_reinit_error=True or call oxray.shutdown() first.")
        for name, value in (("num_cpus", num_cpus), ("num_gpus", num_gpus), ("object_store_memory", object_store_memory)):
            if value is not None and (not isinstance(value, int) or value < 0):
                raise ValueError(f"{name} must be a non-negative integer, got {value!r}")
        resources_json = json.dumps(resources) if resources is not None else None
        labels = labels_argument(kwargs.get("labels"))
        package_dir = os.path.join(os.path.dirname(os.path.dirname(os.path.realpath(__file__))), "_bin")
        # Ray's RAY_ADDRESS too: a Ray user's shell or pod names its cluster with it.
        env_address = os.environ.get("OXRAY_ADDRESS") or os.environ.get("RAY_ADDRESS") or None
        _client = _native.connect(address, env_address, _current_address(), _token(),
                                  (num_cpus, num_gpus, resources_json, object_store_memory, labels), package_dir, sys.executable,
                                  os.environ.get("OXRAY_NODE_ID"))
        _namespace = namespace
        _runtime_env = runtime_env
        _code_search_path = list(getattr(job_config, "code_search_path", None) or [])
        _say_which_ray(_client)
        return _context(_client)


# Ray's other `init` arguments: `labels` (a new local cluster's node's), and those accepted
# with nothing for oxray to do (logging goes to the driver as in Ray; the dashboard is the
# head's; the rest are Ray's own process settings).
_INIT_ACCEPTED = {"labels", "local_mode", "include_dashboard", "dashboard_host", "dashboard_port",
                  "configure_logging", "logging_level", "logging_format", "logging_config", "log_to_driver",
                  "enable_resource_isolation", "system_reserved_cpu", "system_reserved_memory", "storage",
                  "_enable_object_reconstruction", "_plasma_directory", "_node_ip_address",
                  "_driver_object_store_memory", "_memory", "_redis_password", "_temp_dir", "_metrics_export_port",
                  "_system_config", "_tracing_startup_hook", "_node_name", "_skip_env_hook"}


def _say_which_ray(client) -> None:
    """One line on stderr when a driver reached oxray as `ray`, so its user can tell."""
    oxray = sys.modules.get("oxray")
    if oxray is None or sys.modules.get("ray") is not oxray or os.environ.get("OXRAY_WORKER_ID"):
        return
    print(f"oxray {oxray.__oxray_version__} (as Ray {oxray.__version__}): connected to the cluster at "
          f"{client.address}, dashboard {client.dashboard_url or 'none'}", file=sys.stderr)


def labels_argument(labels: Optional[Dict[str, str]]) -> Optional[str]:
    """`init(labels=...)` for a new local cluster's node, as `start --labels` takes them."""
    if labels is None:
        return None
    if not isinstance(labels, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in labels.items()):
        raise TypeError(f"labels must be a dict of strings to strings, got {labels!r}")
    for key, value in labels.items():
        if not key or any(c in key + value for c in ",="):
            raise ValueError(f"label {key!r}={value!r}: names and values cannot be empty or hold ',' or '='")
    return ",".join(f"{k}={v}" for k, v in labels.items()) or None


def check_init_options(kwargs: Dict[str, Any]) -> None:
    """As Ray's `init`: an argument it does not know is an error, not silently ignored."""
    unknown = sorted(set(kwargs) - _INIT_ACCEPTED)
    if unknown:
        raise RuntimeError(f"Unknown keyword argument(s): {', '.join(unknown)}")


def _context(client) -> RayContext:
    return RayContext(address=client.address, gcs_address=client.address, dashboard_url=client.dashboard_url,
                      session_name=client.session_name, node_id=None)


def shutdown() -> None:
    """Disconnects; stops the cluster if `init` started it for this process."""
    global _client, _namespace, _shut_down
    with _lock:
        client, _client, _namespace = _client, None, None
        _shut_down = client is not None
        actors, groups = list(_owned_actors.values()), list(_owned_groups)
        _owned_actors.clear()
        _owned_groups.clear()
    if client is not None:
        for name, namespace in actors:
            try:
                client.remove_actor(name, namespace)
            except Exception:  # the cluster may already be gone
                pass
        try:
            client.end_owned_actors()
        except Exception:  # the cluster may already be gone
            pass
        for group in groups:
            try:
                client.remove_placement_group(group.id.hex())
            except Exception:  # removed already, or the cluster is gone
                pass
        client.shutdown()


atexit.register(shutdown)


def is_initialized() -> bool:
    return _client is not None


def was_shut_down() -> bool:
    """Whether this process disconnected with `shutdown` and has not connected since: work
    left running in the background must not connect it again."""
    return _shut_down and _client is None


def client():
    """The connection, made on first use as Ray does (in workers too: their environment
    names their cluster)."""
    if _client is None:
        init(ignore_reinit_error=True)
    return _client


def nodes() -> List[Dict[str, Any]]:
    """Every node, in the shape of `ray.nodes()`."""
    out = []
    for n in json.loads(client().nodes_json()):
        alive = n["state"] == "ALIVE"
        out.append({
            "NodeID": n["node_id"],
            "Alive": alive,
            "alive": alive,
            "NodeManagerAddress": n["node_ip"],
            "NodeManagerHostname": n["node_name"],
            "NodeName": n["node_name"],
            "NodeManagerPort": n.get("agent_port", 0),
            "Resources": {k: v for k, v in n["resources_total"].items() if v > 0} if alive else {},
            "Labels": n["labels"],
            "IsHeadNode": n["is_head_node"],
            "StartTimeMs": n["start_time_ms"],
            "EndTimeMs": n["end_time_ms"],
            "DeathReason": n.get("state_message") or "",
        })
    return out


def get_gpu_ids() -> List[int]:
    """The GPUs this worker may use (its CUDA_VISIBLE_DEVICES), as Ray's `get_gpu_ids`."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "")
    return [int(g) if g.strip().isdigit() else g.strip() for g in visible.split(",") if g.strip()]


def cluster_resources() -> Dict[str, float]:
    return dict(client().cluster_resources())


def available_resources() -> Dict[str, float]:
    return dict(client().available_resources())


def runtime_env() -> Optional[Dict[str, Any]]:
    return _runtime_env


def code_search_path() -> List[str]:
    return _code_search_path


def namespace() -> Optional[str]:
    """This process's namespace (a worker's is that of its work, before it connects too)."""
    if _client is None:
        return os.environ.get("OXRAY_NAMESPACE") or None
    return _namespace


def new_ref(object_id: str):
    from oxray.object_ref import ObjectRef

    return ObjectRef(object_id, client())


def put(value: Any, *, _owner=None):
    """Stores a value; returns its ObjectRef. With `_owner` (an actor handle), as in Ray, that
    actor owns the object: it lives as long as the actor does, even after this process."""
    from oxray._private import serialization
    from oxray.object_ref import ObjectRef

    if isinstance(value, ObjectRef):
        raise TypeError("Calling put on an ObjectRef is not allowed")
    if _owner is not None:
        return _put_owned_by(_owner, value)
    return new_ref(serialization.put(client(), value))


def _put_owned_by(owner, value):
    from oxray.actor import ActorHandle
    from oxray.runtime_context import get_runtime_context

    if not isinstance(owner, ActorHandle):
        raise TypeError(f"_owner must be an actor handle, got {type(owner).__name__}")
    if owner._actor_id == get_runtime_context().get_actor_id():
        return put(value)  # this actor owns what it puts
    # The actor puts the value itself and sends back the ref in a list, so that this process
    # borrows it instead of receiving the value.
    [ref] = get(owner.__ray_call__.remote(_put_here, value))
    return ref


def _put_here(_actor, value):
    return [put(value)]


def get(refs, *, timeout: Optional[float] = None):
    """The value of one ObjectRef, or the values of a list of them, waiting as needed."""
    from oxray import exceptions
    from oxray._private import serialization
    from oxray.object_ref import ObjectRef

    single = isinstance(refs, ObjectRef)
    items = [refs] if single else list(refs)
    for r in items:
        if not isinstance(r, ObjectRef):
            raise TypeError(f"get takes an ObjectRef or a list of them, got {type(r).__name__}")
    try:
        results = client().get([r.hex() for r in items], timeout)
    except TimeoutError as e:
        raise exceptions.GetTimeoutError(f"Get timed out: {e}") from None
    except ValueError as e:
        raise exceptions.ObjectLostError(str(e)) from None
    values = []
    for data, outcome in results:
        if outcome == 0:
            values.append(serialization.loads(data))
        elif outcome == 1:
            error = serialization.loads(data)
            raise error.as_instanceof_cause() if isinstance(error, exceptions.RayTaskError) else error
        else:
            raise _system_error(outcome, data.decode(errors="replace"))
    return values[0] if single else values


def _system_error(outcome: int, message: str) -> Exception:
    """The exception for work that ended without a value of its own, by the core's outcome
    code (crates/worker/src/objects.rs `Outcome`); any other is the system's failure to run it."""
    from oxray import exceptions

    kinds = {
        3: exceptions.ActorDiedError,
        4: exceptions.ObjectLostError,
        5: exceptions.OwnerDiedError,
        6: exceptions.OutOfMemoryError,
        7: exceptions.TaskCancelledError,
        8: exceptions.RuntimeEnvSetupError,
    }
    return kinds.get(outcome, exceptions.WorkerCrashedError)(message)


_ID = operator.attrgetter("_id")


def wait(refs, *, num_returns: int = 1, timeout: Optional[float] = None, fetch_local: bool = True):
    """Splits refs (and streaming generators) into (ready, not ready), once num_returns are
    ready or at the timeout."""
    from oxray._private.generators import ObjectRefGenerator
    from oxray.object_ref import ObjectRef

    if isinstance(refs, (ObjectRef, ObjectRefGenerator)):
        raise TypeError("wait takes a list of ObjectRefs, got a single ObjectRef")
    refs = list(refs)
    if not refs:
        return [], []
    if timeout is not None and timeout < 0:
        raise ValueError(f"The 'timeout' argument must be nonnegative. Received {timeout}")
    # Types and ids through C-level loops: waiting on a thousand refs again and again is common.
    if not set(map(type, refs)) <= {ObjectRef} and not all(isinstance(r, ObjectRef) for r in refs):
        if all(isinstance(r, (ObjectRef, ObjectRefGenerator)) for r in refs):
            return _wait_with_generators(refs, num_returns, timeout)
        raise TypeError("wait takes a list of ObjectRefs and ObjectRefGenerators")
    ids = list(map(_ID, refs))
    if len(set(ids)) != len(ids):
        raise ValueError("Wait requires a list of unique ObjectRefs")
    if not 1 <= num_returns <= len(refs):
        raise ValueError(f"num_returns must be between 1 and {len(refs)}, got {num_returns}")
    chosen = client().wait(ids, num_returns, timeout)
    rest, start = [], 0
    for at in chosen:
        rest.extend(refs[start:at])
        start = at + 1
    rest.extend(refs[start:])
    return [refs[at] for at in chosen], rest


def _wait_with_generators(waitables, num_returns: int, timeout: Optional[float]):
    """`wait` over refs and streaming generators, as Ray's: a generator is ready when `next`
    would return at once. Streams have no waitable handle of their own, so this polls, from
    1 ms up to 50 ms apart."""
    import time

    from oxray._private.generators import ObjectRefGenerator

    if len(set(map(id, waitables))) != len(waitables):
        raise ValueError("Wait requires a list of unique ObjectRefs")
    if not 1 <= num_returns <= len(waitables):
        raise ValueError(f"num_returns must be between 1 and {len(waitables)}, got {num_returns}")
    deadline = None if timeout is None else time.monotonic() + timeout
    pause = 0.001
    while True:
        refs = [w for w in waitables if not isinstance(w, ObjectRefGenerator)]
        done = {id(r) for r in wait(refs, num_returns=len(refs), timeout=0)[0]} if refs else set()
        ready = [w for w in waitables
                 if (w._next_is_ready() if isinstance(w, ObjectRefGenerator) else id(w) in done)][:num_returns]
        left = None if deadline is None else deadline - time.monotonic()
        if len(ready) == num_returns or (left is not None and left <= 0):
            chosen = {id(w) for w in ready}
            return ready, [w for w in waitables if id(w) not in chosen]
        time.sleep(pause if left is None else min(pause, left))
        pause = min(pause * 2, 0.05)


def remote(*args, **options):
    """`@remote` or `@remote(num_cpus=..., ...)` on a function."""
    from oxray.remote_function import RemoteFunction

    def make(target):
        if isinstance(target, type):
            from oxray.actor import ActorClass

            return ActorClass(target, options)
        if not callable(target):
            raise TypeError("remote takes a function")
        return RemoteFunction(target, options)

    if len(args) == 1 and not options and callable(args[0]):
        return make(args[0])
    if args:
        raise TypeError("remote takes a function, or keyword options only")
    return make


def cancel(ref, *, force: bool = False, recursive: bool = True) -> None:
    """Cancels the task that makes `ref`: dropped if it has not started, interrupted
    (KeyboardInterrupt in the task) if it runs, its worker ended with `force`. `get` then
    raises TaskCancelledError. Tasks are never retried after a cancel."""
    from oxray.object_ref import ObjectRef

    if not isinstance(ref, ObjectRef):
        raise TypeError(f"cancel takes an ObjectRef, got {type(ref).__name__}")
    client().cancel(ref.hex(), force)


def own_actor(actor_id: str, name: str, namespace: str, detached: bool) -> None:
    """A named actor this process created; unless detached, its name goes with this process."""
    with _lock:
        _created_here.add(actor_id)
        if not detached:
            _owned_actors[actor_id] = (name, namespace)


def own_placement_group(group) -> None:
    with _lock:
        _owned_groups.append(group)


def disown_placement_group(group) -> None:
    with _lock:
        if group in _owned_groups:
            _owned_groups.remove(group)


def kill(actor, *, no_restart: bool = True) -> None:
    """Ends an actor at once; calls still waiting on it fail with ActorDiedError."""
    from oxray.actor import ActorHandle

    if not isinstance(actor, ActorHandle):
        raise TypeError(f"kill takes an actor handle, got {type(actor).__name__}")
    with _lock:
        if no_restart:
            _owned_actors.pop(actor._actor_id, None)
    _kill(client(), actor, no_restart)


def _kill(client, actor, no_restart: bool = True) -> None:
    if actor._name and no_restart:
        client.remove_actor(actor._name, actor._namespace)
    if actor._owner is not None or actor._actor_id in _created_here or actor._lease_id is None:
        try:
            client.kill_actor(actor._actor_id, actor._address, actor._owner, no_restart)
            return
        # Its owner is gone (a detached actor outlives it) or no longer knows it: the agent
        # that leased its worker ends it.
        except (ConnectionError, ValueError, RuntimeError):
            pass
    client.kill_actor_at(actor._agent_address, actor._lease_id)
