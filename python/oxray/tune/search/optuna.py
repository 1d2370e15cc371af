"""`OptunaSearch`: configs from the user's own `optuna` (>= 3.0, never a dependency of
oxray) through its ask/tell interface. The space is a Tune space, a dict of Optuna
distributions, or a define-by-run function `fn(trial) -> Optional[dict of constants]`."""

from typing import Any, Callable, Dict, List, Optional, Union

from oxray.tune.search.sample import Categorical, Domain, Float, Integer
from oxray.tune.search.searcher import Searcher
from oxray.tune.search.variants import find_unresolved, is_grid


def _optuna():
    try:
        import optuna
    except ImportError:
        raise ImportError("OptunaSearch needs optuna: pip install 'optuna>=3.0'") from None
    return optuna


def to_distributions(space: Dict) -> Dict[str, Any]:
    """A Tune space's domains as Optuna distributions, keyed by "a/b" paths."""
    dist = _optuna().distributions
    out = {}
    for path, domain in find_unresolved(space):
        key = "/".join(map(str, path))
        if is_grid(domain):
            raise ValueError(f"OptunaSearch cannot search a grid_search ({key}): use tune.choice")
        if isinstance(domain, Float):
            out[key] = dist.FloatDistribution(domain.lower, domain.upper, log=domain.log, step=domain.q)
        elif isinstance(domain, Integer):
            out[key] = dist.IntDistribution(domain.lower, domain.upper - (1 if domain.q <= 1 else 0),
                                            log=domain.log, step=max(domain.q, 1))
        elif isinstance(domain, Categorical):
            out[key] = dist.CategoricalDistribution(domain.categories)
        elif isinstance(domain, Domain):
            raise ValueError(f"OptunaSearch cannot search {type(domain).__name__} ({key})")
    return out


def _unflatten(flat: Dict[str, Any]) -> Dict[str, Any]:
    nested: Dict[str, Any] = {}
    for key, value in flat.items():
        node = nested
        parts = key.split("/")
        for part in parts[:-1]:
            node = node.setdefault(part, {})
        node[parts[-1]] = value
    return nested


class OptunaSearch(Searcher):
    def __init__(self, space: Union[None, Dict, Callable] = None, metric: Union[None, str, List[str]] = None,
                 mode: Union[None, str, List[str]] = None, points_to_evaluate: Optional[List[Dict]] = None,
                 sampler=None, study_name: Optional[str] = None, storage=None, seed: Optional[int] = None,
                 evaluated_rewards: Optional[List] = None):
        optuna = _optuna()
        super().__init__(None, None)
        self._metric, self._mode = metric, mode
        self.space, self.points = space, list(points_to_evaluate or [])
        self.sampler = sampler or optuna.samplers.TPESampler(seed=seed)
        self.study_name, self.storage = study_name or "optuna", storage
        self.evaluated_rewards = evaluated_rewards
        self.study = None
        self.trials: Dict[str, Any] = {}
        if space is not None and mode is not None:
            self._setup()

    def set_search_properties(self, metric, mode, config, **spec) -> bool:
        if self.study is not None:
            return True
        if self.space is None:
            self.space = config
        super().set_search_properties(metric, mode, config)
        self._setup()
        return True

    def _setup(self) -> None:
        optuna = _optuna()
        modes = self._mode if isinstance(self._mode, list) else [self._mode or "max"]
        directions = ["minimize" if m == "min" else "maximize" for m in modes]
        self.study = optuna.create_study(sampler=self.sampler, study_name=self.study_name, storage=self.storage,
                                         load_if_exists=True, directions=directions)
        if isinstance(self.space, dict) and any(isinstance(v, Domain) or is_grid(v)
                                                for _, v in find_unresolved(self.space)):
            self.space = to_distributions(self.space)
        for point in self.points:
            self.study.enqueue_trial(point)
        if self.evaluated_rewards:
            for point, reward in zip(self.points, self.evaluated_rewards):
                dists = {k: v for k, v in (self.space or {}).items() if k in point}
                self.study.add_trial(optuna.trial.create_trial(params=point, distributions=dists, value=reward))

    def suggest(self, trial_id: str):
        if self.study is None:
            return None
        trial = self.study.ask(fixed_distributions=self.space if isinstance(self.space, dict) else None)
        self.trials[trial_id] = trial
        if callable(self.space):
            constants = self.space(trial) or {}
            return _unflatten({**trial.params, **constants})
        return _unflatten(dict(trial.params))

    def on_trial_result(self, trial_id: str, result: Dict) -> None:
        trial = self.trials.get(trial_id)
        if trial is None or isinstance(self._metric, list) or self._metric not in result:
            return
        step = result.get("training_iteration", 0)
        try:
            trial.report(result[self._metric], step)
        except Exception:  # reporting twice for one step, or a multi-objective study
            pass

    def on_trial_complete(self, trial_id: str, result: Optional[Dict] = None, error: bool = False) -> None:
        optuna = _optuna()
        trial = self.trials.pop(trial_id, None)
        if trial is None:
            return
        if error or not result:
            self.study.tell(trial, state=optuna.trial.TrialState.FAIL)
            return
        metrics = self._metric if isinstance(self._metric, list) else [self._metric]
        values = [result.get(m) for m in metrics]
        if any(v is None for v in values):
            self.study.tell(trial, state=optuna.trial.TrialState.FAIL)
        else:
            self.study.tell(trial, values if len(values) > 1 else values[0])

    def get_state(self):
        return {"study": self.study, "space": self.space}
