"""`OptunaSearch`: configs from the user's own `optuna` (>= 3.0, never a dependency of
oxray) through its ask/tell interface. The space is a Tune space, a dict of Optuna
distributions, or a define-by-run function `fn(trial) -> Optional[dict of constants]`."""

from typing import Any, Callable, Dict, List, Optional, Tuple, Union

from oxray.tune.search.sample import Categorical, Domain, Float, Integer
from oxray.tune.search.searcher import Searcher, merge_suggestion
from oxray.tune.search.variants import find_unresolved, is_grid


def _optuna():
    try:
        import optuna
    except ImportError:
        raise ImportError("OptunaSearch needs optuna: pip install 'optuna>=3.0'") from None
    return optuna


def distribution_spec(domain: Domain) -> Tuple[str, Dict[str, Any]]:
    """The Optuna distribution class name and its arguments for a Tune domain. Optuna's
    bounds are inclusive: an integer range's exclusive upper bound becomes `upper - 1`.
    Optuna cannot quantize a log range, so a q on one is dropped (as Ray Tune does)."""
    if isinstance(domain, Float):
        step = None if domain.log else domain.q
        return "FloatDistribution", {"low": domain.lower, "high": domain.upper, "log": domain.log, "step": step}
    if isinstance(domain, Integer):
        quantized = domain.q > 1
        return "IntDistribution", {"low": domain.lower, "high": domain.upper if quantized else domain.upper - 1,
                                   "log": domain.log, "step": 1 if domain.log or not quantized else domain.q}
    if isinstance(domain, Categorical):
        return "CategoricalDistribution", {"choices": list(domain.categories)}
    raise ValueError(f"OptunaSearch cannot search {type(domain).__name__}")


def to_distributions(space: Dict) -> Dict[str, Any]:
    """A Tune space's domains as Optuna distributions, keyed by "a/b" paths."""
    dist = _optuna().distributions
    out = {}
    for path, domain in find_unresolved(space):
        key = "/".join(map(str, path))
        if is_grid(domain):
            raise ValueError(f"OptunaSearch cannot search a grid_search ({key}): use tune.choice")
        if isinstance(domain, Domain):
            name, kwargs = distribution_spec(domain)
            out[key] = getattr(dist, name)(**kwargs)
    return out


def flatten_point(point: Dict[str, Any], prefix: str = "") -> Dict[str, Any]:
    """A nested config as Optuna's flat params, keyed by "a/b" paths."""
    flat: Dict[str, Any] = {}
    for key, value in point.items():
        if isinstance(value, dict):
            flat.update(flatten_point(value, f"{prefix}{key}/"))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


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
        self.base: Dict[str, Any] = {}  # the Tune space: its constants stay in every config
        if space is not None and metric is not None and mode is not None:
            self._setup()

    def set_search_properties(self, metric, mode, config, **spec) -> bool:
        if isinstance(config, dict) and config:
            self.base = config
        if self.study is not None:
            return True
        if self.space is None:
            self.space = config
        super().set_search_properties(metric, mode, config)
        self._setup()
        return True

    def _setup(self) -> None:
        optuna = _optuna()
        if self._metric is None:
            raise ValueError("OptunaSearch needs a metric (and a mode): pass them to it or to TuneConfig")
        modes = self._mode if isinstance(self._mode, list) else [self._mode or "max"]
        directions = ["minimize" if m == "min" else "maximize" for m in modes]
        self.study = optuna.create_study(sampler=self.sampler, study_name=self.study_name, storage=self.storage,
                                         load_if_exists=True, directions=directions)
        if isinstance(self.space, dict) and any(isinstance(v, Domain) or is_grid(v)
                                                for _, v in find_unresolved(self.space)):
            self.base = self.base or self.space
            self.space = to_distributions(self.space)
        points = [flatten_point(p) for p in self.points]
        if self.evaluated_rewards is None:
            for point in points:
                self.study.enqueue_trial(point)
            return
        # Points with known rewards are results already: the study learns from them, no trial runs them.
        if len(self.evaluated_rewards) != len(points):
            raise ValueError(f"evaluated_rewards has {len(self.evaluated_rewards)} values for {len(points)} "
                             "points_to_evaluate")
        if not isinstance(self.space, dict):
            raise ValueError("evaluated_rewards needs a space of distributions, not a define-by-run function")
        for point, reward in zip(points, self.evaluated_rewards):
            dists = {k: v for k, v in self.space.items() if k in point}
            values = {"values": list(reward)} if isinstance(reward, (list, tuple)) else {"value": reward}
            self.study.add_trial(optuna.trial.create_trial(params=point, distributions=dists, **values))

    def suggest(self, trial_id: str):
        if self.study is None:
            return None
        trial = self.study.ask(fixed_distributions=self.space if isinstance(self.space, dict) else None)
        self.trials[trial_id] = trial
        if callable(self.space):
            constants = self.space(trial) or {}
            return merge_suggestion(self.base, _unflatten({**trial.params, **constants}))
        return merge_suggestion(self.base, _unflatten(dict(trial.params)))

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
        # The asked trials still running go too: a restored run tells the study their results.
        return {"study": self.study, "space": self.space, "trials": self.trials}
