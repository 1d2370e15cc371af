"""Asynchronous successive halving: rungs at `grace_period * reduction_factor**k` (below
`max_t`); a trial reaching a rung goes on only if its score is at least the
`1 - 1/reduction_factor` quantile of the scores other trials had there."""

import math
from typing import Dict, List, Optional

from oxray.tune.schedulers.trial_scheduler import TrialScheduler, score


def quantile(values: List[float], q: float) -> Optional[float]:
    """Linear-interpolated quantile (q in [0, 1]) of the finite-or-inf values, NaN ignored."""
    kept = sorted(v for v in values if not math.isnan(v))
    if not kept:
        return None
    position = q * (len(kept) - 1)
    low = math.floor(position)
    high = min(low + 1, len(kept) - 1)
    if kept[low] == kept[high]:
        return kept[low]
    return kept[low] + (kept[high] - kept[low]) * (position - low)


class Bracket:
    def __init__(self, min_t: float, max_t: float, reduction_factor: float, shift: int, stop_last_trials: bool):
        self.rf, self.max_t, self.stop_last_trials = reduction_factor, max_t, stop_last_trials
        milestones = []
        k = shift
        while min_t * reduction_factor ** k < max_t:
            milestones.append(min_t * reduction_factor ** k)
            k += 1
        # Highest rung first: a trial is judged at the highest rung it reached but was not judged at.
        self.rungs = [(m, {}) for m in sorted(milestones, reverse=True)]

    def decide(self, trial_id: str, t: float, value: float) -> str:
        if t >= self.max_t and self.stop_last_trials:
            return TrialScheduler.STOP
        for milestone, recorded in self.rungs:
            if t < milestone or trial_id in recorded:
                continue
            cutoff = quantile(list(recorded.values()), 1 - 1 / self.rf)
            recorded[trial_id] = value
            if cutoff is not None and value < cutoff:
                return TrialScheduler.STOP
            break
        return TrialScheduler.CONTINUE


class AsyncHyperBandScheduler(TrialScheduler):
    def __init__(self, time_attr: str = "training_iteration", metric: Optional[str] = None,
                 mode: Optional[str] = None, max_t: float = 100, grace_period: float = 1,
                 reduction_factor: float = 4, brackets: int = 1, stop_last_trials: bool = True):
        super().__init__(metric, mode)
        if grace_period <= 0 or max_t <= 0 or grace_period > max_t:
            raise ValueError(f"ASHA needs 0 < grace_period <= max_t, got grace_period={grace_period}, max_t={max_t}")
        if reduction_factor <= 1:
            raise ValueError(f"ASHA needs reduction_factor > 1, got {reduction_factor}")
        if not isinstance(brackets, int) or brackets < 1:
            raise ValueError(f"ASHA needs brackets >= 1, got {brackets!r}")
        self.time_attr, self.max_t, self.grace_period = time_attr, max_t, grace_period
        self.reduction_factor, self.stop_last_trials = reduction_factor, stop_last_trials
        self.brackets = [Bracket(grace_period, max_t, reduction_factor, s, stop_last_trials) for s in range(brackets)]
        self.trial_bracket: Dict[str, int] = {}
        self.counts = [0] * brackets

    def on_trial_add(self, tune_controller, trial) -> None:
        self._require_metric()
        # Weighted like Ray Tune's (more trials to brackets with more rungs), but deterministic:
        # the bracket furthest below its share gets the trial.
        weights = [len(b.rungs) + 1 for b in self.brackets]
        total = sum(weights)
        placed = sum(self.counts) + 1
        pick = max(range(len(weights)), key=lambda i: weights[i] / total * placed - self.counts[i])
        self.counts[pick] += 1
        self.trial_bracket[_id(trial)] = pick

    def on_trial_result(self, tune_controller, trial, result: Dict) -> str:
        if _id(trial) not in self.trial_bracket:
            self.on_trial_add(tune_controller, trial)
        value = score(result, self._metric, self._mode)
        t = result.get(self.time_attr)
        if value is None or t is None:
            return TrialScheduler.CONTINUE
        return self.brackets[self.trial_bracket[_id(trial)]].decide(_id(trial), t, value)

    def on_trial_complete(self, tune_controller, trial, result: Dict) -> None:
        value = score(result or {}, self._metric, self._mode)
        t = (result or {}).get(self.time_attr)
        if value is not None and t is not None and _id(trial) in self.trial_bracket:
            self.brackets[self.trial_bracket[_id(trial)]].decide(_id(trial), t, value)

    def rung_scores(self, bracket: int = 0) -> Dict[float, Dict[str, float]]:
        return {m: dict(r) for m, r in self.brackets[bracket].rungs}


ASHAScheduler = AsyncHyperBandScheduler


def _id(trial) -> str:
    return getattr(trial, "trial_id", trial)
