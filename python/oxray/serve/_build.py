"""From an Application graph to the controller's PUT body (see the Serve contract)."""

import base64
import dataclasses
import hashlib
import inspect
import json
import sys
from typing import Any, Dict, List, Optional, Tuple

from oxray.serve._deployment import Application, actor_options, autoscaling_of, initial_replicas
from oxray.serve.handle import DeploymentHandle


# Ray's DeploymentSchema fields reported as they are in effect (autoscaling_config apart).
_SCHEMA_KEYS = ("num_replicas", "max_ongoing_requests", "max_queued_requests", "user_config",
                "graceful_shutdown_wait_loop_s", "graceful_shutdown_timeout_s", "health_check_period_s",
                "health_check_timeout_s", "placement_group_bundles", "placement_group_strategy",
                "max_replicas_per_node", "logging_config", "rolling_update_percentage", "max_surge_percent")
_SCHEMA_ACTOR_KEYS = ("runtime_env", "num_cpus", "num_gpus", "memory", "resources", "accelerator_type",
                      "label_selector")


def check_route_prefix(route_prefix) -> None:
    if route_prefix is None:
        return
    if not isinstance(route_prefix, str):
        raise TypeError(f"route_prefix must be a string or None, got {type(route_prefix).__name__}")
    if not route_prefix.startswith("/"):
        raise ValueError(f"Invalid route_prefix '{route_prefix}', must start with a forward slash ('/').")
    if route_prefix != "/" and route_prefix.endswith("/"):
        raise ValueError(f"Invalid route_prefix '{route_prefix}', may not end with a trailing '/'.")
    if "{" in route_prefix or "}" in route_prefix:
        raise ValueError(f"Invalid route_prefix '{route_prefix}', may not contain wildcards.")


def check_app_name(name) -> None:
    if not isinstance(name, str):
        raise TypeError(f"The application name must be a string, got {type(name).__name__}")
    if not name:
        raise ValueError("The application name must not be empty.")


def walk(root: Application) -> Tuple[str, List[Tuple[str, Application]]]:
    """(the ingress deployment's name, every deployment of the graph with its unique name,
    dependencies first). One Application object bound in several places is deployed once;
    two different ones with the same name get `_1`, `_2`... as in Ray."""
    if not isinstance(root, Application):
        raise TypeError("`serve.run` expects an `Application` returned by `Deployment.bind()`, got "
                        f"{type(root).__name__}.")
    names: Dict[int, str] = {}
    taken: Dict[str, int] = {}
    order: List[Tuple[str, Application]] = []
    on_path: set = set()

    def visit(app: Application) -> str:
        key = id(app)
        if key in names:
            return names[key]
        if key in on_path:
            raise ValueError(f"The application graph has a cycle through {app.deployment.name}.")
        on_path.add(key)
        for child in _children((app._args, app._kwargs)):
            visit(child)
        on_path.discard(key)
        base = app.deployment.name
        count = taken.get(base, 0)
        name = base if count == 0 else f"{base}_{count}"
        taken[base] = count + 1
        names[key] = name
        order.append((name, app))
        return name

    return visit(root), order


def _children(value):
    if isinstance(value, Application):
        yield value
    elif isinstance(value, (list, tuple, set, frozenset)):
        for item in value:
            yield from _children(item)
    elif isinstance(value, dict):
        for item in value.values():
            yield from _children(item)


def replace_apps(value, app_name: str, names: Dict[int, str]):
    """`value` with each Application in it (also in lists, tuples and dicts) a handle to it."""
    if isinstance(value, Application):
        return DeploymentHandle(names[id(value)], app_name)
    if isinstance(value, list):
        return [replace_apps(v, app_name, names) for v in value]
    if isinstance(value, tuple) and not hasattr(value, "_fields"):
        return tuple(replace_apps(v, app_name, names) for v in value)
    if isinstance(value, dict):
        return {k: replace_apps(v, app_name, names) for k, v in value.items()}
    return value


def definition_of(app: Application, app_name: str, names: Dict[int, str]) -> bytes:
    from oxray._private import serialization

    target = app.deployment.func_or_class
    return serialization.dumps({
        "callable": target,
        "is_function": not inspect.isclass(target),
        "init_args": replace_apps(tuple(app._args), app_name, names),
        "init_kwargs": replace_apps(dict(app._kwargs), app_name, names),
    })


def _plain(value):
    """Config objects (dataclasses) as dicts, for JSON."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {k: _plain(v) for k, v in dataclasses.asdict(value).items() if not k.startswith("_")}
    return value


def deployment_schema(name: str, options: Dict[str, Any], ray_actor_options: Dict[str, Any]) -> Dict[str, Any]:
    """The deployment's options in effect, in the shape of Ray's `DeploymentSchema` (what
    `GET /api/serve/applications/` reports as `deployment_config`)."""
    out = {"name": name, "ray_actor_options": {k: v for k, v in ray_actor_options.items() if k in _SCHEMA_ACTOR_KEYS}}
    for key in _SCHEMA_KEYS:
        value = options.get(key)
        if value is not None:
            out[key] = _plain(value)
    autoscaling = autoscaling_of(options)
    if autoscaling is not None:
        out["autoscaling_config"] = autoscaling.dict()
    return out


# Placement options oxray's controller does not act on yet: refused by name, never dropped.
_UNHONOURED = ("placement_group_bundles", "placement_group_strategy", "placement_group_bundle_label_selector",
               "max_replicas_per_node")


def check_placement_options(name: str, options: Dict[str, Any], ray_actor_options: Dict[str, Any]) -> None:
    given = [key for key in _UNHONOURED if options.get(key) is not None]
    if ray_actor_options.get("label_selector"):
        given.append("ray_actor_options.label_selector")
    if given:
        raise ValueError(f"deployment {name!r}: {', '.join(given)} cannot be honoured by oxray Serve, which "
                         "places each replica as one actor by its resources; leave them out, or ask for the "
                         "replica's resources (num_cpus, num_gpus, resources, accelerator_type) instead")


def deployment_body(name: str, app: Application, app_name: str, names: Dict[int, str],
                    code_version: Optional[str] = None) -> Dict[str, Any]:
    """`code_version` stands for the code and its arguments when given (a declarative app's
    import path, args and runtime_env, as Ray versions them): pickles of classes made in
    different processes differ, so a rebuilt app would otherwise restart every replica."""
    from oxray.remote_function import env_vars, resource_request

    options = app.deployment._effective()
    ray_actor_options = actor_options(options["ray_actor_options"])
    check_placement_options(name, options, ray_actor_options)
    resources = resource_request(ray_actor_options, default_cpus=1)
    resources.setdefault("GPU", 0.0)
    definition = definition_of(app, app_name, names)
    autoscaling = autoscaling_of(options)
    digest = hashlib.sha256(definition if code_version is None else f"{code_version}\0{name}".encode())
    digest.update(json.dumps(ray_actor_options, sort_keys=True, default=repr).encode())
    for key in ("placement_group_bundles", "placement_group_strategy"):
        digest.update(json.dumps(options.get(key), sort_keys=True, default=repr).encode())
    return {
        "name": name,
        "num_replicas": initial_replicas(options),
        "max_ongoing_requests": options["max_ongoing_requests"],
        "max_queued_requests": options["max_queued_requests"],
        "user_config": options["user_config"],
        "resources": resources,
        "env": env_vars(ray_actor_options, resources["CPU"]),
        "health_check_period_s": float(options["health_check_period_s"]),
        "health_check_timeout_s": float(options["health_check_timeout_s"]),
        "graceful_shutdown_wait_loop_s": float(options["graceful_shutdown_wait_loop_s"]),
        "graceful_shutdown_timeout_s": float(options["graceful_shutdown_timeout_s"]),
        "max_constructor_retry_count": options["max_constructor_retry_count"],
        "definition": base64.b64encode(definition).decode(),
        "version": digest.hexdigest(),
        "config": deployment_schema(name, options, ray_actor_options),
        "autoscaling_config": autoscaling.dict() if autoscaling is not None else None,
    }


def application_body(root: Application, app_name: str, route_prefix: Optional[str],
                     http_options: Dict[str, Any], code_version: Optional[str] = None,
                     external_scaler_enabled: bool = False,
                     proxy_location: Optional[str] = None) -> Dict[str, Any]:
    check_app_name(app_name)
    check_route_prefix(route_prefix)
    ingress, order = walk(root)
    names = {id(app): name for name, app in order}
    return {
        "route_prefix": route_prefix,
        "ingress": ingress,
        "python": sys.executable,
        "http_options": http_options,
        "proxy_location": proxy_location,
        "external_scaler_enabled": bool(external_scaler_enabled),
        "deployments": [deployment_body(name, app, app_name, names, code_version) for name, app in order],
    }
