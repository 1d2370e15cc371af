import functools
import inspect
import os
from typing import Any, Dict, Optional

from oxray._private import accelerators, generators, serialization, worker
from oxray.util import _labels, scheduling_strategies

_OPTIONS = {"num_cpus", "num_gpus", "memory", "resources", "num_returns", "max_retries", "retry_exceptions", "name",
            "namespace", "lifetime", "get_if_exists", "max_concurrency", "scheduling_strategy", "runtime_env",
            "max_restarts", "max_task_retries", "concurrency_groups", "max_calls", "label_selector",
            "fallback_strategy", "accelerator_type"}


def resource_request(options: Dict[str, Any], default_cpus: float) -> Dict[str, float]:
    request = {"CPU": float(options.get("num_cpus", default_cpus))}
    if options.get("num_gpus"):
        request["GPU"] = float(options["num_gpus"])
    if options.get("memory"):
        request["memory"] = float(options["memory"])
    for name, amount in (options.get("resources") or {}).items():
        if name in ("CPU", "GPU", "memory"):
            raise ValueError(f"use num_cpus, num_gpus or memory, not resources={{{name!r}: ...}}")
        request[name] = float(amount)
    request.update(accelerators.resource(options.get("accelerator_type")))
    for name, amount in request.items():
        if amount < 0:
            raise ValueError(f"{name} must not be negative, got {amount}")
    return request


def env_vars(options: Dict[str, Any], cpus: float = 1) -> Dict[str, str]:
    """The worker's environment: the job's runtime_env merged with the task's own, and, as
    Ray sets it, OMP_NUM_THREADS as the CPUs the task holds (1 for less) unless the user
    set it."""
    from oxray._private import runtime_env

    variables = runtime_env.worker_env(options.get("runtime_env"))
    if "OMP_NUM_THREADS" not in variables and "OMP_NUM_THREADS" not in os.environ:
        variables["OMP_NUM_THREADS"] = str(max(1, int(cpus)))
    return variables


def signature_of(function) -> Optional[inspect.Signature]:
    """What `.remote()` checks its arguments against, as Ray does at the call; `None` for
    callables whose signature Python cannot tell."""
    try:
        return inspect.signature(function)
    except (TypeError, ValueError):
        return None


def check_arguments(signature: Optional[inspect.Signature], name: str, args, kwargs) -> None:
    if signature is None:
        return
    try:
        signature.bind(*args, **kwargs)
    except TypeError as e:
        raise TypeError(f"{name}() got arguments that do not fit its signature {signature}: {e}") from None


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _check_amount(name: str, value) -> None:
    if not _is_number(value):
        raise TypeError(f"{name} must be a number, got {type(value).__name__}")
    if value < 0:
        raise ValueError(f"{name} only accepts None, 0 or a positive number, got {value}")


def _check_value(name: str, value) -> None:
    """One option's value, checked where Ray checks it: at `@remote` and `.options()`."""
    if value is None:
        return
    if name in ("num_cpus", "num_gpus", "memory"):
        _check_amount(name, value)
    elif name == "resources":
        if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
            raise TypeError(f"resources must be a dict of names to numbers, got {value!r}")
        for resource, amount in value.items():
            _check_amount(f"resources[{resource!r}]", amount)
    elif name in ("max_retries", "max_restarts", "max_task_retries"):
        if isinstance(value, bool) or not isinstance(value, int) or value < -1:
            raise ValueError(f"{name} must be an integer >= -1 (-1: without limit), got {value!r}")
    elif name == "retry_exceptions":
        if not isinstance(value, bool) and not (
                isinstance(value, (list, tuple))
                and all(isinstance(e, type) and issubclass(e, BaseException) for e in value)):
            raise TypeError("retry_exceptions must be a bool or a list of exception types")
    elif name in ("name", "namespace"):
        if not isinstance(value, str):
            raise TypeError(f"{name} must be a string, got {type(value).__name__}")
    elif name == "lifetime":
        if value not in ("detached", "non_detached"):
            raise ValueError(f"lifetime must be 'detached', 'non_detached' or None, got {value!r}")
    elif name == "get_if_exists":
        if not isinstance(value, bool):
            raise TypeError("get_if_exists must be a bool")
    elif name == "runtime_env":
        if not isinstance(value, dict):
            raise TypeError(f"runtime_env must be a dict, got {type(value).__name__}")
    elif name == "accelerator_type":
        accelerators.check(value)


def check_options(options: Dict[str, Any]) -> None:
    unknown = set(options) - _OPTIONS
    if unknown:
        raise ValueError(f"unknown option(s) {sorted(unknown)}; known: {sorted(_OPTIONS)}")
    for name, value in options.items():
        _check_value(name, value)
    num_returns = options.get("num_returns", 1)
    if num_returns in (None, "streaming", "dynamic"):
        return
    if not isinstance(num_returns, int) or num_returns < 1:
        raise ValueError(f"num_returns must be a positive integer, 'streaming' or 'dynamic', got {num_returns!r}")


def check_max_calls(value) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"max_calls must be an integer >= 0 (0: without limit), got {value!r}")
    return value


class TaskFunction:
    """What a task's worker runs: the function, with what the worker needs to know of its
    options (`max_calls`: the process ends after that many calls; the resources it holds,
    for `get_runtime_context().get_assigned_resources()`)."""

    def __init__(self, function, max_calls: int, resources: Dict[str, float]):
        self.function = function
        self.max_calls = max_calls
        self.resources = resources

    def __call__(self, *args, **kwargs):
        return self.function(*args, **kwargs)


# Options that change what the worker gets with the function (see TaskFunction).
_BLUEPRINT_OPTIONS = ("num_returns", "max_calls", "num_cpus", "num_gpus", "memory", "resources", "accelerator_type")


class RemoteFunction:
    """What `@oxray.remote` makes of a function: `.remote(...)` runs it as a task."""

    def __init__(self, function, options: Dict[str, Any]):
        check_options(options)
        check_max_calls(options.get("max_calls", 0))
        _labels.check(options)
        self._function = function
        self._options = options
        self._pickled = None
        self._signature = signature_of(function)
        # (the job's runtime_env it was made for, the worker's variables): the same for
        # every call until the job's runtime_env changes (init).
        self._env = None
        self.__name__ = getattr(function, "__name__", "remote_function")
        self.__doc__ = function.__doc__

    def __call__(self, *args, **kwargs):
        raise TypeError(f"Remote function {self.__name__} cannot be called directly; use {self.__name__}.remote(...)")

    def options(self, **options) -> "RemoteFunction":
        merged = RemoteFunction(self._function, {**self._options, **options})
        if not any(name in options for name in _BLUEPRINT_OPTIONS):
            merged._pickled = self._pickled
        return merged

    def remote(self, *args, **kwargs):
        check_arguments(self._signature, self.__name__, args, kwargs)
        client = worker.client()
        generator = generators.mode(self._options.get("num_returns"), self._function)
        resources = resource_request(self._options, default_cpus=1)
        if self._pickled is None:
            # A dynamic generator's values are put by the worker as they come.
            dynamic = generator == generators.DYNAMIC
            function = functools.partial(generators.run_dynamic, self._function) if dynamic else self._function
            self._pickled = serialization.dumps(TaskFunction(function, self._options.get("max_calls", 0), resources))
        chosen = _labels.strategy(self._options,
                                  scheduling_strategies.effective(self._options.get("scheduling_strategy")))
        strategy = scheduling_strategies.native(chosen)
        payload, dependencies, contained = serialization.dumps_args(args, kwargs,
                                                                    scheduling_strategies.placement(chosen))
        job_env = worker.runtime_env()
        if self._env is None or self._env[0] is not job_env:
            self._env = (job_env, env_vars(self._options, resources["CPU"]))
        retries = int(self._options.get("max_retries", 3))
        if retries < 0:  # Ray's -1: retry without limit
            retries = 2**32 - 1
        retry_exceptions = bool(self._options.get("retry_exceptions", False))
        num_returns = 1 if generator else self._options.get("num_returns", 1)
        ids = client.submit_task(self.__name__, self._pickled, payload, dependencies, contained, resources, retries,
                                 retry_exceptions, num_returns, self._env[1], strategy,
                                 generator == generators.STREAMING)
        refs = [worker.new_ref(i) for i in ids]
        if generator == generators.STREAMING:
            return generators.ObjectRefGenerator(refs[0], client)
        return refs if num_returns > 1 else refs[0]
