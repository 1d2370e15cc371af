"""Serve's errors, with Ray Serve's names."""

from oxray.exceptions import RayError


class RayServeException(Exception):
    pass


class BackPressureError(RayServeException):
    """A caller's queue for a deployment is full (`max_queued_requests`)."""

    def __init__(self, *, num_queued_requests: int = 0, max_queued_requests: int = 0):
        self.num_queued_requests = num_queued_requests
        self.max_queued_requests = max_queued_requests
        super().__init__(num_queued_requests, max_queued_requests)

    def __str__(self):
        return (f"Request dropped due to backpressure (num_queued_requests={self.num_queued_requests}, "
                f"max_queued_requests={self.max_queued_requests}).")

    def __reduce__(self):
        return (_back_pressure, (self.num_queued_requests, self.max_queued_requests))


def _back_pressure(queued, limit):
    return BackPressureError(num_queued_requests=queued, max_queued_requests=limit)


class DeploymentUnavailableError(RayServeException):
    """The deployment a request is for cannot take it (failed to deploy, or deleted)."""

    def __init__(self, deployment_id=None, message: str = None):
        self.deployment_id = deployment_id
        super().__init__(message or f"{deployment_id} is unavailable because it failed to deploy or was deleted.")

    def __reduce__(self):
        return (DeploymentUnavailableError, (self.deployment_id, str(self)))


class RequestCancelledError(RayServeException, RayError):
    """The request was cancelled (`DeploymentResponse.cancel()`, or its HTTP client left)."""

    def __init__(self, request_id: str = None):
        self.request_id = request_id
        super().__init__(f"Request {request_id} was cancelled.")

    def __reduce__(self):
        return (RequestCancelledError, (self.request_id,))
