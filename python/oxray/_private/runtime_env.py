"""runtime_env for tasks and actors, as Ray's: the job's (from `init(runtime_env=...)`, or
from `job submit`, which the job's processes find in OXRAY_JOB_RUNTIME_ENV) merged with the
task's own (the task's fields win, `env_vars` merge). Local directories and wheels are
uploaded to the head once per process; the node agent unpacks them, caches them, and starts
workers in them (pooled per environment)."""

import json
import os
import sys
from typing import Any, Dict, List, Optional

# Where the rest of a runtime_env rides among a worker's variables: no variable name can
# hold "=", so it can never be one the user set.
RUNTIME_ENV_KEY = "=runtime_env"

# The directories a driver's workers put first on their sys.path, as a JSON list.
DRIVER_SYS_PATH = "OXRAY_DRIVER_SYS_PATH"

# The namespace a worker's process joins.
NAMESPACE = "OXRAY_NAMESPACE"

_FOR_TASKS = {"working_dir", "py_modules", "pip", "env_vars", "excludes", "config"}
_uploaded: Dict[str, Dict[str, Any]] = {}


def job_env() -> Optional[Dict[str, Any]]:
    from oxray._private import worker

    explicit = worker.runtime_env()
    if explicit is not None:
        return explicit
    text = os.environ.get("OXRAY_JOB_RUNTIME_ENV")
    return json.loads(text) if text else None


def merge(job: Optional[Dict[str, Any]], task: Optional[Dict[str, Any]]) -> Dict[str, Any]:
    """Ray's merge: the task's fields replace the job's, except `env_vars`, merged key by
    key with the task's winning."""
    merged = dict(job or {})
    for key, value in (task or {}).items():
        if key == "env_vars":
            merged["env_vars"] = {**(merged.get("env_vars") or {}), **(value or {})}
        else:
            merged[key] = value
    return merged


def worker_env(task: Optional[Dict[str, Any]]) -> Dict[str, str]:
    """The variables a task's worker gets, with the rest of its runtime_env under
    RUNTIME_ENV_KEY."""
    job = job_env()
    if task is not None and not isinstance(task, dict):
        raise TypeError(f"runtime_env must be a dict, got {type(task).__name__}")
    merged = merge(job, task)
    unsupported = set(merged) - _FOR_TASKS
    if unsupported:
        raise ValueError(f"runtime_env {sorted(unsupported)} is not supported; known: {sorted(_FOR_TASKS)}")
    variables = merged.get("env_vars") or {}
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in variables.items()):
        raise TypeError("runtime_env env_vars must map strings to strings")
    variables = dict(variables)
    paths = _driver_sys_path_json(bool(merged.get("working_dir")))
    if paths:
        variables[DRIVER_SYS_PATH] = paths
    from oxray._private import worker

    namespace = worker.namespace()
    if namespace:
        # Work runs in the namespace of the process that started it, as in Ray.
        variables[NAMESPACE] = namespace
    if merged.get("config") is not None:
        from oxray.runtime_env import check_config

        check_config(merged["config"])
    rest = {k: merged[k] for k in ("working_dir", "py_modules", "pip", "excludes", "config") if merged.get(k)}
    if rest.get("working_dir") or rest.get("py_modules") or rest.get("pip"):
        rest = _uploaded_form(rest)
        variables[RUNTIME_ENV_KEY] = json.dumps(rest, sort_keys=True)
    if merged:
        # What the task starts inherits its runtime_env, as in Ray: the worker reads it as
        # its job's (with packages already uploaded, so nothing is uploaded again).
        inherited = {**rest, "env_vars": dict(merged.get("env_vars") or {})}
        variables["OXRAY_JOB_RUNTIME_ENV"] = json.dumps(inherited, sort_keys=True)
    return variables


def _uploaded_form(rest: Dict[str, Any]) -> Dict[str, Any]:
    """The runtime_env with local directories and wheels replaced by package URIs."""
    key = json.dumps(rest, sort_keys=True)
    if key not in _uploaded:
        local = any("://" not in p for p in [rest.get("working_dir") or "x://"] + list(rest.get("py_modules") or []))
        _uploaded[key] = _packages_client()._upload_local(rest) if local or isinstance(rest.get("pip"), str) else rest
        _uploaded[key].pop("excludes", None)
    return _uploaded[key]


def _packages_client():
    from oxray._private import worker
    from oxray.job_submission import JobSubmissionClient

    client = worker.client()
    return JobSubmissionClient(client.dashboard_url, headers={"Authorization": f"Bearer {client.token}"})


def code_paths(argv0: str, sys_path: List[str], cwd: str, interactive: bool, has_working_dir: bool) -> List[str]:
    """What a driver's workers add to their sys.path, as Ray's do: the directory of the
    driver's script when the driver imports from it (not under `python -m` or in a shell),
    and the driver's working directory unless a working_dir replaces it."""
    paths = []
    if not interactive and argv0:
        script_dir = os.path.dirname(os.path.realpath(argv0))
        if script_dir in sys_path:
            paths.append(script_dir)
    if not has_working_dir and cwd not in paths:
        paths.append(cwd)
    return paths


def driver_sys_path(has_working_dir: bool) -> List[str]:
    """This process's workers' code paths: a worker passes on its driver's; a driver's are
    its JobConfig's `code_search_path`, then those `code_paths` finds."""
    inherited = os.environ.get(DRIVER_SYS_PATH)
    if inherited is not None:
        return json.loads(inherited)
    from oxray._private import worker

    main = sys.modules.get("__main__")
    interactive = not hasattr(main, "__file__")
    paths = code_paths(sys.argv[0] if sys.argv else "", sys.path, os.getcwd(), interactive, has_working_dir)
    # JobConfig(code_search_path=...) comes first, as Ray puts it before the driver's.
    return worker.code_search_path() + [p for p in paths if p not in worker.code_search_path()]


_driver_paths: Dict[Any, str] = {}


def _driver_sys_path_json(has_working_dir: bool) -> str:
    """`driver_sys_path` as the variable carries it, found once per process (and JobConfig),
    as Ray finds it once when the driver connects."""
    from oxray._private import worker

    key = (has_working_dir, tuple(worker.code_search_path()))
    if key not in _driver_paths:
        paths = driver_sys_path(has_working_dir)
        _driver_paths[key] = json.dumps(paths) if paths else ""
    return _driver_paths[key]


def add_driver_sys_path() -> None:
    """In a worker: its driver's code paths first on sys.path, so the driver's own modules
    (the script's neighbours) import as they do in the driver."""
    text = os.environ.get(DRIVER_SYS_PATH)
    if text:
        sys.path[0:0] = [p for p in json.loads(text) if p not in sys.path]
