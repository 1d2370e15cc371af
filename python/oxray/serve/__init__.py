"""`oxray.serve`: Ray Serve's API. The controller and the HTTP proxy run in the head
process; replicas are actors running `oxray.serve._replica.Replica`; handles route from the
process that calls them."""

from oxray.serve._api import (
    RunTarget,
    delete,
    get_app_handle,
    get_deployment_handle,
    run,
    run_many,
    shutdown,
    shutdown_async,
    start,
    status,
)
from oxray.serve._batch import batch
from oxray.serve._context import get_replica_context
from oxray.serve._deployment import Application, Deployment, deployment
from oxray.serve._ingress import ingress
from oxray.serve._multiplex import get_multiplexed_model_id, multiplexed
from oxray.serve.config import AutoscalingConfig, HTTPOptions, ProxyLocation, gRPCOptions
from oxray.serve.handle import DeploymentHandle, DeploymentResponse, DeploymentResponseGenerator

__all__ = [
    "Application",
    "AutoscalingConfig",
    "Deployment",
    "DeploymentHandle",
    "DeploymentResponse",
    "DeploymentResponseGenerator",
    "HTTPOptions",
    "ProxyLocation",
    "RunTarget",
    "batch",
    "delete",
    "deployment",
    "gRPCOptions",
    "get_app_handle",
    "get_deployment_handle",
    "get_multiplexed_model_id",
    "get_replica_context",
    "ingress",
    "multiplexed",
    "run",
    "run_many",
    "shutdown",
    "shutdown_async",
    "start",
    "status",
]
