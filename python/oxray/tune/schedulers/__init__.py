"""Trial schedulers: which trials go on after each result (`tune.schedulers`)."""

from oxray.tune.schedulers.asha import ASHAScheduler, AsyncHyperBandScheduler
from oxray.tune.schedulers.hyperband import HyperBandScheduler
from oxray.tune.schedulers.median_stopping import MedianStoppingRule
from oxray.tune.schedulers.pbt import PopulationBasedTraining
from oxray.tune.schedulers.trial_scheduler import FIFOScheduler, TrialScheduler

_BY_NAME = {
    "fifo": FIFOScheduler,
    "async_hyperband": AsyncHyperBandScheduler,
    "asynchyperband": AsyncHyperBandScheduler,
    "asha": ASHAScheduler,
    "median_stopping_rule": MedianStoppingRule,
    "median": MedianStoppingRule,
    "hyperband": HyperBandScheduler,
    "pbt": PopulationBasedTraining,
}


def create_scheduler(scheduler: str, **kwargs) -> TrialScheduler:
    try:
        return _BY_NAME[scheduler.lower()](**kwargs)
    except KeyError:
        raise ValueError(f"unknown scheduler {scheduler!r}: one of {sorted(_BY_NAME)}") from None


__all__ = ["ASHAScheduler", "AsyncHyperBandScheduler", "FIFOScheduler", "HyperBandScheduler", "MedianStoppingRule",
           "PopulationBasedTraining", "TrialScheduler", "create_scheduler"]
