"""What `serve.status()` returns, and the status names, as Ray Serve's (exact strings)."""

import dataclasses
import enum
from typing import Any, Dict, Optional

from oxray.serve.config import LoggingConfig

__all__ = ["ApplicationStatus", "ApplicationStatusOverview", "DeploymentStatus", "DeploymentStatusOverview",
           "DeploymentStatusTrigger", "LoggingConfig", "ProxyStatus", "ReplicaState", "ServeStatus"]


class ApplicationStatus(str, enum.Enum):
    NOT_STARTED = "NOT_STARTED"
    DEPLOYING = "DEPLOYING"
    DEPLOY_FAILED = "DEPLOY_FAILED"
    RUNNING = "RUNNING"
    UNHEALTHY = "UNHEALTHY"
    DELETING = "DELETING"


class DeploymentStatus(str, enum.Enum):
    UPDATING = "UPDATING"
    HEALTHY = "HEALTHY"
    UNHEALTHY = "UNHEALTHY"
    DEPLOY_FAILED = "DEPLOY_FAILED"
    UPSCALING = "UPSCALING"
    DOWNSCALING = "DOWNSCALING"


class DeploymentStatusTrigger(str, enum.Enum):
    UNSPECIFIED = "UNSPECIFIED"
    CONFIG_UPDATE_STARTED = "CONFIG_UPDATE_STARTED"
    CONFIG_UPDATE_COMPLETED = "CONFIG_UPDATE_COMPLETED"
    UPSCALE_COMPLETED = "UPSCALE_COMPLETED"
    DOWNSCALE_COMPLETED = "DOWNSCALE_COMPLETED"
    AUTOSCALING = "AUTOSCALING"
    REPLICA_STARTUP_FAILED = "REPLICA_STARTUP_FAILED"
    HEALTH_CHECK_FAILED = "HEALTH_CHECK_FAILED"
    INTERNAL_ERROR = "INTERNAL_ERROR"
    DELETING = "DELETING"


class ReplicaState(str, enum.Enum):
    STARTING = "STARTING"
    UPDATING = "UPDATING"
    RECOVERING = "RECOVERING"
    RUNNING = "RUNNING"
    STOPPING = "STOPPING"
    STOPPED = "STOPPED"


class ProxyStatus(str, enum.Enum):
    STARTING = "STARTING"
    HEALTHY = "HEALTHY"
    UNHEALTHY = "UNHEALTHY"
    DRAINING = "DRAINING"
    DRAINED = "DRAINED"


def _enum(cls, value, default):
    try:
        return cls(value)
    except ValueError:  # a newer controller's name: keep the text rather than fail the call
        return value if value else default


@dataclasses.dataclass
class DeploymentStatusOverview:
    status: DeploymentStatus
    status_trigger: DeploymentStatusTrigger
    replica_states: Dict[ReplicaState, int]
    message: str = ""


@dataclasses.dataclass
class ApplicationStatusOverview:
    status: ApplicationStatus
    message: str
    last_deployed_time_s: float
    deployments: Dict[str, DeploymentStatusOverview]


@dataclasses.dataclass
class ServeStatus:
    proxies: Dict[str, ProxyStatus] = dataclasses.field(default_factory=dict)
    applications: Dict[str, ApplicationStatusOverview] = dataclasses.field(default_factory=dict)
    target_capacity: Optional[float] = None


def status_from_controller(body: Dict[str, Any]) -> ServeStatus:
    """ServeStatus from the controller's GET of the applications (contract shape)."""
    applications = {}
    for name, app in (body.get("applications") or {}).items():
        deployments = {}
        for dep_name, dep in (app.get("deployments") or {}).items():
            states: Dict[Any, int] = {}
            for replica in dep.get("replicas") or []:
                state = _enum(ReplicaState, replica.get("state"), ReplicaState.STARTING)
                states[state] = states.get(state, 0) + 1
            deployments[dep_name] = DeploymentStatusOverview(
                status=_enum(DeploymentStatus, dep.get("status"), DeploymentStatus.UPDATING),
                status_trigger=_enum(DeploymentStatusTrigger, dep.get("status_trigger"),
                                     DeploymentStatusTrigger.UNSPECIFIED),
                replica_states=states, message=dep.get("message") or "")
        applications[name] = ApplicationStatusOverview(
            status=_enum(ApplicationStatus, app.get("status"), ApplicationStatus.NOT_STARTED),
            message=app.get("message") or "", last_deployed_time_s=float(app.get("last_deployed_time_s") or 0.0),
            deployments=deployments)
    proxies = {node: _enum(ProxyStatus, status, ProxyStatus.HEALTHY)
               for node, status in (body.get("proxies") or {}).items()}
    return ServeStatus(proxies=proxies, applications=applications, target_capacity=body.get("target_capacity"))
