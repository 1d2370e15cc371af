"""The errors a training run ends with, with Ray Train's names."""

from typing import Dict


class TrainingFailedError(RuntimeError):
    """`fit()` raises this when the run cannot go on."""


class WorkerGroupError(TrainingFailedError):
    """Workers failed: their exceptions (with the remote traceback in the message), deaths
    of their processes or nodes. `worker_failures`: rank to exception."""

    def __init__(self, message: str, worker_failures: Dict[int, BaseException]):
        super().__init__(message)
        self.worker_failures = worker_failures

    def __reduce__(self):
        return type(self), (self.args[0], self.worker_failures)


class ControllerError(TrainingFailedError):
    """The run could not be driven: its workers cannot be placed, its storage is broken."""


class InsufficientClusterResourcesError(ControllerError):
    """The worker group asks for more than the whole cluster has."""


class WorkerHealthCheckFailedError(RuntimeError):
    """A worker's process or node is gone."""


class WorkerHealthCheckTimeoutError(RuntimeError):
    """A worker did not answer for longer than the health check allows."""
