"""Hyperparameter tuning with Ray Tune's names (Ray 2.60): a `Tuner` runs one trial per
config from a search space on a warm pool of worker actors, so starting a trial costs an
actor call rather than a new process.

    from oxray import tune
    tuner = tune.Tuner(train_fn, param_space={"lr": tune.loguniform(1e-4, 1e-1)},
                       tune_config=tune.TuneConfig(metric="loss", mode="min", num_samples=20))
    best = tuner.fit().get_best_result()
"""

import dataclasses

from oxray.train._checkpoint import Checkpoint
from oxray.tune import schedulers, search
from oxray.tune._callback import Callback
from oxray.tune._config import CheckpointConfig, FailureConfig, RunConfig, TuneConfig
from oxray.tune._errors import TuneError
from oxray.tune._result import Result, ResultGrid
from oxray.tune._session import TuneContext, get_checkpoint, get_context, report
from oxray.tune._stopper import Stopper
from oxray.tune._trainable import PlacementGroupFactory, Trainable, with_parameters, with_resources
from oxray.tune._tuner import Tuner
from oxray.tune.search.sample import (choice, lograndint, loguniform, qlograndint, qloguniform, qrandint, qrandn,
                                      quniform, randint, randn, sample_from, uniform)
from oxray.tune.search.sample import grid_search


@dataclasses.dataclass
class ResumeConfig:
    """Which trials a restored run starts again; `Tuner.restore`'s flags say the same."""

    unfinished: str = "RESUME"
    errored: str = "SKIP"
    finished: str = "SKIP"


__all__ = [
    "Callback", "Checkpoint", "CheckpointConfig", "FailureConfig", "PlacementGroupFactory", "Result", "ResultGrid",
    "ResumeConfig", "RunConfig", "Stopper", "Trainable", "TuneConfig", "TuneContext", "TuneError", "Tuner", "choice",
    "get_checkpoint", "get_context", "grid_search", "lograndint", "loguniform", "qlograndint", "qloguniform",
    "qrandint", "qrandn", "quniform", "randint", "randn", "report", "sample_from", "schedulers", "search",
    "uniform", "with_parameters", "with_resources",
]
