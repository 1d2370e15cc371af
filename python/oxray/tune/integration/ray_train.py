"""`TuneReportCallback`: a Train run started inside a Tune trial (the Train V2 pattern,
`TorchTrainer(...).fit()` in a function trainable) hands each of its committed reports to
Tune as one result of the trial: rank 0's metrics plus `checkpoint_path`, where Train
stored the round's checkpoint (None when it had none).

The checkpoint stays in the Train run's storage: a retried trial resumes the Train run
because its `RunConfig(storage_path, name)` is the same, not through a Tune checkpoint."""

from typing import Any, Dict, List, Optional


class TuneReportCallback:
    """Give it to the trainer's `RunConfig(callbacks=[...])` inside a trial. `metrics`, when
    set, keeps only those keys (a list) or renames them (a dict of Tune name -> Train name)."""

    def __init__(self, metrics: Optional[Any] = None):
        if metrics is not None and not isinstance(metrics, (str, list, tuple, dict)):
            raise TypeError(f"TuneReportCallback(metrics=...) takes a name, a list or a dict, "
                            f"got {type(metrics).__name__}")
        self.metrics = [metrics] if isinstance(metrics, str) else metrics

    def _select(self, reported: Dict[str, Any]) -> Dict[str, Any]:
        if self.metrics is None:
            return dict(reported)
        if isinstance(self.metrics, dict):
            return {tune_name: reported[train_name] for tune_name, train_name in self.metrics.items()
                    if train_name in reported}
        return {name: reported[name] for name in self.metrics if name in reported}

    def after_report(self, run_context=None, metrics: Optional[List[Dict[str, Any]]] = None, checkpoint=None) -> None:
        from oxray.tune import _session

        session = _session.current()  # outside a trial this says so: the callback is for Tune
        rank_zero = (metrics or [{}])[0]
        result = self._select(rank_zero)
        result["checkpoint_path"] = checkpoint.path if checkpoint is not None else None
        session.report(result)
