"""Tune's configuration objects, with Ray Tune 2.60's fields and defaults."""

import dataclasses
import os
from typing import Any, Callable, List, Optional


@dataclasses.dataclass
class FailureConfig:
    """`max_failures`: how often a failed trial is started again from its newest
    checkpoint (-1: always); `fail_fast`: end the whole run at the first trial error."""

    max_failures: int = 0
    fail_fast: Any = False

    def __post_init__(self):
        if not isinstance(self.max_failures, int) or self.max_failures < -1:
            raise ValueError(f"FailureConfig(max_failures={self.max_failures!r}): -1 (always) or a count >= 0")


@dataclasses.dataclass
class CheckpointConfig:
    """Which of a trial's checkpoints stay: the best `num_to_keep` by
    `checkpoint_score_attribute` (the newest when unset); the latest always stays.
    `checkpoint_frequency`/`checkpoint_at_end` apply to class trainables."""

    num_to_keep: Optional[int] = None
    checkpoint_score_attribute: Optional[str] = None
    checkpoint_score_order: str = "max"
    checkpoint_frequency: int = 0
    checkpoint_at_end: Optional[bool] = None

    def __post_init__(self):
        if self.num_to_keep is not None and (not isinstance(self.num_to_keep, int) or self.num_to_keep < 1):
            raise ValueError(f"CheckpointConfig(num_to_keep={self.num_to_keep!r}) must be None or >= 1")
        if self.checkpoint_score_order not in ("max", "min"):
            raise ValueError(f"CheckpointConfig(checkpoint_score_order={self.checkpoint_score_order!r}): 'max' or 'min'")
        if not isinstance(self.checkpoint_frequency, int) or self.checkpoint_frequency < 0:
            raise ValueError(f"CheckpointConfig(checkpoint_frequency={self.checkpoint_frequency!r}) must be >= 0")


def default_storage_path() -> str:
    return os.environ.get("OXRAY_STORAGE") or os.path.expanduser("~/ray_results")


@dataclasses.dataclass
class RunConfig:
    """Where the experiment goes (`storage_path/name`), when trials stop, and failure and
    checkpoint policies. `sync_config` is accepted and ignored."""

    name: Optional[str] = None
    storage_path: Optional[str] = None
    storage_filesystem: Any = None
    failure_config: Optional[FailureConfig] = None
    checkpoint_config: Optional[CheckpointConfig] = None
    sync_config: Any = None
    verbose: Optional[int] = None
    stop: Any = None
    callbacks: Optional[List[Any]] = None
    progress_reporter: Any = None
    log_to_file: Any = False
    local_dir: Any = None

    def __post_init__(self):
        if self.local_dir is not None:
            raise DeprecationWarning("RunConfig(local_dir) is not supported: use RunConfig(storage_path=...)")
        if self.name is not None and (not self.name or "/" in self.name or self.name in (".", "..")):
            raise ValueError(f"RunConfig(name={self.name!r}) must be a plain directory name")
        self.failure_config = self.failure_config or FailureConfig()
        self.checkpoint_config = self.checkpoint_config or CheckpointConfig()
        self.callbacks = list(self.callbacks or [])
        if self.verbose is None:
            self.verbose = 1


@dataclasses.dataclass
class TuneConfig:
    mode: Optional[str] = None
    metric: Optional[str] = None
    search_alg: Any = None
    scheduler: Any = None
    num_samples: int = 1
    max_concurrent_trials: Optional[int] = None
    time_budget_s: Optional[float] = None
    reuse_actors: Optional[bool] = False
    trial_name_creator: Optional[Callable] = None
    trial_dirname_creator: Optional[Callable] = None
    chdir_to_trial_dir: Any = None

    def __post_init__(self):
        if self.mode not in (None, "min", "max"):
            raise ValueError(f"TuneConfig(mode={self.mode!r}): 'min' or 'max'")
        if not isinstance(self.num_samples, int) or self.num_samples == 0 or self.num_samples < -1:
            raise ValueError(f"TuneConfig(num_samples={self.num_samples!r}): a count >= 1, or -1 (until the "
                             "time budget or stop condition)")
        if self.num_samples == -1 and self.time_budget_s is None:
            raise ValueError("TuneConfig(num_samples=-1) runs until time_budget_s: set it too")
        if self.max_concurrent_trials is not None and (not isinstance(self.max_concurrent_trials, int)
                                                       or self.max_concurrent_trials < 1):
            raise ValueError(f"TuneConfig(max_concurrent_trials={self.max_concurrent_trials!r}) must be >= 1")
        if self.time_budget_s is not None and self.time_budget_s <= 0:
            raise ValueError(f"TuneConfig(time_budget_s={self.time_budget_s!r}) must be > 0")
