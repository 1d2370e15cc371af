"""The searcher interface (`suggest` a config per trial id, learn from results) and
`ConcurrencyLimiter`, with Ray Tune's method names so third-party searchers port."""

import copy
import pickle
from typing import Any, Dict, Optional


class Searcher:
    FINISHED = "FINISHED"  # what `suggest` returns when there will be no more trials

    def __init__(self, metric: Optional[str] = None, mode: Optional[str] = None):
        if mode is not None and mode not in ("min", "max"):
            raise ValueError(f"mode must be 'min' or 'max', got {mode!r}")
        self._metric, self._mode = metric, mode

    @property
    def metric(self) -> Optional[str]:
        return self._metric

    @property
    def mode(self) -> Optional[str]:
        return self._mode

    def set_search_properties(self, metric: Optional[str], mode: Optional[str], config: Dict, **spec) -> bool:
        """Takes the Tuner's metric, mode and space; False when this searcher cannot use them."""
        if metric is not None:
            self._metric = metric
        if mode is not None:
            self._mode = mode
        return True

    def suggest(self, trial_id: str) -> Optional[Dict]:
        """The next config, None when none can be given now, or FINISHED."""
        raise NotImplementedError(f"{type(self).__name__} must define suggest(trial_id), as Ray's searchers do")

    def on_trial_result(self, trial_id: str, result: Dict) -> None:
        pass

    def on_trial_complete(self, trial_id: str, result: Optional[Dict] = None, error: bool = False) -> None:
        pass

    def add_evaluated_point(self, parameters: Dict, value: float, error: bool = False, pruned: bool = False,
                            intermediate_values=None) -> None:
        raise NotImplementedError(f"{type(self).__name__} cannot take evaluated points")

    def get_state(self) -> Dict:
        return {k: v for k, v in vars(self).items()}

    def set_state(self, state: Dict) -> None:
        vars(self).update(state)

    def save(self, checkpoint_path: str) -> None:
        with open(checkpoint_path, "wb") as f:
            pickle.dump(self.get_state(), f)

    def restore(self, checkpoint_path: str) -> None:
        with open(checkpoint_path, "rb") as f:
            self.set_state(pickle.load(f))

    def chosen_values(self, trial_id: str) -> Dict:
        """What was chosen for the trial (for its directory name); the whole config by default."""
        return {}


SearchAlgorithm = Searcher


class ConcurrencyLimiter(Searcher):
    """At most `max_concurrent` suggested trials live at once; with `batch`, a new batch
    starts only once the whole previous one completed."""

    def __init__(self, searcher: Searcher, max_concurrent: int, batch: bool = False):
        if not isinstance(max_concurrent, int) or max_concurrent < 1:
            raise ValueError(f"ConcurrencyLimiter(max_concurrent={max_concurrent!r}) must be an integer >= 1")
        super().__init__(searcher.metric, searcher.mode)
        self.searcher, self.max_concurrent, self.batch = searcher, max_concurrent, batch
        self.live: set = set()
        self.batch_done: set = set()

    @property
    def metric(self):
        return self.searcher.metric

    @property
    def mode(self):
        return self.searcher.mode

    def set_search_properties(self, metric, mode, config, **spec) -> bool:
        return self.searcher.set_search_properties(metric, mode, config, **spec)

    def suggest(self, trial_id: str):
        if len(self.live) >= self.max_concurrent:
            return None
        if self.batch and self.batch_done and len(self.batch_done) < self.max_concurrent:
            return None
        if self.batch and len(self.batch_done) >= self.max_concurrent:
            self.batch_done.clear()
        suggestion = self.searcher.suggest(trial_id)
        if isinstance(suggestion, dict):
            self.live.add(trial_id)
        return suggestion

    def on_trial_result(self, trial_id, result):
        self.searcher.on_trial_result(trial_id, result)

    def on_trial_complete(self, trial_id, result=None, error=False):
        if trial_id in self.live:
            self.live.discard(trial_id)
            if self.batch:
                self.batch_done.add(trial_id)
        self.searcher.on_trial_complete(trial_id, result, error)

    def chosen_values(self, trial_id):
        return self.searcher.chosen_values(trial_id)

    def get_state(self):
        return {"searcher": self.searcher.get_state(), "live": set(self.live)}

    def set_state(self, state):
        self.searcher.set_state(state["searcher"])
        self.live = set(state["live"])


def merge_suggestion(space: Any, suggestion: Dict) -> Dict:
    """The space with a searcher's suggested values written over it (nested dicts merged)."""
    merged = copy.deepcopy(space) if isinstance(space, dict) else {}
    for key, value in suggestion.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict) and "grid_search" not in merged[key]:
            merged[key] = merge_suggestion(merged[key], value)
        else:
            merged[key] = value
    return merged
