"""Declarative applications (`serve deploy`, `PUT /api/serve/applications/`): the head starts
an `ApplicationBuilder` actor in the application's runtime_env, which imports the
application named by `import_path`, applies the config's `args` and deployment overrides,
and answers with the same body `serve.run` sends. The head then deploys it."""

import importlib
import inspect
import json
import traceback
from typing import Any, Dict, List

from oxray.serve import _build
from oxray.serve._deployment import Application, Deployment


def import_attr(import_path: str):
    """`pkg.mod:attr` or `pkg.mod.attr`, as Ray resolves them."""
    if not isinstance(import_path, str) or not import_path:
        raise ValueError("import_path must be a non-empty string")
    if ":" in import_path:
        module_name, _, attr = import_path.partition(":")
    else:
        module_name, _, attr = import_path.rpartition(".")
    if not module_name or not attr:
        raise ValueError(f"import_path {import_path!r} must be of the form 'module.submodule:attribute' "
                         "or 'module.submodule.attribute'")
    value = importlib.import_module(module_name)
    for part in attr.split("."):
        value = getattr(value, part)
    return value


def _call_builder(builder, args: Dict[str, Any]):
    """A builder function takes the config's `args` as one argument: the dict itself, or
    the pydantic model its annotation names, built from it (as Ray does)."""
    params = list(inspect.signature(builder).parameters.values())
    if not params:
        if args:
            raise TypeError(f"The application builder {builder.__name__} takes no arguments, but the config "
                            f"gives args {sorted(args)}.")
        return builder()
    annotation = params[0].annotation
    try:
        from pydantic import BaseModel

        if inspect.isclass(annotation) and issubclass(annotation, BaseModel):
            return builder(annotation(**args))
    except ImportError:
        pass
    return builder(args)


def load_application(import_path: str, args: Dict[str, Any]) -> Application:
    target = import_attr(import_path)
    if isinstance(target, Application):
        if args:
            raise ValueError("Arguments can only be passed to an application builder function, not an already "
                             f"built application ({import_path} is an Application).")
        return target
    if isinstance(target, Deployment):
        raise TypeError(f"{import_path} is a Deployment, not an Application: bind it (`{target.name}.bind()`).")
    if callable(target):
        built = _call_builder(target, args or {})
        if not isinstance(built, Application):
            raise TypeError(f"The application builder {import_path} returned {type(built).__name__}, "
                            "not an Application.")
        return built
    raise TypeError(f"{import_path} is a {type(target).__name__}, not an Application or a builder function.")


def apply_overrides(root: Application, overrides: List[Dict[str, Any]]) -> None:
    """Each override replaces the options it names of the deployment of its name (its
    ray_actor_options as a whole, as in Ray); the app's runtime_env reaches every
    deployment through the builder's own (inherited by what it starts)."""
    _, order = _build.walk(root)
    by_name = {name: app for name, app in order}
    for override in overrides:
        options = dict(override)
        name = options.pop("name", None)
        if name not in by_name:
            raise ValueError(f"Deployment '{name}' does not exist in the application. "
                             f"Available: {sorted(by_name)}")
        app = by_name[name]
        app._deployment = app.deployment.options(**options)


def build(config: Dict[str, Any]) -> Dict[str, Any]:
    root = load_application(config["import_path"], config.get("args") or {})
    apply_overrides(root, config.get("deployments") or [])
    route_prefix = config.get("route_prefix", "/")
    code_version = json.dumps([config["import_path"], config.get("args") or {}, config.get("runtime_env") or {}],
                              sort_keys=True)
    return _build.application_body(root, config.get("name") or "default", route_prefix, None, code_version,
                                   bool(config.get("external_scaler_enabled")))


class ApplicationBuilder:
    """The actor the head runs for one build: `build` answers a JSON text, the body or the
    error with its traceback (the application's status message)."""

    def build(self, config_json: str) -> str:
        try:
            return json.dumps({"app": build(json.loads(config_json))})
        except BaseException:  # noqa: BLE001 - every failure becomes the app's message
            return json.dumps({"error": traceback.format_exc()})
