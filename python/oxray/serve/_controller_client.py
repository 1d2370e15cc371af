"""The Serve controller's HTTP API on the head's dashboard port, with the cluster token."""

import json
import urllib.error
import urllib.parse
import urllib.request
from typing import Any, Dict, Optional

from oxray._private.tls import ssl_context
from oxray.serve.exceptions import RayServeException

APPS_PATH = "/api/oxray/serve/applications"
SHUTDOWN_PATH = "/api/serve/applications/"
QUEUED_PATH = "/api/oxray/serve/queued"
HTTP_PATH = "/api/oxray/serve/http"


class ControllerError(RayServeException):
    def __init__(self, status: int, message: str):
        self.status = status
        super().__init__(message)


def _endpoint(connect: bool):
    from oxray._private import worker

    if not connect and worker.was_shut_down():
        # A background refresh must not connect a process that shut down.
        raise RayServeException("this process is not connected to a cluster")
    client = worker.client()
    return client.dashboard_url.rstrip("/"), client.token


def request(method: str, path: str, body: Any = None, timeout: float = 30.0, connect: bool = True) -> Dict[str, Any]:
    base, token = _endpoint(connect)
    data = json.dumps(body).encode() if body is not None else None
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    if data is not None:
        headers["Content-Type"] = "application/json"
    req = urllib.request.Request(base + path, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=timeout, context=ssl_context()) as response:
            text = response.read()
    except urllib.error.HTTPError as e:
        detail = e.read().decode(errors="replace")
        try:
            detail = json.loads(detail).get("error", detail)
        except (ValueError, AttributeError):
            pass
        raise ControllerError(e.code, f"Serve controller answered {e.code} to {method} {path}: {detail}") from None
    except urllib.error.URLError as e:
        raise ConnectionError(f"Cannot reach the Serve controller at {base}: {e.reason}") from None
    return json.loads(text) if text else {}


def report_queued(process: str, queued) -> None:
    """What this process's handles hold waiting: (app, deployment, count) triples; the
    autoscaler counts them as load."""
    request("POST", QUEUED_PATH, {"process": process, "queued": [list(q) for q in queued]}, timeout=5.0,
            connect=False)


def start_http(http_options: Dict[str, Any], proxy_location: Optional[str]) -> Dict[str, Any]:
    """Starts Serve's proxies; answers the HTTP options in force."""
    body = {"http_options": http_options, "proxy_location": proxy_location}
    return request("PUT", HTTP_PATH, body)["http_options"]


def app_path(name: str) -> str:
    return f"{APPS_PATH}/{urllib.parse.quote(name, safe='')}"


def get_applications(connect: bool = True) -> Dict[str, Any]:
    """The controller's view: {"applications": {...}, "http": {...} | None}."""
    return request("GET", APPS_PATH, connect=connect)


def put_application(name: str, body: Dict[str, Any]) -> None:
    request("PUT", app_path(name), body)


def delete_application(name: str) -> None:
    request("DELETE", app_path(name))


def shutdown_all() -> None:
    request("DELETE", SHUTDOWN_PATH)


def application(name: str) -> Optional[Dict[str, Any]]:
    return (get_applications().get("applications") or {}).get(name)
