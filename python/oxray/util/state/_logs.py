"""Ray's log API (`ray.util.state.list_logs`, `get_log`) over the head's `/api/v0/logs` routes,
which find a log by node and file, worker pid, actor, task or submitted job."""

from typing import Dict, Generator, List, Optional, Union

from oxray.util.state.api import StateApiClient
from oxray.util.state.common import DEFAULT_RPC_TIMEOUT
from oxray.util.state.exception import ServerUnavailable


def list_logs(address: Optional[str] = None, node_id: Optional[str] = None, node_ip: Optional[str] = None,
              glob_filter: Optional[str] = None, timeout: int = DEFAULT_RPC_TIMEOUT) -> Dict[str, List[str]]:
    """A node's log files by group (worker, gcs, raylet, ...)."""
    if node_id is None and node_ip is None:
        raise ValueError("At least one of node ip and node id is required")
    params = {"node_id": node_id, "node_ip": node_ip, "glob": glob_filter or "*", "timeout": timeout}
    return StateApiClient(address=address)._request("/api/v0/logs", params, timeout)


def get_log(address: Optional[str] = None, node_id: Optional[str] = None, node_ip: Optional[str] = None,
            filename: Optional[str] = None, actor_id: Optional[str] = None, task_id: Optional[str] = None,
            pid: Optional[int] = None, follow: bool = False, tail: int = -1, timeout: int = DEFAULT_RPC_TIMEOUT,
            suffix: str = "out", encoding: Optional[str] = "utf-8", errors: Optional[str] = "strict",
            submission_id: Optional[str] = None, attempt_number: int = 0, _interval: Optional[float] = None,
            filter_ansi_code: bool = False) -> Generator[Union[str, bytes], None, None]:
    """A log's content in chunks as the head sends them (until it ends, or, with `follow`,
    as it grows); bytes with `encoding=None`."""
    media_type = "stream" if follow else "file"
    params = {"node_id": node_id, "node_ip": node_ip, "filename": filename, "actor_id": actor_id,
              "task_id": task_id, "pid": pid, "lines": tail, "interval": _interval, "media_type": media_type,
              "timeout": timeout, "suffix": suffix, "submission_id": submission_id,
              "attempt_number": attempt_number, "filter_ansi_code": filter_ansi_code}
    client = StateApiClient(address=address)
    # A followed log may stay quiet for long: only the connection is bounded then.
    with client._open(f"/api/v0/logs/{media_type}", params, None if follow else timeout) as response:
        while True:
            try:
                chunk = response.read1(65536)
            except OSError as e:
                raise ServerUnavailable(f"the log stream from {client.get_address()} broke: {e}") from None
            if not chunk:
                return
            yield chunk.decode(encoding, errors) if encoding is not None else chunk
