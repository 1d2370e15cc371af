from dataclasses import dataclass, fields
from enum import Enum
from typing import Any, Dict, Optional


class JobStatus(str, Enum):
    """The life of a job: PENDING, then RUNNING, then one of the three terminal states."""

    PENDING = "PENDING"
    RUNNING = "RUNNING"
    STOPPED = "STOPPED"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"

    def __str__(self) -> str:
        return self.value

    def is_terminal(self) -> bool:
        return self in (JobStatus.STOPPED, JobStatus.SUCCEEDED, JobStatus.FAILED)


class JobType(str, Enum):
    SUBMISSION = "SUBMISSION"
    DRIVER = "DRIVER"


@dataclass
class DriverInfo:
    id: str
    node_ip_address: str
    pid: str


@dataclass
class JobDetails:
    """What the cluster knows of one job; times are milliseconds since the epoch."""

    type: JobType
    entrypoint: str
    status: JobStatus
    job_id: Optional[str] = None
    submission_id: Optional[str] = None
    driver_info: Optional[DriverInfo] = None
    message: Optional[str] = None
    error_type: Optional[str] = None
    start_time: Optional[int] = None
    end_time: Optional[int] = None
    metadata: Optional[Dict[str, str]] = None
    runtime_env: Optional[Dict[str, Any]] = None
    driver_agent_http_address: Optional[str] = None
    driver_node_id: Optional[str] = None
    driver_exit_code: Optional[int] = None

    @classmethod
    def from_json(cls, data: Dict[str, Any]) -> "JobDetails":
        known = {f.name for f in fields(cls)}
        values = {k: v for k, v in data.items() if k in known}
        values["type"] = JobType(values["type"])
        values["status"] = JobStatus(values["status"])
        if values.get("driver_info"):
            values["driver_info"] = DriverInfo(**values["driver_info"])
        return cls(**values)


# Ray's older name for the same record.
JobInfo = JobDetails
