"""The errors of Ray's state API (`ray.util.state.exception`)."""


class RayStateApiException(Exception):
    """The cluster refused or failed a state request; the message says why."""


class ServerUnavailable(RayStateApiException):
    """No answer from the cluster's API (dashboard) port."""
