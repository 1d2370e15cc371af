"""`@serve.ingress(app)`: an ASGI app (FastAPI, Starlette, any ASGI callable, or a zero-arg
builder of one) serves the deployment's HTTP requests; FastAPI routes declared in the class
body receive the replica's instance as `self`, as in Ray."""

import inspect

from oxray.serve.exceptions import RayServeException

ASGI_ATTR = "_oxray_serve_asgi_app"


def _is_builder(app) -> bool:
    """A function of no required parameters (an ASGI app takes scope, receive and send)."""
    if not inspect.isfunction(app):
        return False
    params = [p for p in inspect.signature(app).parameters.values()
              if p.default is p.empty and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return not params


def _is_fastapi(app) -> bool:
    return any(c.__module__.startswith("fastapi") for c in type(app).__mro__)


def _servable_instance():
    from oxray.serve._context import get_replica_context

    return get_replica_context().servable_object


def _rebuilt(route, endpoint):
    """The route made again around `endpoint` with the same options (FastAPI reads the
    endpoint's signature only when a route is made). Routes are made anew rather than
    re-included: an included router holds a lock, and the app must pickle."""
    params = inspect.signature(type(route).__init__).parameters
    given = {name: getattr(route, name) for name in params if name not in ("self", "endpoint") and hasattr(route, name)}
    if "path" in given and hasattr(route, "path_format"):
        given["path"] = route.path
    return type(route)(endpoint=endpoint, **given)


def class_based_view(app, cls) -> None:
    """Routes whose endpoint is a function of `cls` get the replica's instance for `self`
    (a FastAPI dependency), as Ray's class-based views do."""
    from fastapi import Depends
    from fastapi.routing import APIRoute, APIWebSocketRoute

    members = set(vars(cls).values())
    routes = app.router.routes
    for index, route in enumerate(list(routes)):
        if not isinstance(route, (APIRoute, APIWebSocketRoute)):
            continue
        owner = getattr(route.endpoint, "_serve_cls", None)
        if owner is not None and owner is not cls:
            continue
        if route.endpoint not in members or owner is cls:
            continue
        signature = inspect.signature(route.endpoint)
        params = list(signature.parameters.values())
        if not params:
            raise RayServeException("Methods in FastAPI class-based view must have ``self`` as their first argument.")
        first = params[0].replace(default=Depends(_servable_instance))
        rest = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in params[1:]]
        route.endpoint.__signature__ = signature.replace(parameters=[first] + rest)
        route.endpoint._serve_cls = cls
        routes[index] = _rebuilt(route, route.endpoint)
    # Routes of other classes bound to the same app belong to their own deployments.
    routes[:] = [r for r in routes if getattr(getattr(r, "endpoint", None), "_serve_cls", cls) is cls]


def _picklable_state() -> None:
    """Starlette's State (app.state) cannot be unpickled as it is (its __getattr__ recurses
    before its dict is back); an app pickled by value, as one defined in a script is, needs
    it to."""
    import copyreg

    try:
        from starlette.datastructures import State
    except ImportError:
        return
    copyreg.pickle(State, lambda state: (State, (dict(state._state),)))


def ingress(app):
    """Decorates a deployment class: `app` serves its HTTP requests."""
    if app is None or (not callable(app) and not hasattr(app, "routes")):
        raise TypeError(f"@serve.ingress takes an ASGI app or a builder of one, got {app!r}")

    def decorate(cls):
        if not inspect.isclass(cls):
            raise ValueError("@serve.ingress must be used with a class.")
        if "__call__" in {n for c in cls.__mro__[:-1] for n in vars(c)}:
            raise ValueError("Classes passed to @serve.ingress may not have __call__ method.")
        target = app
        if not _is_builder(app) and _is_fastapi(app):
            _picklable_state()
            if type(app).__name__ == "APIRouter":
                from fastapi import FastAPI

                target = FastAPI()
                target.router.routes.extend(app.routes)
            class_based_view(target, cls)
        setattr(cls, ASGI_ATTR, target)
        return cls

    return decorate


def asgi_app_of(instance_or_cls):
    """The ASGI app of an ingress deployment (a builder is called), else None."""
    app = getattr(type(instance_or_cls) if not inspect.isclass(instance_or_cls) else instance_or_cls,
                  ASGI_ATTR, None)
    if app is not None and _is_builder(app):
        app = app()
        if _is_fastapi(app):
            class_based_view(app, type(instance_or_cls))
    return app
