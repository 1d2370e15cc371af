"""Distributed training with Ray Train's names (Ray 2.60, Train V2): a trainer runs a
training function on a group of workers (actors in one placement group), joins their
reports into committed checkpoints in the run's storage, and starts the group again from
the newest checkpoint when a worker or a node fails.

    from oxray.train import ScalingConfig, RunConfig, CheckpointConfig, FailureConfig, Checkpoint
    from oxray.train.torch import TorchTrainer
"""

from oxray.train import collective
from oxray.train._callbacks import UserCallback
from oxray.train._checkpoint import Checkpoint
from oxray.train._config import CheckpointConfig, DataConfig, FailureConfig, RunConfig, ScalingConfig
from oxray.train._errors import (ControllerError, InsufficientClusterResourcesError, TrainingFailedError,
                                 WorkerGroupError)
from oxray.train._result import Result
from oxray.train._session import (CheckpointConsistencyMode, CheckpointUploadMode, ReportedCheckpoint, TrainContext,
                                  get_all_reported_checkpoints, get_checkpoint, get_context, get_dataset_shard,
                                  report)
from oxray.train._trainer import Backend, DataParallelTrainer

__all__ = [
    "Backend", "Checkpoint", "CheckpointConfig", "CheckpointConsistencyMode", "CheckpointUploadMode",
    "ControllerError", "DataConfig", "DataParallelTrainer", "FailureConfig", "InsufficientClusterResourcesError",
    "ReportedCheckpoint", "Result", "RunConfig", "ScalingConfig", "TrainContext", "TrainingFailedError",
    "UserCallback", "WorkerGroupError", "collective", "get_all_reported_checkpoints", "get_checkpoint", "get_context",
    "get_dataset_shard", "report",
]
