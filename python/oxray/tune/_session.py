"""What a trial's code sees inside its worker: `report`, `get_checkpoint`, `get_context`.
Each report waits for the run's decision (go on, or stop), so a scheduler stops a trial
exactly at the result it judged."""

import datetime
import os
import shutil
import socket
import time
from typing import Any, Callable, Dict, Optional

from oxray.train._checkpoint import Checkpoint
from oxray.train._storage import copy_dir
from oxray.tune._errors import StopTrial


class TuneContext:
    def __init__(self, info: Dict[str, Any]):
        self._info = info

    def get_trial_id(self) -> str:
        return self._info["trial_id"]

    def get_trial_name(self) -> str:
        return self._info["trial_name"]

    def get_trial_dir(self) -> str:
        return self._info["trial_dir"]

    def get_experiment_name(self) -> str:
        return self._info["experiment_name"]

    def get_trial_resources(self):
        """A PlacementGroupFactory of the trial's bundles, as in Ray."""
        from oxray.tune._trainable import PlacementGroupFactory

        resources = self._info.get("resources") or {"bundles": [{"CPU": 1.0}]}
        return PlacementGroupFactory(resources["bundles"], resources.get("strategy", "PACK"))

    def get_world_rank(self) -> int:
        return 0

    def get_world_size(self) -> int:
        return 1

    def get_local_rank(self) -> int:
        return 0


def checkpoint_dir_name(index: int) -> str:
    return f"checkpoint_{index:06d}"


class TrialSession:
    """One run of a trial in a worker. `exchange(result)` hands a result to the driver and
    returns its decision ("continue" or "stop")."""

    def __init__(self, info: Dict[str, Any], checkpoint: Optional[Checkpoint], exchange: Callable[[Dict], str]):
        self.info, self.checkpoint, self.exchange = info, checkpoint, exchange
        self.context = TuneContext(info)
        self.iteration = info.get("iteration", 0)  # continues after a restore
        self.checkpoint_index = info.get("checkpoint_index", 0)
        self.iterations_since_restore = 0
        self.time_total = info.get("time_total_s", 0.0)
        self.started = self.last = time.time()
        self.hostname = socket.gethostname()
        self.node_ip = os.environ.get("OXRAY_NODE_IP") or "127.0.0.1"

    def persist(self, checkpoint: Checkpoint) -> str:
        """Copies the checkpoint into the trial's directory in storage, straight from here."""
        name = checkpoint_dir_name(self.checkpoint_index)
        fs, trial_dir = self.info.get("storage") or (None, self.info["trial_dir"])
        target = f"{trial_dir}/{name}"
        if fs is None and checkpoint.filesystem is not None:
            checkpoint.to_directory(target)
        elif fs is None:
            if os.path.abspath(checkpoint.path) != os.path.abspath(target):
                shutil.copytree(checkpoint.path, target, dirs_exist_ok=True)
        else:
            with checkpoint.as_directory() as local:
                copy_dir(local, None, target, fs)
        self.checkpoint_index += 1
        self.checkpoint = Checkpoint(target, fs)
        return name

    def report(self, metrics: Dict[str, Any], checkpoint: Optional[Checkpoint] = None) -> None:
        if not isinstance(metrics, dict):
            raise TypeError(f"tune.report() takes a dict of metrics, got {type(metrics).__name__}")
        now = time.time()
        self.iteration += 1
        self.iterations_since_restore += 1
        self.time_total += now - self.last
        result = dict(metrics)
        result.update(
            checkpoint_dir_name=self.persist(checkpoint) if checkpoint is not None else None,
            done=bool(metrics.get("done", False)),
            training_iteration=self.iteration,
            trial_id=self.info["trial_id"],
            date=datetime.datetime.fromtimestamp(now).strftime("%Y-%m-%d_%H-%M-%S"),
            timestamp=int(now),
            time_this_iter_s=now - self.last,
            time_total_s=self.time_total,
            pid=os.getpid(),
            hostname=self.hostname,
            node_ip=self.node_ip,
            config=self.info["config"],
            time_since_restore=now - self.started,
            iterations_since_restore=self.iterations_since_restore,
        )
        result.setdefault("should_checkpoint", checkpoint is not None)
        self.last = now
        if self.exchange(result) == "stop":
            raise StopTrial()
        self.last = time.time()  # the driver's think time is not the trial's


_session: Optional[TrialSession] = None


def install(session: Optional[TrialSession]) -> None:
    global _session
    _session = session


def current() -> TrialSession:
    if _session is None:
        raise RuntimeError("this is not inside a Tune trial: tune.report, get_checkpoint and get_context work in "
                           "the trainable a Tuner runs")
    return _session


def report(metrics: Dict[str, Any], *, checkpoint: Optional[Checkpoint] = None, checkpoint_dir_name=None) -> None:
    """Reports one result (one `training_iteration`), with a checkpoint saved into the
    trial's directory before this returns."""
    current().report(metrics, checkpoint)


def get_checkpoint() -> Optional[Checkpoint]:
    """The checkpoint to resume from (after a retry or a restore), else None."""
    return current().checkpoint


def get_context() -> TuneContext:
    return current().context


class TrainShim:
    """Stands for a train session inside a trial, so `oxray.train.report` there reports to
    Tune (the pattern of a training function run directly as a trainable)."""

    def __init__(self, session: TrialSession):
        self.session = session
        self.dataset_shards: Dict[str, Any] = {}

    @property
    def checkpoint(self):
        return self.session.checkpoint

    @property
    def context(self):
        return self.session.context

    def report(self, metrics, checkpoint, dir_name, *upload_options):
        # A trial keeps its checkpoints itself: Train's upload options do not apply.
        self.session.report(metrics, checkpoint)
