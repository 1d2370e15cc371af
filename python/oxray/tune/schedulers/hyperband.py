"""Synchronous HyperBand: trials are dealt into brackets; a bracket's trials run until
its milestone and pause there; once every live trial of the bracket reached it, the best
`ceil(n / reduction_factor)` go on to the next milestone (`reduction_factor` times
further) and the rest stop. Bands hold brackets from the most trials with the shortest
first milestone down to a few trials that run to `max_t` at once.

Decisions are pure: the scheduler sees trial ids and result dicts; what happens to trials
already paused when a bracket is cut is handed out by `take_paused_decisions()`."""

import math
from typing import Dict, List, Optional, Tuple

from oxray.tune.schedulers.trial_scheduler import TrialScheduler, score


def bracket_plan(max_t: float, eta: float) -> List[Tuple[int, float]]:
    """A band's brackets, first filled first: (trials, first milestone) for s = s_max..0."""
    s_max_1 = int(round(math.log(max_t) / math.log(eta), 9)) + 1
    plan = []
    for s in reversed(range(s_max_1)):
        plan.append((int(math.ceil(s_max_1 / (s + 1) * eta ** s)), max(1, int(max_t * eta ** (-s)))))
    return plan


class Bracket:
    def __init__(self, n0: int, r0: float, max_t: float, eta: float):
        self.n, self.milestone, self.max_t, self.eta = n0, min(r0, max_t), max_t, eta
        self.added: List[str] = []
        self.live: Dict[str, Optional[float]] = {}  # trial id -> score at the current milestone
        self.reached: set = set()
        self.closed = False  # no more trials will join (full, or the run has no more)

    def full(self) -> bool:
        return self.closed or len(self.added) >= self.n

    def add(self, trial_id: str) -> None:
        self.added.append(trial_id)
        self.live[trial_id] = None

    def ready_to_cut(self) -> bool:
        return self.full() and bool(self.live) and self.reached >= set(self.live)

    def cut(self) -> Tuple[List[str], List[str]]:
        """(go on, stop): the best ceil(n / eta) by score; a trial without a score ranks last."""
        self.n = int(math.ceil(self.n / self.eta))
        ranked = sorted(self.live, key=lambda t: -math.inf if self.live[t] is None else self.live[t], reverse=True)
        good, bad = ranked[:self.n], ranked[self.n:]
        for trial_id in bad:
            del self.live[trial_id]
        self.milestone = min(self.milestone * self.eta, self.max_t)
        self.reached.clear()
        for trial_id in good:
            self.live[trial_id] = None
        return good, bad

    def remove(self, trial_id: str) -> None:
        self.live.pop(trial_id, None)
        self.reached.discard(trial_id)


class HyperBandScheduler(TrialScheduler):
    def __init__(self, time_attr: str = "training_iteration", metric: Optional[str] = None,
                 mode: Optional[str] = None, max_t: float = 81, reduction_factor: float = 3,
                 stop_last_trials: bool = True):
        super().__init__(metric, mode)
        if max_t <= 0:
            raise ValueError(f"HyperBand needs max_t > 0, got {max_t}")
        if reduction_factor <= 1:
            raise ValueError(f"HyperBand needs reduction_factor > 1, got {reduction_factor}")
        self.time_attr, self.max_t, self.reduction_factor = time_attr, max_t, reduction_factor
        self.stop_last_trials = stop_last_trials
        self.plan = bracket_plan(max_t, reduction_factor)
        self.bands: List[List[Bracket]] = []
        self.trial_bracket: Dict[str, Bracket] = {}
        self.paused: set = set()  # trials told to PAUSE and not yet resumed or stopped
        self.to_resume: List[str] = []
        self.to_stop: List[str] = []

    # ----- placing trials

    def _open_bracket(self) -> Bracket:
        band = self.bands[-1] if self.bands else None
        if band and not band[-1].full():
            return band[-1]
        if band is None or len(band) == len(self.plan):
            band = []
            self.bands.append(band)
        n0, r0 = self.plan[len(band)]
        bracket = Bracket(n0, r0, self.max_t, self.reduction_factor)
        band.append(bracket)
        return bracket

    def on_trial_add(self, tune_controller, trial) -> None:
        self._require_metric()
        trial_id = _id(trial)
        if trial_id not in self.trial_bracket:
            bracket = self._open_bracket()
            bracket.add(trial_id)
            self.trial_bracket[trial_id] = bracket

    def on_no_more_trials(self) -> None:
        """The run will add no trials now: open brackets are cut with the trials they have."""
        for band in self.bands:
            for bracket in band:
                bracket.closed = True
                self._maybe_cut(bracket, None)

    # ----- decisions

    def on_trial_result(self, tune_controller, trial, result: Dict) -> str:
        trial_id = _id(trial)
        if trial_id not in self.trial_bracket:
            self.on_trial_add(tune_controller, trial)
        bracket = self.trial_bracket[trial_id]
        if trial_id not in bracket.live:
            return TrialScheduler.STOP  # cut while its result was on the way
        t = result.get(self.time_attr)
        if t is None or t < bracket.milestone:
            return TrialScheduler.CONTINUE
        bracket.live[trial_id] = score(result, self._metric, self._mode)
        if t >= self.max_t:
            bracket.remove(trial_id)
            decision = TrialScheduler.STOP if self.stop_last_trials else TrialScheduler.CONTINUE
            self._maybe_cut(bracket, None)
            return decision
        bracket.reached.add(trial_id)
        return self._maybe_cut(bracket, trial_id) or self._pause(trial_id)

    def _pause(self, trial_id: str) -> str:
        self.paused.add(trial_id)
        return TrialScheduler.PAUSE

    def _maybe_cut(self, bracket: Bracket, current: Optional[str]) -> Optional[str]:
        """Cuts the bracket when it can; returns the decision for `current` then, else None."""
        if not bracket.ready_to_cut():
            return None
        good, bad = bracket.cut()
        decision = None
        for trial_id in good:
            if trial_id == current:
                decision = TrialScheduler.CONTINUE
            elif trial_id in self.paused:
                self.paused.discard(trial_id)
                self.to_resume.append(trial_id)
        for trial_id in bad:
            if trial_id == current:
                decision = TrialScheduler.STOP
            elif trial_id in self.paused:
                self.paused.discard(trial_id)
                self.to_stop.append(trial_id)
        return decision

    def take_paused_decisions(self) -> Tuple[List[str], List[str]]:
        """(paused trials to resume, paused trials to end), each handed out once."""
        resume, stop = self.to_resume, self.to_stop
        self.to_resume, self.to_stop = [], []
        return resume, stop

    def choose_trial_to_run(self, tune_controller):
        return self.to_resume[0] if self.to_resume else None

    def _gone(self, trial) -> None:
        trial_id = _id(trial)
        bracket = self.trial_bracket.get(trial_id)
        self.paused.discard(trial_id)
        if bracket is not None and trial_id in bracket.live:
            bracket.remove(trial_id)
            self._maybe_cut(bracket, None)

    def on_trial_complete(self, tune_controller, trial, result: Dict) -> None:
        self._gone(trial)

    def on_trial_error(self, tune_controller, trial) -> None:
        self._gone(trial)

    def on_trial_remove(self, tune_controller, trial) -> None:
        self._gone(trial)

    def debug_string(self) -> str:
        shapes = [[(b.n, b.milestone, len(b.live)) for b in band] for band in self.bands]
        return f"HyperBand: (trials, milestone, live) per bracket {shapes}"


def _id(trial) -> str:
    return getattr(trial, "trial_id", trial)
