"""serve.run / start / delete / shutdown / status and the handle getters, through the
controller's HTTP API."""

import dataclasses
import logging
import sys
import time
from typing import Any, Dict, List, Optional, Union

from oxray.serve import _build, _context, _controller_client, _router
from oxray.serve._deployment import Application
from oxray.serve.config import HTTPOptions, ProxyLocation, _coerce
from oxray.serve.exceptions import RayServeException
from oxray.serve.handle import DeploymentHandle
from oxray.serve.schema import ServeStatus, status_from_controller

logger = logging.getLogger("oxray.serve")

# How often the controller is asked whether an app got where it should.
POLL_S = 0.05
# A redeploy that changes nothing the controller restarts for may leave the app RUNNING
# throughout; past this long RUNNING counts as done even with no new deploy time.
SAME_DEPLOY_GRACE_S = 1.0

_http_options: Dict[str, Any] = {"host": "127.0.0.1", "port": 8000}
# Where proxies run (Ray's ProxyLocation); None: the controller's default, EveryNode.
_proxy_location: Optional[str] = None


@dataclasses.dataclass
class RunTarget:
    target: Application
    name: str = "default"
    route_prefix: Optional[str] = "/"
    logging_config: Any = None
    external_scaler_enabled: bool = False


def start(proxy_location: Union[None, str, ProxyLocation] = None, http_options: Union[None, dict, HTTPOptions] = None,
          grpc_options: Any = None, logging_config: Any = None, **kwargs) -> None:
    """Starts Serve on the cluster: its HTTP proxies run from now on, also with no
    application, until `serve.shutdown()`. Once Serve is running, other options are ignored
    with a warning, as in Ray."""
    global _http_options, _proxy_location
    location = ProxyLocation.coerce(proxy_location).value if proxy_location is not None else None
    options = _coerce(HTTPOptions, http_options, "http_options") or HTTPOptions()
    wanted = {"host": options.host, "port": options.port}
    running = _controller_client.start_http(dict(wanted, request_timeout_s=options.request_timeout_s), location)
    if (running.get("host"), running.get("port")) != (wanted["host"], wanted["port"]):
        logger.warning("Serve is already running with HTTP options %s; the new options %s are ignored.",
                       running, wanted)
        return
    _http_options = wanted
    _proxy_location = location


def _wait(names: List[str], before: Dict[str, Any], deadline: Optional[float] = None) -> None:
    """Waits until each app is RUNNING; raises on DEPLOY_FAILED."""
    started = time.monotonic()
    left = set(names)
    seen = set()
    while left:
        apps = _controller_client.get_applications().get("applications") or {}
        for name in sorted(left):
            app = apps.get(name)
            if app is None:
                if name in seen:
                    raise RayServeException(f"Application {name} was deleted while it was being deployed.")
                continue
            seen.add(name)
            status = app.get("status")
            if status == "DEPLOY_FAILED":
                raise RayServeException(f"Deploying application {name} failed: {app.get('message') or ''}")
            if status == "RUNNING":
                fresh = (name not in before
                         or app.get("last_deployed_time_s") != before[name].get("last_deployed_time_s"))
                if fresh or time.monotonic() - started >= SAME_DEPLOY_GRACE_S:
                    left.discard(name)
        if left:
            if deadline is not None and time.monotonic() > deadline:
                raise TimeoutError(f"Applications {sorted(left)} did not become RUNNING in time.")
            time.sleep(POLL_S)


def _put(targets: List[RunTarget]) -> Dict[str, Any]:
    """Checks every target, then sends each; returns the apps as they were before."""
    names = [t.name for t in targets]
    if len(set(names)) != len(names):
        raise RayServeException(f"Application names must be unique, got {names}.")
    bodies = {t.name: _build.application_body(t.target, t.name, t.route_prefix, dict(_http_options),
                                              external_scaler_enabled=t.external_scaler_enabled,
                                              proxy_location=_proxy_location)
              for t in targets}
    prefixes = [t.route_prefix for t in targets if t.route_prefix is not None]
    if len(set(prefixes)) != len(prefixes):
        raise RayServeException(f"Route prefixes must be unique across applications, got {prefixes}.")
    before = _controller_client.get_applications().get("applications") or {}
    for t in targets:
        for other, app in before.items():
            if other not in names and t.route_prefix is not None and app.get("route_prefix") == t.route_prefix:
                raise RayServeException(f'Prefix {t.route_prefix} is being used by application "{other}". '
                                        f'Failed to deploy application "{t.name}".')
    for name, body in bodies.items():
        _controller_client.put_application(name, body)
    return before


def _block() -> None:
    try:
        while True:
            time.sleep(10)
    except KeyboardInterrupt:
        logger.warning("Got KeyboardInterrupt, exiting...")
        sys.exit(1)


def run(target: Application, blocking: bool = False, name: str = "default", route_prefix: Optional[str] = "/",
        logging_config: Any = None, external_scaler_enabled: bool = False,
        _local_testing_mode: bool = False) -> DeploymentHandle:
    """Deploys (or updates in place) app `name` and waits until it is RUNNING; returns the
    handle of its ingress deployment."""
    if _local_testing_mode:
        raise NotImplementedError("_local_testing_mode is not supported by oxray.serve")
    ingress, _ = _build.walk(target)
    before = _put([RunTarget(target, name, route_prefix, logging_config, external_scaler_enabled)])
    _wait([name], before)
    handle = DeploymentHandle(ingress, name)
    if blocking:
        _block()
    return handle


def run_many(targets: List[RunTarget], blocking: bool = False, wait_for_ingress_deployment_creation: bool = True,
             wait_for_applications_running: bool = True, _local_testing_mode: bool = False) -> List[DeploymentHandle]:
    targets = [t if isinstance(t, RunTarget) else RunTarget(**t) for t in targets]
    before = _put(targets)
    if wait_for_applications_running:
        _wait([t.name for t in targets], before)
    handles = [DeploymentHandle(_build.walk(t.target)[0], t.name) for t in targets]
    if blocking:
        _block()
    return handles


def _wait_gone(names: Optional[List[str]]) -> None:
    while True:
        apps = _controller_client.get_applications().get("applications") or {}
        if not (set(apps) & set(names) if names is not None else apps):
            return
        time.sleep(POLL_S)


def delete(name: str, _blocking: bool = True) -> None:
    """Deletes app `name`; returns when it is gone."""
    try:
        _controller_client.delete_application(name)
    except _controller_client.ControllerError as e:
        if e.status != 404:
            raise
    if _blocking:
        _wait_gone([name])
    _router.forget_app(name)


def shutdown() -> None:
    """Deletes every app and stops Serve; returns when all are gone."""
    from oxray._private import worker

    if not worker.is_initialized():
        logger.info("Nothing to shut down: there is no connection to a cluster.")
        return
    try:
        apps = list((_controller_client.get_applications().get("applications") or {}))
    except _controller_client.ControllerError:
        return
    global _proxy_location
    _controller_client.shutdown_all()
    _wait_gone(None)
    _proxy_location = None  # the next Serve starts with the default, as the controller does
    for name in apps:
        _router.forget_app(name)


async def shutdown_async() -> None:
    import asyncio

    await asyncio.get_running_loop().run_in_executor(None, shutdown)


def status() -> ServeStatus:
    try:
        body = _controller_client.get_applications()
    except _controller_client.ControllerError as e:
        if e.status == 404:
            return ServeStatus()
        raise
    return status_from_controller(body)


def get_app_handle(name: str) -> DeploymentHandle:
    app = _controller_client.application(name)
    if app is None:
        raise RayServeException(f"Application '{name}' does not exist.")
    return DeploymentHandle(app["ingress"], name)


def get_deployment_handle(deployment_name: str, app_name: Optional[str] = None, _check_exists: bool = True,
                          _record_telemetry: bool = True) -> DeploymentHandle:
    replica = _context.current_replica()
    if app_name is None:
        if replica is None:
            raise RayServeException("Please specify an application name when getting a deployment handle "
                                    "outside of a replica.")
        return DeploymentHandle(deployment_name, replica.app_name)
    if _check_exists and replica is None:
        app = _controller_client.application(app_name)
        if app is None or deployment_name not in (app.get("deployments") or {}):
            raise KeyError(f"Deployment(name='{deployment_name}', app='{app_name}') does not exist.")
    return DeploymentHandle(deployment_name, app_name)
