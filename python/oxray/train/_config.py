"""The configuration objects of a training run, with Ray Train's names, fields and defaults
(Ray 2.60, Train V2). Fields that Train V2 removed raise, as they do there, so a ported
script learns what to change instead of being silently ignored."""

import dataclasses
import datetime
import os
from typing import Any, Dict, List, Optional, Tuple, Union

STRATEGIES = ("PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD")


def _removed(owner: str, field: str, instead: str) -> DeprecationWarning:
    return DeprecationWarning(f"{owner}({field}) is not supported (Ray Train V2 removed it); {instead}")


@dataclasses.dataclass
class ScalingConfig:
    """How many workers, and what each holds. `num_workers=(min, max)` is elastic: the group
    runs with as many as fit, never fewer than min, and grows back when nodes return."""

    num_workers: Union[int, Tuple[int, int]] = 1
    use_gpu: bool = False
    resources_per_worker: Optional[Dict[str, float]] = None
    placement_strategy: str = "PACK"
    accelerator_type: Optional[str] = None
    elastic_resize_monitor_interval_s: float = 60.0
    trainer_resources: Optional[Dict[str, float]] = None
    use_tpu: bool = False
    label_selector: Optional[Union[Dict[str, str], List[Dict[str, str]]]] = None

    def __post_init__(self):
        if self.trainer_resources is not None:
            raise _removed("ScalingConfig", "trainer_resources", "the run's controller holds no resources")
        if self.use_tpu:
            raise ValueError("ScalingConfig(use_tpu=True): oxray has no TPU support")
        n = self.num_workers
        if isinstance(n, (tuple, list)):
            if len(n) != 2 or not all(isinstance(x, int) and not isinstance(x, bool) for x in n):
                raise ValueError(f"ScalingConfig(num_workers=(min, max)) takes two integers, got {n!r}")
            if not 1 <= n[0] <= n[1]:
                raise ValueError(f"ScalingConfig(num_workers={tuple(n)!r}): need 1 <= min <= max")
            self.num_workers = (int(n[0]), int(n[1]))
        elif not isinstance(n, int) or isinstance(n, bool) or n < 0:
            raise ValueError(f"ScalingConfig(num_workers={n!r}): a number of workers (>= 0) or (min, max)")
        if self.placement_strategy not in STRATEGIES:
            raise ValueError(f"ScalingConfig(placement_strategy={self.placement_strategy!r}): one of {STRATEGIES}")
        resources = dict(self.resources_per_worker or {})
        for key, value in resources.items():
            if not isinstance(value, (int, float)) or value < 0:
                raise ValueError(f"ScalingConfig(resources_per_worker): {key}={value!r} is not an amount >= 0")
        self._check_label_selector()
        gpus = resources.get("GPU")
        if gpus and not self.use_gpu:
            raise ValueError("ScalingConfig(resources_per_worker) asks for GPUs: set use_gpu=True as well")
        if self.use_gpu and gpus is not None and gpus == 0:
            raise ValueError("ScalingConfig(use_gpu=True) with resources_per_worker GPU=0: give each worker a GPU")

    def _check_label_selector(self) -> None:
        from oxray.util._labels import check_selector

        chosen = self.label_selector
        if chosen is None or isinstance(chosen, dict):
            if chosen is not None:
                check_selector(chosen, "ScalingConfig(label_selector)")
            return
        if not isinstance(chosen, (list, tuple)):
            raise TypeError(f"ScalingConfig(label_selector) takes a dict or a list of dicts, got {type(chosen).__name__}")
        if len(chosen) != self.max_workers:
            raise ValueError(f"ScalingConfig(label_selector) has {len(chosen)} selectors for {self.max_workers} "
                             "workers: give one dict for all, or one per worker")
        for i, selector in enumerate(chosen):
            check_selector(selector, f"ScalingConfig(label_selector[{i}])")
        self.label_selector = list(chosen)

    def worker_selectors(self, size: int) -> Optional[List[Dict[str, str]]]:
        """The labels each of `size` workers' nodes must have (None: any node)."""
        chosen = self.label_selector
        if chosen is None:
            return None
        return [dict(chosen) for _ in range(size)] if isinstance(chosen, dict) else [dict(s) for s in chosen[:size]]

    @property
    def elastic(self) -> bool:
        return isinstance(self.num_workers, tuple)

    @property
    def min_workers(self) -> int:
        return self.num_workers[0] if self.elastic else self.num_workers

    @property
    def max_workers(self) -> int:
        return self.num_workers[1] if self.elastic else self.num_workers

    @property
    def local_mode(self) -> bool:
        return self.num_workers == 0

    def worker_resources(self) -> Dict[str, float]:
        """One worker's bundle: 1 CPU, or 1 GPU and no CPU with `use_gpu`, unless
        `resources_per_worker` says otherwise; zero amounts are dropped."""
        if self.resources_per_worker is None:
            resources = {"GPU": 1.0} if self.use_gpu else {"CPU": 1.0}
        else:
            resources = {k: float(v) for k, v in self.resources_per_worker.items()}
            if self.use_gpu:
                resources.setdefault("GPU", 1.0)
        if self.accelerator_type:
            from oxray._private import accelerators

            resources.update(accelerators.resource(self.accelerator_type))
        return {k: v for k, v in resources.items() if v > 0}

    def total_resources(self) -> Dict[str, float]:
        return {k: v * self.max_workers for k, v in self.worker_resources().items()}


@dataclasses.dataclass
class FailureConfig:
    """`max_failures`: how many times a failed worker group is started again (-1: always)."""

    max_failures: int = 0
    controller_failure_limit: int = -1
    fail_fast: Any = None

    def __post_init__(self):
        if self.fail_fast is not None:
            raise _removed("FailureConfig", "fail_fast", "use max_failures")
        if not isinstance(self.max_failures, int) or self.max_failures < -1:
            raise ValueError(f"FailureConfig(max_failures={self.max_failures!r}): -1 (always) or a count >= 0")


@dataclasses.dataclass
class CheckpointConfig:
    """Which checkpoints stay in storage: the best `num_to_keep` by
    `checkpoint_score_attribute` (the newest when it is unset); the latest always stays."""

    num_to_keep: Optional[int] = None
    checkpoint_score_attribute: Optional[str] = None
    checkpoint_score_order: str = "max"
    checkpoint_frequency: Any = None
    checkpoint_at_end: Any = None

    def __post_init__(self):
        for field in ("checkpoint_frequency", "checkpoint_at_end"):
            if getattr(self, field) is not None:
                raise _removed("CheckpointConfig", field, "report a checkpoint from the training function")
        if self.num_to_keep is not None and (not isinstance(self.num_to_keep, int) or self.num_to_keep < 1):
            raise ValueError(f"CheckpointConfig(num_to_keep={self.num_to_keep!r}) must be None or >= 1")
        if self.checkpoint_score_order not in ("max", "min"):
            raise ValueError(f"CheckpointConfig(checkpoint_score_order={self.checkpoint_score_order!r}): 'max' or 'min'")


def default_storage_path() -> str:
    return os.environ.get("OXRAY_STORAGE") or os.path.expanduser("~/oxray_results")


@dataclasses.dataclass
class RunConfig:
    """The run's name (also what a rerun resumes by) and where its checkpoints go: a local
    or shared path, or a URI that pyarrow's (or fsspec's) filesystems know."""

    name: Optional[str] = None
    storage_path: Optional[str] = None
    storage_filesystem: Any = None
    failure_config: Optional[FailureConfig] = None
    checkpoint_config: Optional[CheckpointConfig] = None
    callbacks: Optional[List[Any]] = None
    worker_runtime_env: Optional[Dict[str, Any]] = None
    sync_config: Any = None
    verbose: Any = None
    stop: Any = None
    progress_reporter: Any = None
    log_to_file: Any = None

    def __post_init__(self):
        for field in ("sync_config", "verbose", "stop", "progress_reporter", "log_to_file"):
            if getattr(self, field) is not None:
                raise _removed("RunConfig", field, "see the oxray.train documentation")
        if self.name is None:
            self.name = "oxray_train_run-" + datetime.datetime.now().strftime("%Y-%m-%d_%H-%M-%S")
        if not self.name or "/" in self.name or self.name in (".", ".."):
            raise ValueError(f"RunConfig(name={self.name!r}) must be a plain directory name")
        if self.storage_path is None:
            self.storage_path = default_storage_path()
        self.storage_path = str(self.storage_path)
        self.failure_config = self.failure_config or FailureConfig()
        self.checkpoint_config = self.checkpoint_config or CheckpointConfig()
        self.callbacks = list(self.callbacks or [])
        self.worker_runtime_env = dict(self.worker_runtime_env or {})


@dataclasses.dataclass
class DataConfig:
    """Which datasets are split between the workers ("all", or a list of names); the others
    are read whole by every worker."""

    datasets_to_split: Union[str, List[str]] = "all"
    execution_options: Any = None
    enable_shard_locality: bool = True

    def splits(self, name: str) -> bool:
        return self.datasets_to_split == "all" or name in self.datasets_to_split
