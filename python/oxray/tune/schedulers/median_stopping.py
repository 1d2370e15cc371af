"""Median stopping: after `grace_period`, a trial whose best score so far is worse than
the median of the other trials' running means (over the same window of time) stops."""

import math
import statistics
from typing import Dict, List, Optional

from oxray.tune.schedulers.trial_scheduler import TrialScheduler, score


class MedianStoppingRule(TrialScheduler):
    def __init__(self, time_attr: str = "time_total_s", metric: Optional[str] = None, mode: Optional[str] = None,
                 grace_period: float = 60.0, min_samples_required: int = 3, min_time_slice: float = 0,
                 hard_stop: bool = True):
        super().__init__(metric, mode)
        self.time_attr, self.grace_period = time_attr, grace_period
        self.min_samples_required, self.min_time_slice, self.hard_stop = min_samples_required, min_time_slice, hard_stop
        self.results: Dict[str, List[tuple]] = {}  # trial id -> [(time, signed score)]
        self.stopped: set = set()

    def on_trial_add(self, tune_controller, trial) -> None:
        self._require_metric()

    def _running_mean(self, trial_id: str, t: float) -> float:
        window = [s for time, s in self.results[trial_id] if self.grace_period <= time <= t]
        return statistics.fmean(window) if window else math.nan

    def on_trial_result(self, tune_controller, trial, result: Dict) -> str:
        trial_id = getattr(trial, "trial_id", trial)
        value, t = score(result, self._metric, self._mode), result.get(self.time_attr)
        if value is None or t is None or trial_id in self.stopped:
            return TrialScheduler.CONTINUE
        self.results.setdefault(trial_id, []).append((t, value))
        if t < self.grace_period:
            return TrialScheduler.CONTINUE
        # Compared only with trials that got at least as far.
        others = [o for o, rs in self.results.items() if o != trial_id and rs and rs[-1][0] >= t]
        means = [m for m in (self._running_mean(o, t) for o in others) if math.isfinite(m)]
        if len(means) < self.min_samples_required:
            return TrialScheduler.CONTINUE
        best = max(s for _, s in self.results[trial_id])
        if best < statistics.median(means):
            self.stopped.add(trial_id)
            return TrialScheduler.STOP if self.hard_stop else TrialScheduler.PAUSE
        return TrialScheduler.CONTINUE
