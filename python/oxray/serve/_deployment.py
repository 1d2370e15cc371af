"""`@serve.deployment`, `Deployment` and `Application`: the options (Ray Serve 2.60's
defaults, checked where they are given) and the graph `bind` makes."""

import inspect
import json
import numbers
from typing import Any, Callable, Dict, Optional

from oxray.serve.config import AutoscalingConfig, BackpressureConfig, LoggingConfig, _coerce

_ACTOR_OPTION_KEYS = {"num_cpus", "num_gpus", "memory", "resources", "accelerator_type", "runtime_env",
                      "label_selector", "object_store_memory"}

DEFAULTS: Dict[str, Any] = {
    "num_replicas": 1,
    "ray_actor_options": None,
    "max_ongoing_requests": 5,
    "max_queued_requests": -1,
    "backpressure_config": None,
    "autoscaling_config": None,
    "user_config": None,
    "graceful_shutdown_wait_loop_s": 2.0,
    "graceful_shutdown_timeout_s": 20.0,
    "health_check_period_s": 10.0,
    "health_check_timeout_s": 30.0,
    "max_constructor_retry_count": 20,
    "placement_group_bundles": None,
    "placement_group_strategy": None,
    "max_replicas_per_node": None,
    "logging_config": None,
    "rolling_update_percentage": 0.2,
    "max_surge_percent": 0,
    # Accepted and kept for a later version.
    "request_router_config": None,
    "gang_scheduling_config": None,
    "deployment_actors": None,
    "placement_group_bundle_label_selector": None,
}

# The defaults "auto" stands for; the user's autoscaling_config fields override them.
AUTO_SCALING = {"min_replicas": 1, "max_replicas": 100, "target_ongoing_requests": 2}


def _int(name: str, value, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an integer, got {type(value).__name__} {value!r}")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return value


def _number(name: str, value, positive: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a number, got {type(value).__name__} {value!r}")
    if value < 0 or (positive and value == 0):
        raise ValueError(f"{name} must be {'> 0' if positive else '>= 0'}, got {value}")
    return float(value)


def check_ray_actor_options(options) -> Dict[str, Any]:
    if options is None:
        return {}
    if not isinstance(options, dict):
        raise TypeError(f"ray_actor_options must be a dict, got {type(options).__name__}")
    unknown = set(options) - _ACTOR_OPTION_KEYS
    if unknown:
        raise ValueError(f"ray_actor_options: unknown key(s) {sorted(unknown)}; known: {sorted(_ACTOR_OPTION_KEYS)}")
    for name in ("num_cpus", "num_gpus", "memory", "object_store_memory"):
        if options.get(name) is not None:
            _number(f"ray_actor_options.{name}", options[name])
    resources = options.get("resources")
    if resources is not None:
        if not isinstance(resources, dict):
            raise TypeError(f"ray_actor_options.resources must be a dict, got {type(resources).__name__}")
        for key, amount in resources.items():
            _number(f"ray_actor_options.resources[{key!r}]", amount)
    if options.get("runtime_env") is not None and not isinstance(options["runtime_env"], dict):
        raise TypeError("ray_actor_options.runtime_env must be a dict")
    return dict(options)


def check_options(options: Dict[str, Any]) -> Dict[str, Any]:
    """The options as given, checked and normalised (config classes from dicts)."""
    if "version" in options:
        raise ValueError("The 'version' option has been removed from Ray Serve: deployments are updated when "
                         "their code, arguments or options change.")
    if "route_prefix" in options:
        raise ValueError("route_prefix is no longer a deployment option: pass it to serve.run(..., route_prefix=...).")
    unknown = set(options) - set(DEFAULTS) - {"name"}
    if unknown:
        raise TypeError(f"unknown deployment option(s) {sorted(unknown)}")
    out = dict(options)
    if "name" in out:
        name = out["name"]
        if not isinstance(name, str) or not name:
            raise TypeError(f"name must be a non-empty string, got {name!r}")
        if "#" in name:
            raise ValueError(f"Deployment names must not contain the '#' character, got {name!r}.")
    if "num_replicas" in out and out["num_replicas"] is not None and out["num_replicas"] != "auto":
        if isinstance(out["num_replicas"], str):
            raise ValueError(f'num_replicas must be an integer >= 1 or "auto", got {out["num_replicas"]!r}')
        _int("num_replicas", out["num_replicas"], 1)
    if "ray_actor_options" in out:
        out["ray_actor_options"] = check_ray_actor_options(out["ray_actor_options"]) or None
    if "max_ongoing_requests" in out:
        _int("max_ongoing_requests", out["max_ongoing_requests"], 1)
    if "max_queued_requests" in out:
        value = _int("max_queued_requests", out["max_queued_requests"], -1)
        if value == 0:
            raise ValueError("max_queued_requests must be -1 (no limit) or a positive integer, got 0")
    for name in ("graceful_shutdown_wait_loop_s", "graceful_shutdown_timeout_s"):
        if name in out:
            out[name] = _number(name, out[name])
    for name in ("health_check_period_s", "health_check_timeout_s"):
        if name in out:
            out[name] = _number(name, out[name], positive=True)
    if "max_constructor_retry_count" in out:
        _int("max_constructor_retry_count", out["max_constructor_retry_count"], 1)
    if out.get("max_replicas_per_node") is not None:
        value = _int("max_replicas_per_node", out["max_replicas_per_node"], 1)
        if value > 100:
            raise ValueError(f"max_replicas_per_node must be at most 100, got {value}")
    if "rolling_update_percentage" in out:
        value = _number("rolling_update_percentage", out["rolling_update_percentage"], positive=True)
        if value > 1:
            raise ValueError(f"rolling_update_percentage must be in (0, 1], got {value}")
    if "max_surge_percent" in out:
        _number("max_surge_percent", out["max_surge_percent"])
    if "user_config" in out and out["user_config"] is not None:
        try:
            json.dumps(out["user_config"])
        except (TypeError, ValueError) as e:
            raise TypeError(f"user_config must be JSON-serializable: {e}") from None
    if "autoscaling_config" in out:
        out["autoscaling_config"] = _autoscaling(out["autoscaling_config"], out.get("num_replicas") == "auto")
    if "backpressure_config" in out:
        out["backpressure_config"] = _coerce(BackpressureConfig, out["backpressure_config"], "backpressure_config")
    if "logging_config" in out:
        out["logging_config"] = _coerce(LoggingConfig, out["logging_config"], "logging_config")
    bundles = out.get("placement_group_bundles")
    if bundles is not None:
        if not isinstance(bundles, list) or not bundles or not all(isinstance(b, dict) for b in bundles):
            raise TypeError("placement_group_bundles must be a non-empty list of dicts")
    if out.get("placement_group_strategy") is not None:
        if out["placement_group_strategy"] not in ("PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD"):
            raise ValueError(f"placement_group_strategy must be PACK, SPREAD, STRICT_PACK or STRICT_SPREAD, "
                             f"got {out['placement_group_strategy']!r}")
    return out


def _autoscaling(value, auto: bool) -> Optional[AutoscalingConfig]:
    """A dict's own keys are remembered: with "auto" they override its defaults, and a dict
    that only makes sense on top of them (min_replicas=5 alone) is checked merged."""
    if not isinstance(value, dict):
        return _coerce(AutoscalingConfig, value, "autoscaling_config")
    config = _coerce(AutoscalingConfig, {**AUTO_SCALING, **value} if auto else value, "autoscaling_config")
    config._given = set(value)
    return config


def check_combination(options: Dict[str, Any]) -> None:
    """Checks across the options set (the decorator's merged with `.options()`'s)."""
    num = options.get("num_replicas")
    if isinstance(num, int) and options.get("autoscaling_config") is not None:
        raise ValueError("Manually setting num_replicas is not allowed when autoscaling_config is provided.")
    if options.get("placement_group_strategy") is not None and options.get("placement_group_bundles") is None:
        raise ValueError("placement_group_strategy is given without placement_group_bundles.")
    if options.get("max_replicas_per_node") is not None and options.get("placement_group_bundles") is not None:
        raise ValueError("max_replicas_per_node and placement_group_bundles cannot be set together.")


class Deployment:
    """What `@serve.deployment` makes: a class or function with its Serve options."""

    def __init__(self, func_or_class: Callable, name: str, options: Dict[str, Any]):
        self._func_or_class = func_or_class
        self._name = name
        self._options = options  # only what was set; DEFAULTS hold the rest
        check_combination(self._options)

    def _effective(self) -> Dict[str, Any]:
        return {**DEFAULTS, **self._options}

    def option(self, name: str):
        return self._effective()[name]

    @property
    def name(self) -> str:
        return self._name

    @property
    def func_or_class(self):
        return self._func_or_class

    @property
    def num_replicas(self):
        return self.option("num_replicas")

    @property
    def user_config(self):
        return self.option("user_config")

    @property
    def max_ongoing_requests(self) -> int:
        return self.option("max_ongoing_requests")

    @property
    def max_queued_requests(self) -> int:
        return self.option("max_queued_requests")

    @property
    def ray_actor_options(self) -> Dict[str, Any]:
        return actor_options(self.option("ray_actor_options"))

    @property
    def autoscaling_config(self) -> Optional[AutoscalingConfig]:
        return autoscaling_of(self._effective())

    def options(self, _func_or_class=None, **options) -> "Deployment":
        checked = check_options(options)
        name = checked.pop("name", self._name)
        return Deployment(_func_or_class or self._func_or_class, name, {**self._options, **checked})

    def bind(self, *args, **kwargs) -> "Application":
        return Application(self, args, kwargs)

    def __call__(self, *args, **kwargs):
        raise RuntimeError(f"Deployments cannot be constructed directly. Use `{self._name}.bind()` instead.")

    def __repr__(self):
        return f"Deployment(name={self._name})"


def actor_options(given: Optional[Dict[str, Any]]) -> Dict[str, Any]:
    """ray_actor_options in effect: Ray's num_cpus=1 when it is not given."""
    options = dict(given or {})
    options.setdefault("num_cpus", 1)
    return options


def autoscaling_of(options: Dict[str, Any]) -> Optional[AutoscalingConfig]:
    config = options.get("autoscaling_config")
    if options.get("num_replicas") != "auto":
        return config
    given: Dict[str, Any] = {}
    if config is not None:
        keys = getattr(config, "_given", None)
        defaults = AutoscalingConfig()
        given = {k: v for k, v in config.dict().items()
                 if (k in keys if keys is not None else v != getattr(defaults, k))}
    return AutoscalingConfig(**{**AUTO_SCALING, **given})


def initial_replicas(options: Dict[str, Any]) -> int:
    """v1: the controller is given a fixed count, the autoscaler's starting point."""
    config = autoscaling_of(options)
    if config is not None:
        return config.initial()
    return options["num_replicas"] if options.get("num_replicas") is not None else 1


class Application:
    """A deployment bound to its constructor's arguments (which may hold other Applications)."""

    def __init__(self, deployment: Deployment, args: tuple, kwargs: Dict[str, Any]):
        self._deployment = deployment
        self._args = args
        self._kwargs = kwargs

    @property
    def deployment(self) -> Deployment:
        return self._deployment

    def __repr__(self):
        return f"Application({self._deployment.name})"


def deployment(_func_or_class: Optional[Callable] = None, name: Optional[str] = None, **options):
    """`@serve.deployment`, `@serve.deployment(...)` or `serve.deployment(cls, ...)`."""
    if name is not None:
        options["name"] = name
    checked = check_options(options)

    def decorate(target):
        if not (inspect.isclass(target) or callable(target)):
            raise TypeError(f"@serve.deployment must decorate a class or a function, got {target!r}")
        opts = dict(checked)
        dep_name = opts.pop("name", None) or getattr(target, "__name__", None)
        if not dep_name:
            raise TypeError("the deployment needs a name: pass name=...")
        return Deployment(target, dep_name, opts)

    if _func_or_class is not None:
        return decorate(_func_or_class)
    return decorate
