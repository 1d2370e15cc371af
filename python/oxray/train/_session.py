"""What the training function sees: its place in the group (`get_context`), the run's
latest checkpoint, its dataset shards, and `report`, which hands each round of metrics (and
the checkpoint, uploaded first) to the run's controller."""

import concurrent.futures
import dataclasses
import datetime
import enum
import json
import shutil
import time
from typing import Any, Callable, Dict, List, Optional

from oxray.train._checkpoint import Checkpoint
from oxray.train._checkpoints import SNAPSHOT
from oxray.train._storage import Storage, copy_dir

SNAPSHOT_POLL_S = 0.05


class CheckpointUploadMode(enum.Enum):
    """How `report` gets a checkpoint to the run's storage: copies it before returning
    (SYNC), copies it in the worker's upload thread and returns at once (ASYNC), or takes it
    as already there, in the run's directory (NO_UPLOAD)."""

    SYNC = "SYNC"
    ASYNC = "ASYNC"
    NO_UPLOAD = "NO_UPLOAD"


class CheckpointConsistencyMode(enum.Enum):
    """What `get_all_reported_checkpoints` waits for. Checkpoints are not validated here,
    so VALIDATED waits for what COMMITTED does: this worker's reports committed."""

    COMMITTED = "COMMITTED"
    VALIDATED = "VALIDATED"


@dataclasses.dataclass
class ReportedCheckpoint:
    checkpoint: Checkpoint
    metrics: Dict[str, Any]


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
                                 "get_storage().experiment_fs_path or pass the value in train_loop_config")

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
    `broadcast(value)` returns rank 0's value once every rank has called it.
    `reports_before` is the run's count of joined rounds when this worker started, so that
    with its own count it knows which round the controller must have committed."""

    def __init__(self, context: TrainContext, checkpoint: Optional[Checkpoint], deliver: Callable[[Dict], None],
                 broadcast: Callable[[Any], Any], dataset_shards: Optional[Dict[str, Any]] = None,
                 reports_before: int = 0):
        self.context = context
        self.checkpoint = checkpoint
        self.deliver = deliver
        self.broadcast = broadcast
        self.dataset_shards = dataset_shards or {}
        self.storage_checked = False
        self.reports_before = reports_before
        self.reports_made = 0
        # One thread, so that reports reach the controller in the order they were made.
        self.uploader: Optional[concurrent.futures.ThreadPoolExecutor] = None
        self.upload_error: Optional[BaseException] = None

    def report(self, metrics: Dict[str, Any], checkpoint: Optional[Checkpoint], dir_name: Optional[str],
               mode: "CheckpointUploadMode" = CheckpointUploadMode.SYNC, delete_local: Optional[bool] = None,
               upload_fn: Optional[Callable[[Checkpoint, str], Checkpoint]] = None) -> None:
        check_metrics(metrics)
        mode = upload_mode(mode)
        self.raise_upload_error()
        if checkpoint is not None and mode is CheckpointUploadMode.NO_UPLOAD:
            dir_name = self.name_in_run(checkpoint)  # the other ranks' files go next to it
        name = dir_name or "checkpoint_" + datetime.datetime.now().strftime("%Y-%m-%d_%H-%M-%S.%f")
        name = self.broadcast(name)  # every rank's files go to rank 0's directory
        self.reports_made += 1
        delete = checkpoint is not None and deletes_local(mode, delete_local)

        if self.uploader is None and (checkpoint is None or mode is not CheckpointUploadMode.ASYNC):
            self.persist_and_deliver(metrics, checkpoint, name, mode, delete, upload_fn)
            return

        def persist_and_deliver():
            if self.upload_error is not None:
                return  # an earlier upload failed: the reports after it are not committed either
            try:
                self.persist_and_deliver(metrics, checkpoint, name, mode, delete, upload_fn)
            except BaseException as error:
                self.upload_error = error
                raise

        if self.uploader is None:
            self.uploader = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="upload")
        future = self.uploader.submit(persist_and_deliver)
        if checkpoint is None or mode is not CheckpointUploadMode.ASYNC:
            future.result()  # after the uploads before it, as a synchronous report would be
            self.raise_upload_error()

    def persist_and_deliver(self, metrics, checkpoint, name, mode, delete, upload_fn) -> None:
        persisted, persisted_name = None, None
        if checkpoint is not None:
            storage = self.context.storage
            if not self.storage_checked:
                storage.check_reachable()
                self.storage_checked = True
            if mode is CheckpointUploadMode.NO_UPLOAD:
                persisted, persisted_name = checkpoint, self.name_in_run(checkpoint)
            elif upload_fn is not None:
                persisted = upload_fn(checkpoint, name)
                persisted_name = self.name_in_run(persisted)
            else:
                if (checkpoint.path, checkpoint.filesystem) != (storage.path(name), storage.fs):
                    copy_dir(checkpoint.path, checkpoint.filesystem, storage.path(name), storage.fs)
                persisted, persisted_name = Checkpoint(storage.path(name), storage.fs), name
            if delete and checkpoint.filesystem is None and checkpoint.path != persisted.path:
                shutil.rmtree(checkpoint.path, ignore_errors=True)
        self.deliver({"metrics": metrics, "checkpoint_dir_name": persisted_name})
        if persisted is not None:
            self.checkpoint = persisted

    def name_in_run(self, checkpoint: Checkpoint) -> str:
        storage = self.context.storage
        name = child_name(checkpoint.path, storage.experiment_path)
        if name is None or (checkpoint.filesystem is None) != (storage.fs is None):
            raise ValueError(f"the checkpoint at {checkpoint.path!r} is not a directory of the run's storage "
                             f"{storage.experiment_path!r}: with CheckpointUploadMode.NO_UPLOAD or a "
                             "checkpoint_upload_fn it must be one (storage_path/name/<dir>)")
        return name

    def raise_upload_error(self) -> None:
        if self.upload_error is not None:
            raise RuntimeError(f"uploading a checkpoint failed: {self.upload_error!r}") from self.upload_error

    def finish(self) -> None:
        """After the training function: waits for its uploads (the last report counts)."""
        if self.uploader is not None:
            self.uploader.shutdown(wait=True)
            self.uploader = None
        self.raise_upload_error()

    def abandon(self) -> None:
        """After the function failed: the reports still queued would join a failed run."""
        if self.uploader is not None:
            self.uploader.shutdown(wait=True, cancel_futures=True)
            self.uploader = None

    def reported_checkpoints(self, timeout_s: Optional[float]) -> List[ReportedCheckpoint]:
        storage = self.context.storage
        needed = self.reports_before + self.reports_made
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while True:
            self.raise_upload_error()
            entries = committed_checkpoints(storage.read_text(SNAPSHOT), needed)
            if entries is not None:
                return [ReportedCheckpoint(Checkpoint(storage.path(e["dir_name"]), storage.fs), e["metrics"])
                        for e in entries]
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(f"the run did not commit this worker's {needed} reports within {timeout_s} s")
            time.sleep(SNAPSHOT_POLL_S)


def upload_mode(mode: Any) -> CheckpointUploadMode:
    try:
        return CheckpointUploadMode(mode.value if isinstance(mode, enum.Enum) else str(mode).upper())
    except ValueError:
        raise ValueError(f"checkpoint_upload_mode must be one of {[m.name for m in CheckpointUploadMode]}, "
                         f"got {mode!r}") from None


def deletes_local(mode: CheckpointUploadMode, delete_local: Optional[bool]) -> bool:
    """Unless told, an asynchronous upload removes the local copy (the training thread has
    moved on and would not know when to); a synchronous one leaves it to its owner."""
    if delete_local is not None:
        return bool(delete_local) and mode is not CheckpointUploadMode.NO_UPLOAD
    return mode is CheckpointUploadMode.ASYNC


def child_name(path: str, parent: str) -> Optional[str]:
    """The name of `path` when it is a directory right inside `parent`, else None."""
    head, _, name = path.rstrip("/").rpartition("/")
    return name if name and head == parent.rstrip("/") else None


def committed_checkpoints(snapshot_text: Optional[str], needed: int) -> Optional[List[Dict[str, Any]]]:
    """The run's kept checkpoints (worst first, as `Result.best_checkpoints`) once it has
    joined `needed` rounds, else None (not yet, or a snapshot caught half written)."""
    if snapshot_text is None:
        return [] if needed == 0 else None
    try:
        data = json.loads(snapshot_text)
    except ValueError:
        return None
    if int(data.get("current_report_index", 0)) < needed:
        return None
    return list(data.get("checkpoint_results", []))


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
           checkpoint_upload_mode: CheckpointUploadMode = CheckpointUploadMode.SYNC,
           delete_local_checkpoint_after_upload: Optional[bool] = None,
           checkpoint_upload_fn: Optional[Callable[[Checkpoint, str], Checkpoint]] = None,
           validation: Any = False) -> None:
    """Reports this round's metrics, and a checkpoint, which goes to the run's storage
    before this returns (SYNC), in this worker's upload thread (ASYNC: the local directory is
    removed afterwards unless `delete_local_checkpoint_after_upload=False`, and the round is
    committed once it is there), or is already in the run's directory (NO_UPLOAD).
    `checkpoint_upload_fn(checkpoint, dir_name)` replaces the copy and returns the checkpoint
    in the run's directory. Every worker must call report the same number of times: it waits
    for all."""
    if validation:
        raise ValueError("report(validation=...): checkpoint validation is not supported by oxray.train")
    current().report(metrics, checkpoint, checkpoint_dir_name, checkpoint_upload_mode,
                     delete_local_checkpoint_after_upload, checkpoint_upload_fn)


def get_all_reported_checkpoints(consistency_mode: CheckpointConsistencyMode = CheckpointConsistencyMode.VALIDATED,
                                 timeout_s: Optional[float] = None) -> List[ReportedCheckpoint]:
    """The run's kept checkpoints with their metrics (worst first, or in report order when
    there is no score), once every report this worker made is committed (its asynchronous
    uploads too). Not a barrier: it waits for the other ranks' reports of the same rounds
    only. Raises TimeoutError after `timeout_s`."""
    CheckpointConsistencyMode(consistency_mode)
    return current().reported_checkpoints(timeout_s)


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
