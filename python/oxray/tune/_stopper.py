"""When a trial (or the whole run) stops: `RunConfig(stop=...)` as a dict of thresholds, a
function `(trial_id, result) -> bool`, or a `Stopper`."""

from typing import Any, Callable, Dict, Optional


class Stopper:
    def __call__(self, trial_id: str, result: Dict) -> bool:
        return False

    def stop_all(self) -> bool:
        return False


class DictStopper(Stopper):
    """Stops a trial when any key's value reaches its threshold (>=)."""

    def __init__(self, thresholds: Dict[str, Any]):
        self.thresholds = dict(thresholds)

    def __call__(self, trial_id, result):
        for key, threshold in self.thresholds.items():
            value = result.get(key)
            if isinstance(value, (int, float)) and not isinstance(value, bool) and value >= threshold:
                return True
        return False


class FunctionStopper(Stopper):
    def __init__(self, fn: Callable[[str, Dict], bool]):
        self.fn = fn

    def __call__(self, trial_id, result):
        return bool(self.fn(trial_id, result))


def make_stopper(stop: Any) -> Optional[Stopper]:
    if stop is None:
        return None
    if isinstance(stop, Stopper):
        return stop
    if isinstance(stop, dict):
        return DictStopper(stop)
    if callable(stop):
        return FunctionStopper(stop)
    raise TypeError(f"RunConfig(stop=...) takes a dict, a function (trial_id, result) -> bool or a Stopper, got "
                    f"{type(stop).__name__}")
