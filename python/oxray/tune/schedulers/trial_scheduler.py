"""The scheduler interface: after each result a scheduler says whether the trial goes on
(CONTINUE), ends early (STOP) or yields its slot (PAUSE). Schedulers are pure decision
objects: they see trial objects (anything with a `trial_id`) and result dicts only."""

from typing import Dict, Optional


class TrialScheduler:
    CONTINUE = "CONTINUE"
    PAUSE = "PAUSE"
    STOP = "STOP"
    NOOP = "NOOP"

    def __init__(self, metric: Optional[str] = None, mode: Optional[str] = None):
        if mode is not None and mode not in ("min", "max"):
            raise ValueError(f"{type(self).__name__}(mode={mode!r}): 'min' or 'max'")
        self._metric, self._mode = metric, mode

    @property
    def metric(self):
        return self._metric

    @property
    def mode(self):
        return self._mode

    def set_search_properties(self, metric: Optional[str], mode: Optional[str], **spec) -> bool:
        """Takes the Tuner's metric and mode; giving them to both is an error, as in Ray Tune."""
        if metric and self._metric and metric != self._metric or mode and self._mode and mode != self._mode:
            raise ValueError(f"{type(self).__name__} has its own metric/mode ({self._metric}, {self._mode}) and "
                             f"TuneConfig sets ({metric}, {mode}): set them in one place only")
        self._metric = self._metric or metric
        self._mode = self._mode or mode
        return True

    def _require_metric(self) -> None:
        if not self._metric or not self._mode:
            raise ValueError(f"{type(self).__name__} needs a metric and a mode: pass them to it or to TuneConfig")

    def on_trial_add(self, tune_controller, trial) -> None:
        pass

    def on_trial_error(self, tune_controller, trial) -> None:
        pass

    def on_trial_result(self, tune_controller, trial, result: Dict) -> str:
        return TrialScheduler.CONTINUE

    def on_trial_complete(self, tune_controller, trial, result: Dict) -> None:
        pass

    def on_trial_remove(self, tune_controller, trial) -> None:
        pass

    def choose_trial_to_run(self, tune_controller):
        return None

    def debug_string(self) -> str:
        return type(self).__name__


class FIFOScheduler(TrialScheduler):
    """Runs every trial to its end, in the order the searcher made them."""

    def set_search_properties(self, metric, mode, **spec) -> bool:
        return True


def score(result: Dict, metric: str, mode: str) -> Optional[float]:
    """The result's metric signed so that larger is better; None when it is absent."""
    value = result.get(metric)
    if value is None or isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if mode == "max" else -float(value)
