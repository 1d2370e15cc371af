"""Population Based Training: every `perturbation_interval` (of `time_attr`) a trial in the
bottom `quantile_fraction` of the population by its last score takes a copy of a top
trial's newest checkpoint and config (exploit), with the hyperparameters in
`hyperparam_mutations` perturbed or resampled (explore), and goes on from there.

With `synch=True` every trial waits at each perturbation point (PAUSE: its worker goes
back to the pool) until every trial still running has reached it; then the bottom trials
exploit the top ones, and all go on together, as Ray's synchronous PBT does.

Decisions are pure: the scheduler sees trial ids and result dicts (a result carrying
`checkpoint_dir_name` tells it a trial has a checkpoint to give) and answers PAUSE for a
trial to exploit (or, synchronously, to wait); `take_exploit(trial_id)` hands out (donor
trial id, new config), and `take_paused_decisions()` the trials to resume."""

import copy
import math
import random
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from oxray.tune.schedulers.trial_scheduler import TrialScheduler, score
from oxray.tune.search.sample import Domain


def quantiles(scores: Dict[str, float], fraction: float) -> Tuple[List[str], List[str]]:
    """(bottom, top) trial ids: `ceil(n * fraction)` each, never more than half of n."""
    ranked = sorted(scores, key=lambda t: scores[t])
    count = int(math.ceil(len(ranked) * fraction))
    count = min(count, len(ranked) // 2)
    if count == 0:
        return [], []
    return ranked[:count], ranked[-count:]


def explore(config: Dict, mutations: Dict, rng: random.Random, resample_probability: float = 0.25,
            perturbation_factors: Sequence[float] = (1.2, 0.8),
            custom_explore_fn: Optional[Callable[[Dict], Dict]] = None) -> Dict:
    """A new config: each mutated key resampled (with `resample_probability`, or when its
    value is not among a list's), else a number times one of the factors, a list's value
    moved to a neighbour."""
    new = copy.deepcopy(config)
    _explore_into(new, mutations, rng, resample_probability, perturbation_factors)
    if custom_explore_fn is not None:
        new = custom_explore_fn(new)
        if not isinstance(new, dict):
            raise TypeError(f"custom_explore_fn must return the config dict, got {type(new).__name__}")
    return new


def _explore_into(config: Dict, mutations: Dict, rng: random.Random, p: float, factors: Sequence[float]) -> None:
    for key, spec in mutations.items():
        value = config.get(key)
        if isinstance(spec, dict):
            config[key] = value if isinstance(value, dict) else {}
            _explore_into(config[key], spec, rng, p, factors)
        elif isinstance(spec, (list, tuple)):
            if rng.random() < p or value not in spec:
                config[key] = rng.choice(list(spec))
            else:
                i = list(spec).index(value) + rng.choice([-1, 1])
                config[key] = spec[min(max(i, 0), len(spec) - 1)]
        elif isinstance(spec, Domain) or callable(spec):
            if rng.random() < p or not isinstance(value, (int, float)) or isinstance(value, bool):
                config[key] = spec.sample(rng=rng) if isinstance(spec, Domain) else spec()
            else:
                perturbed = value * rng.choice(list(factors))
                config[key] = int(perturbed) if isinstance(value, int) else perturbed
        else:
            raise TypeError(f"hyperparam_mutations[{key!r}] must be a list, a tune domain, a function or a dict, "
                            f"got {type(spec).__name__}")


class PopulationBasedTraining(TrialScheduler):
    def __init__(self, time_attr: str = "time_total_s", metric: Optional[str] = None, mode: Optional[str] = None,
                 perturbation_interval: float = 60.0, burn_in_period: float = 0.0,
                 hyperparam_mutations: Optional[Dict[str, Any]] = None, quantile_fraction: float = 0.25,
                 resample_probability: float = 0.25, perturbation_factors: Tuple[float, float] = (1.2, 0.8),
                 custom_explore_fn: Optional[Callable[[Dict], Dict]] = None, log_config: bool = True,
                 require_attrs: bool = True, synch: bool = False, seed: Optional[int] = None):
        super().__init__(metric, mode)
        if not hyperparam_mutations and custom_explore_fn is None:
            raise ValueError("PopulationBasedTraining needs hyperparam_mutations or custom_explore_fn")
        if not 0 <= quantile_fraction <= 0.5:
            raise ValueError(f"quantile_fraction must be in [0, 0.5], got {quantile_fraction}")
        if perturbation_interval <= 0:
            raise ValueError(f"perturbation_interval must be > 0, got {perturbation_interval}")
        self.time_attr, self.perturbation_interval, self.burn_in_period = time_attr, perturbation_interval, burn_in_period
        self.mutations = dict(hyperparam_mutations or {})
        self.quantile_fraction, self.resample_probability = quantile_fraction, resample_probability
        self.perturbation_factors, self.custom_explore_fn = tuple(perturbation_factors), custom_explore_fn
        self.require_attrs = require_attrs
        self.rng = random.Random(seed)
        self.configs: Dict[str, Dict] = {}
        self.scores: Dict[str, float] = {}  # last score at a perturbation point
        self.last_perturbation: Dict[str, float] = {}
        self.has_checkpoint: set = set()
        self.exploits: Dict[str, Tuple[str, Dict]] = {}
        self.num_perturbations = 0
        self.synch = synch
        self.waits_for_population = synch
        self.live: set = set()  # trials added and not ended
        self.waiting: Dict[str, Tuple[float, float]] = {}  # at the barrier: (time_attr, score)
        self.next_sync = max(perturbation_interval, burn_in_period)
        if synch:
            # Only a synchronous run pauses trials that then wait to be resumed: the
            # controller asks this of schedulers that have it.
            self.take_paused_decisions = self._release_barrier

    def on_trial_add(self, tune_controller, trial) -> None:
        self._require_metric()
        trial_id = _id(trial)
        self.last_perturbation.setdefault(trial_id, 0.0)
        self.live.add(trial_id)
        if hasattr(trial, "config"):
            self.configs[trial_id] = trial.config

    def on_trial_result(self, tune_controller, trial, result: Dict) -> str:
        trial_id = _id(trial)
        self.last_perturbation.setdefault(trial_id, 0.0)
        if isinstance(result.get("config"), dict):
            self.configs[trial_id] = result["config"]
        elif hasattr(trial, "config"):
            self.configs[trial_id] = trial.config
        if result.get("checkpoint_dir_name"):
            self.has_checkpoint.add(trial_id)
        t, value = result.get(self.time_attr), score(result, self._metric, self._mode)
        if t is None or value is None:
            if self.require_attrs:
                raise ValueError(f"PopulationBasedTraining needs {self.time_attr!r} and {self._metric!r} in every "
                                 f"result; trial {trial_id} reported {sorted(result)}")
            return TrialScheduler.CONTINUE
        if self.synch:
            if t < self.next_sync:
                return TrialScheduler.CONTINUE
            self.waiting[trial_id] = (t, value)
            return TrialScheduler.PAUSE
        if t < self.burn_in_period or t - self.last_perturbation[trial_id] < self.perturbation_interval:
            return TrialScheduler.CONTINUE
        self.last_perturbation[trial_id] = t
        self.scores[trial_id] = value
        bottom, top = quantiles(self.scores, self.quantile_fraction)
        if trial_id not in bottom:
            return TrialScheduler.CONTINUE
        if not self._plan(trial_id, top):
            return TrialScheduler.CONTINUE  # nothing to copy yet: it goes on as it is
        return TrialScheduler.PAUSE

    def _plan(self, trial_id: str, top: List[str]) -> bool:
        """An exploit of one of `top` for the trial; False when none has a checkpoint yet."""
        donors = [d for d in top if d in self.has_checkpoint and d in self.configs]
        if not donors:
            return False
        donor = self.rng.choice(donors)
        new_config = explore(self.configs[donor], self.mutations, self.rng, self.resample_probability,
                             self.perturbation_factors, self.custom_explore_fn)
        self.exploits[trial_id] = (donor, new_config)
        self.configs[trial_id] = new_config
        self.num_perturbations += 1
        return True

    def _release_barrier(self) -> Tuple[List[str], List[str]]:
        """(trials to resume, trials to stop): every waiting trial, once all trials still
        running wait at the barrier, the bottom ones with their exploits planned."""
        if not self.waiting or not self.live <= set(self.waiting):
            return [], []
        scores = {trial_id: value for trial_id, (_, value) in self.waiting.items()}
        bottom, top = quantiles(scores, self.quantile_fraction)
        for trial_id in bottom:
            self._plan(trial_id, top)
        reached = max(t for t, _ in self.waiting.values())
        self.next_sync = max(self.next_sync + self.perturbation_interval, reached)
        resume, self.waiting = list(self.waiting), {}
        return resume, []

    def take_exploit(self, trial_id: str) -> Optional[Tuple[str, Dict]]:
        """(donor trial id, new config) for a trial just answered PAUSE, handed out once."""
        return self.exploits.pop(trial_id, None)

    def _gone(self, trial) -> None:
        trial_id = _id(trial)
        self.exploits.pop(trial_id, None)
        self.live.discard(trial_id)
        self.waiting.pop(trial_id, None)

    def on_trial_complete(self, tune_controller, trial, result: Dict) -> None:
        self._gone(trial)

    def on_trial_error(self, tune_controller, trial) -> None:
        self._gone(trial)
        self.scores.pop(_id(trial), None)

    def debug_string(self) -> str:
        return f"PopulationBasedTraining: {self.num_perturbations} perturbations"


def _id(trial) -> str:
    return getattr(trial, "trial_id", trial)
