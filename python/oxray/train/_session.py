"""What the training function sees: its place in the group (`get_context`), the run's
latest checkpoint, its dataset shards, and `report`, which hands each round of metrics (and
the checkpoint, uploaded first) to the run's controller."""

import dataclasses
import datetime
from typing import Any, Callable, Dict, Optional

from oxray.train._checkpoint import Checkpoint
from oxray.train._storage import Storage, copy_dir


@dataclasses.dataclass
class TrainContext:
    world_rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    local_world_size: int = 1
    node_rank: int = 0
    experiment_name: str = ""
    storage: Optional[Storage] = None

    def get_world_rank(self) -> int:
        return self.world_rank

    def get_world_size(self) -> int:
        return self.world_size

    def get_local_rank(self) -> int:
        return self.local_rank

    def get_local_world_size(self) -> int:
        return self.local_world_size

    def get_node_rank(self) -> int:
        return self.node_rank

    def get_experiment_name(self) -> str:
        return self.experiment_name

    def get_storage(self) -> Optional[Storage]:
        return self.storage

    def _gone(self, name):
        raise DeprecationWarning(f"get_context().{name}() is not part of Train V2: use "
                                 "get_storage().experiment_path or pass the value in train_loop_config")

    def get_trial_dir(self):
        self._gone("get_trial_dir")

    def get_trial_id(self):
        self._gone("get_trial_id")

    def get_trial_name(self):
        self._gone("get_trial_name")

    def get_trial_resources(self):
        self._gone("get_trial_resources")

    def get_metadata(self):
        self._gone("get_metadata")


class Session:
    """One worker's side of a run. `deliver(report)` hands a report to the controller (a
    bounded queue in a worker, the controller itself when the run is local);
    `broadcast(value)` returns rank 0's value once every rank has called it."""

    def __init__(self, context: TrainContext, checkpoint: Optional[Checkpoint], deliver: Callable[[Dict], None],
                 broadcast: Callable[[Any], Any], dataset_shards: Optional[Dict[str, Any]] = None):
        self.context = context
        self.checkpoint = checkpoint
        self.deliver = deliver
        self.broadcast = broadcast
        self.dataset_shards = dataset_shards or {}
        self.storage_checked = False

    def report(self, metrics: Dict[str, Any], checkpoint: Optional[Checkpoint], dir_name: Optional[str]) -> None:
        check_metrics(metrics)
        name = dir_name or "checkpoint_" + datetime.datetime.now().strftime("%Y-%m-%d_%H-%M-%S.%f")
        name = self.broadcast(name)  # every rank's files go to rank 0's directory
        persisted = None
        if checkpoint is not None:
            storage = self.context.storage
            if not self.storage_checked:
                storage.check_reachable()
                self.storage_checked = True
            if (checkpoint.path, checkpoint.filesystem) != (storage.path(name), storage.fs):
                copy_dir(checkpoint.path, checkpoint.filesystem, storage.path(name), storage.fs)
            persisted = Checkpoint(storage.path(name), storage.fs)
        self.deliver({"metrics": metrics, "checkpoint_dir_name": name if persisted else None})
        if persisted is not None:
            self.checkpoint = persisted


def check_metrics(metrics: Dict[str, Any]) -> None:
    if not isinstance(metrics, dict):
        raise TypeError(f"report() takes a dict of metrics, got {type(metrics).__name__}")
    import sys

    torch = sys.modules.get("torch")
    if torch is None:
        return

    def walk(value, key):
        if isinstance(value, (torch.Tensor, torch.nn.Module)):
            raise ValueError(f"report(): metric {key!r} is a torch {type(value).__name__}; pass plain values "
                             "(tensor.item(), tensor.tolist())")
        if isinstance(value, dict):
            for k, v in value.items():
                walk(v, f"{key}/{k}")
        elif isinstance(value, (list, tuple)):
            for v in value:
                walk(v, key)

    for k, v in metrics.items():
        walk(v, k)


_session: Optional[Session] = None


def current() -> Session:
    if _session is None:
        raise RuntimeError("this is not inside a training function: oxray.train.report, get_context, "
                           "get_checkpoint and get_dataset_shard work in the function a trainer runs")
    return _session


def install(session: Optional[Session]) -> None:
    global _session
    _session = session


def report(metrics: Dict[str, Any], checkpoint: Optional[Checkpoint] = None, checkpoint_dir_name: Optional[str] = None,
           **_ignored) -> None:
    """Reports this round's metrics, and a checkpoint (uploaded to the run's storage before
    this returns). Every worker must call it the same number of times: it waits for all."""
    current().report(metrics, checkpoint, checkpoint_dir_name)


def get_checkpoint() -> Optional[Checkpoint]:
    """The run's newest committed checkpoint: None on a new run, else where to resume from."""
    return current().checkpoint


def get_context() -> TrainContext:
    return current().context


def get_dataset_shard(name: str):
    """This worker's part of `datasets[name]` (all of it when that dataset is not split)."""
    shards = current().dataset_shards
    if name not in shards:
        raise KeyError(f"no dataset named {name!r} was given to the trainer; it has {sorted(shards)}")
    return shards[name]
