import json
import os
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, AsyncIterator, Dict, List, Optional, Union

from oxray.job_submission._models import JobDetails, JobStatus
from oxray._private.tls import ssl_context
from oxray.job_submission._package import pack_dir


def _oxray_home() -> Path:
    return Path(os.environ.get("OXRAY_HOME") or Path.home() / ".oxray")


def _resolve_address(address: Optional[str]) -> str:
    """An explicit address, then the job's own cluster, then the cluster started here."""
    candidates = [address, os.environ.get("OXRAY_DASHBOARD_URL"), os.environ.get("RAY_ADDRESS")]
    for candidate in candidates:
        if candidate and candidate != "auto":
            if "://" not in candidate:
                candidate = "http://" + candidate
            return candidate.rstrip("/")
    current = _oxray_home() / "current_cluster.json"
    if current.is_file():
        url = json.loads(current.read_text()).get("dashboard_url")
        if url:
            return url.rstrip("/")
    raise ConnectionError(
        "No cluster address: pass address='http://HEAD:8265', set OXRAY_DASHBOARD_URL, "
        "or start a cluster on this machine with `oxray start --head`."
    )


def _resolve_token(address: str) -> Optional[str]:
    token = os.environ.get("OXRAY_AUTH_TOKEN")
    if token:
        return token.strip()
    from oxray import _native

    token = _native.private_cluster_token(address)  # a cluster a script here started
    if token:
        return token
    path = _oxray_home() / "auth_token"
    return path.read_text().strip() if path.is_file() else None


class JobSubmissionClient:
    """Submits and manages jobs through a cluster's Jobs REST API, as Ray's client of the
    same name does."""

    def __init__(
        self,
        address: Optional[str] = None,
        create_cluster_if_needed: bool = False,
        cookies: Optional[Dict[str, Any]] = None,
        metadata: Optional[Dict[str, Any]] = None,
        headers: Optional[Dict[str, Any]] = None,
        verify: Optional[Union[str, bool]] = True,
    ):
        self._address = _resolve_address(address)
        self._headers = dict(headers or {})
        if not any(k.lower() == "authorization" for k in self._headers):
            token = _resolve_token(self._address)
            if token:
                self._headers["Authorization"] = f"Bearer {token}"
        if cookies:
            self._headers["Cookie"] = "; ".join(f"{k}={v}" for k, v in cookies.items())
        self._default_metadata = dict(metadata or {})
        self._verify = verify
        self._ssl = ssl_context(verify)
        version = self._request("GET", "/api/version")
        if int(version.get("version", 0)) < 1:
            raise RuntimeError(f"The cluster at {self._address} does not serve the Jobs API.")

    def get_address(self) -> str:
        return self._address

    def _request(self, method: str, path: str, body: Any = None, raw: bytes = None, parse: bool = True) -> Any:
        data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
        headers = dict(self._headers)
        if body is not None:
            headers["Content-Type"] = "application/json"
        request = urllib.request.Request(self._address + path, data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=60, context=self._ssl) as response:
                text = response.read()
        except urllib.error.HTTPError as e:
            detail = e.read().decode(errors="replace")
            raise RuntimeError(f"Request failed with status code {e.code}: {detail}.") from None
        except urllib.error.URLError as e:
            raise ConnectionError(f"Failed to connect to the cluster at address: {self._address}: {e.reason}") from None
        return json.loads(text) if text and parse else None

    def _upload(self, name: str, data: bytes) -> str:
        try:
            self._request("GET", f"/api/packages/gcs/{name}", parse=False)
        except RuntimeError as e:
            if "status code 404" not in str(e):
                raise
            self._request("PUT", f"/api/packages/gcs/{name}", raw=data, parse=False)
        return f"gcs://{name}"

    def _upload_local(self, runtime_env: Dict[str, Any]) -> Dict[str, Any]:
        env = dict(runtime_env)
        excludes = env.get("excludes") or []
        working_dir = env.get("working_dir")
        if working_dir and "://" not in working_dir:
            env["working_dir"] = self._upload(*pack_dir(working_dir, None, excludes))
        modules = []
        for module in env.get("py_modules") or []:
            if "://" in module:
                modules.append(module)
            elif module.endswith(".whl"):
                modules.append(self._upload(Path(module).name, Path(module).read_bytes()))
            else:
                modules.append(self._upload(*pack_dir(module, Path(module).resolve().name, excludes)))
        if "py_modules" in env:
            env["py_modules"] = modules
        pip = env.get("pip")
        if isinstance(pip, str) and Path(pip).is_file():
            lines = [l.strip() for l in Path(pip).read_text().splitlines()]
            env["pip"] = [l for l in lines if l and not l.startswith("#")]
        return env

    def submit_job(
        self,
        *,
        entrypoint: str,
        job_id: Optional[str] = None,
        runtime_env: Optional[Dict[str, Any]] = None,
        metadata: Optional[Dict[str, str]] = None,
        submission_id: Optional[str] = None,
        entrypoint_num_cpus: Optional[Union[int, float]] = None,
        entrypoint_num_gpus: Optional[Union[int, float]] = None,
        entrypoint_memory: Optional[int] = None,
        entrypoint_resources: Optional[Dict[str, float]] = None,
    ) -> str:
        body = {
            "entrypoint": entrypoint,
            "submission_id": submission_id or job_id,
            "runtime_env": self._upload_local(runtime_env or {}),
            "metadata": {**self._default_metadata, **(metadata or {})},
            "entrypoint_num_cpus": entrypoint_num_cpus,
            "entrypoint_num_gpus": entrypoint_num_gpus,
            "entrypoint_memory": entrypoint_memory,
            "entrypoint_resources": entrypoint_resources,
        }
        body = {k: v for k, v in body.items() if v is not None}
        return self._request("POST", "/api/jobs/", body)["submission_id"]

    def stop_job(self, job_id: str) -> bool:
        return self._request("POST", f"/api/jobs/{job_id}/stop")["stopped"]

    def delete_job(self, job_id: str) -> bool:
        return self._request("DELETE", f"/api/jobs/{job_id}")["deleted"]

    def get_job_info(self, job_id: str) -> JobDetails:
        return JobDetails.from_json(self._request("GET", f"/api/jobs/{job_id}"))

    def list_jobs(self) -> List[JobDetails]:
        return [JobDetails.from_json(j) for j in self._request("GET", "/api/jobs/")]

    def get_job_status(self, job_id: str) -> JobStatus:
        return self.get_job_info(job_id).status

    def get_job_logs(self, job_id: str) -> str:
        return self._request("GET", f"/api/jobs/{job_id}/logs")["logs"]

    async def tail_job_logs(self, job_id: str) -> AsyncIterator[str]:
        """Yields the job's log in chunks as it is written, from the beginning, until the
        job ends."""
        import websockets

        self.get_job_info(job_id)  # a clear error for an unknown job, before the upgrade
        url = "ws" + self._address[len("http"):] + f"/api/jobs/{job_id}/logs/tail"
        # websockets 14 renamed the argument that carries the headers.
        modern = int(websockets.__version__.split(".")[0]) >= 14
        options = {"additional_headers" if modern else "extra_headers": self._headers}
        if url.startswith("wss://") and self._ssl is not None:
            options["ssl"] = self._ssl
        async with websockets.connect(url, max_size=None, **options) as socket:
            async for message in socket:
                if isinstance(message, str):
                    yield message
