"""`UserCallback`: hooks the run's controller calls in the driver's process, where an
experiment tracker can see every report (Train V2 keeps only those with a checkpoint)."""

from typing import Any, Dict, List, Optional

from oxray.train._checkpoint import Checkpoint


class UserCallback:
    def after_report(self, run_context: Any, metrics: List[Dict[str, Any]], checkpoint: Optional[Checkpoint]) -> None:
        """A round of reports was joined: every rank's metrics, in rank order, and the
        checkpoint committed with them."""

    def after_exception(self, run_context: Any, worker_exceptions: Dict[int, BaseException]) -> None:
        """The worker group failed (before the run decides whether to start it again):
        rank to exception."""
