"""`Result` (one trial: its last metrics, config, checkpoints, error, directory) and
`ResultGrid` (all of them, with `get_best_result` and `get_dataframe`)."""

import dataclasses
import json
import math
import os
import re
import statistics
from typing import Any, Dict, List, Optional

from oxray.train._checkpoint import Checkpoint
from oxray.train._result import Result as TrainResult
from oxray.tune._errors import TuneError
from oxray.tune._metrics import finite, flatten, is_number


@dataclasses.dataclass
class Result(TrainResult):
    config: Optional[Dict[str, Any]] = None

    @property
    def metrics_dataframe(self):
        import pandas

        return pandas.DataFrame([flatten(m, keep_config=False) for m in self._reports])

    @classmethod
    def from_path(cls, path: str, storage_filesystem: Any = None) -> "Result":
        """A trial's result from its directory: a local one, or one on a URI or a pyarrow
        filesystem (its experiment's files are read through a staging copy)."""
        from oxray.train._storage import resolve
        from oxray.tune._experiment import Experiment

        filesystem, inner = resolve(path.rstrip("/"), storage_filesystem)
        if filesystem is None:
            return load_trial(inner)
        experiment_path, _, trial = inner.rpartition("/")
        parent, _, name = experiment_path.rpartition("/")
        experiment = Experiment(parent, name, filesystem)
        try:
            experiment.download()
            return load_trial(experiment.path(trial), experiment=experiment)
        finally:
            experiment.close()


def read_reports(trial_dir: str) -> List[Dict[str, Any]]:
    try:
        with open(os.path.join(trial_dir, "result.json"), encoding="utf-8") as f:
            return [json.loads(line) for line in f if line.strip()]
    except FileNotFoundError:
        return []


def load_trial(trial_dir: str, error: Optional[BaseException] = None, config: Optional[Dict] = None,
               done: bool = False, experiment=None) -> Result:
    """A trial's result from its files in `trial_dir`; with `experiment`, the trial's
    checkpoints and path are those in the experiment's storage."""
    reports = read_reports(trial_dir)
    if config is None:
        try:
            with open(os.path.join(trial_dir, "params.json"), encoding="utf-8") as f:
                config = json.load(f)
        except FileNotFoundError:
            config = {}
    by_name = {r.get("checkpoint_dir_name"): r for r in reports if r.get("checkpoint_dir_name")}
    if experiment is not None:
        filesystem, path = experiment.trial_storage(trial_dir)
        best = [(experiment.checkpoint(trial_dir, d), by_name.get(d, {}))
                for d in experiment.checkpoint_names(trial_dir)]
    else:
        filesystem, path = None, trial_dir
        kept = sorted(d for d in os.listdir(trial_dir) if re.fullmatch(r"checkpoint_\d{6}", d)) \
            if os.path.isdir(trial_dir) else []
        best = [(Checkpoint(os.path.join(trial_dir, d)), by_name.get(d, {})) for d in kept]
    metrics = dict(reports[-1]) if reports else {}
    if metrics and done:
        metrics["done"] = True
    return Result(metrics=metrics, checkpoint=best[-1][0] if best else None, path=path, filesystem=filesystem,
                  error=error, best_checkpoints=best, _reports=reports, config=config)


def _trial_score(result: Result, metric: str, scope: str) -> Optional[float]:
    values = [flatten(r).get(metric) for r in result._reports] or [flatten(result.metrics or {}).get(metric)]
    values = [v for v in values if is_number(v)]
    if not values:
        return None
    if scope == "last":
        return values[-1]
    if scope in ("avg", "last-5-avg", "last-10-avg"):
        window = {"avg": len(values), "last-5-avg": 5, "last-10-avg": 10}[scope]
        return statistics.fmean(values[-window:])
    return None  # "all" is decided per mode by the caller


SCOPES = ("all", "last", "avg", "last-5-avg", "last-10-avg")


class ResultGrid:
    def __init__(self, results: List[Result], experiment_path: str, metric: Optional[str] = None,
                 mode: Optional[str] = None):
        self._results, self.experiment_path = results, experiment_path
        self._metric, self._mode = metric, mode

    def __len__(self):
        return len(self._results)

    def __getitem__(self, i) -> Result:
        return self._results[i]

    def __iter__(self):
        return iter(self._results)

    @property
    def errors(self) -> List[BaseException]:
        return [r.error for r in self._results if r.error is not None]

    @property
    def num_errors(self) -> int:
        return len(self.errors)

    @property
    def num_terminated(self) -> int:
        return sum(1 for r in self._results if r.error is None and (r.metrics or {}).get("done"))

    def get_best_result(self, metric: Optional[str] = None, mode: Optional[str] = None, scope: str = "last",
                        filter_nan_and_inf: bool = True) -> Result:
        if len(self._results) == 1:
            return self._results[0]
        metric, mode = metric or self._metric, mode or self._mode
        if not metric or not mode:
            raise ValueError("get_best_result needs a metric and a mode: pass them here or to TuneConfig")
        if mode not in ("min", "max"):
            raise ValueError(f"get_best_result(mode={mode!r}): 'min' or 'max'")
        if scope not in SCOPES:
            raise ValueError(f"get_best_result(scope={scope!r}): one of {SCOPES}")
        best, best_value = None, None
        for result in self._results:
            if scope == "all":
                values = [v for v in (flatten(r).get(metric) for r in result._reports) if is_number(v)]
                if filter_nan_and_inf:
                    values = [v for v in values if math.isfinite(v)]
                value = (max if mode == "max" else min)(values) if values else None
            else:
                value = _trial_score(result, metric, scope)
            if value is None or (filter_nan_and_inf and not finite(value)):
                continue
            if best is None or (value > best_value if mode == "max" else value < best_value):
                best, best_value = result, value
        if best is None:
            raise TuneError(f"no best trial for metric {metric!r}: no trial reported it (or every value was NaN or "
                            "inf); the metrics reported were "
                            f"{sorted(set(k for r in self._results for k in flatten(r.metrics or {})))}")
        return best

    def get_dataframe(self, filter_metric: Optional[str] = None, filter_mode: Optional[str] = None):
        """One row per trial: its last result (or, with `filter_metric`, its best by that
        metric and `filter_mode`), with `config/...` columns and `logdir`."""
        import pandas

        if bool(filter_metric) != bool(filter_mode):
            raise ValueError("get_dataframe: give filter_metric and filter_mode together")
        rows = []
        for result in self._results:
            row = result.metrics or {}
            if filter_metric:
                scored = [r for r in result._reports if is_number(flatten(r).get(filter_metric))]
                if scored:
                    pick = max if filter_mode == "max" else min
                    row = pick(scored, key=lambda r: flatten(r)[filter_metric])
            flat = flatten(row)
            flat["logdir"] = result.path
            rows.append(flat)
        return pandas.DataFrame(rows)

    def __repr__(self):
        return f"ResultGrid<{len(self)} results, {self.num_errors} errors, at {self.experiment_path}>"
