"""Meeting points of a worker group, outside torch's own collectives."""

from typing import Any

from oxray.train import _session


def barrier() -> None:
    """Returns once every worker of the group has called it."""
    _session.current().broadcast(None)


def broadcast_from_rank_zero(data: Any) -> Any:
    """Rank 0's `data` on every worker (a small, picklable value)."""
    return _session.current().broadcast(data)
