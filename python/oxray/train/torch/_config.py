"""`TorchConfig` and the backend it makes: a process group in every worker."""

import dataclasses
import datetime
import os
from typing import Optional

from oxray.train._trainer import Backend, DataParallelTrainer


@dataclasses.dataclass
class TorchConfig:
    """`backend`: "gloo", "nccl" or a torch form such as "cpu:gloo,cuda:nccl"; unset, NCCL
    when the workers have GPUs and gloo otherwise. `timeout_s` bounds every collective, so
    a rank stuck after a peer died errors out instead of hanging."""

    backend: Optional[str] = None
    init_method: str = "env"
    timeout_s: int = 1800

    def __post_init__(self):
        if self.init_method not in ("env", "tcp"):
            raise ValueError(f"TorchConfig(init_method={self.init_method!r}): 'env' or 'tcp'")
        if not isinstance(self.timeout_s, (int, float)) or self.timeout_s <= 0:
            raise ValueError(f"TorchConfig(timeout_s={self.timeout_s!r}) must be a positive number of seconds")


class _TorchBackend(Backend):
    # torch._dynamo is what DistributedDataParallel imports on first use.
    preload = ("torch", "torch.distributed", "torch._dynamo")

    def __init__(self, config: TorchConfig, use_gpu: bool):
        self.config = config
        self.backend = config.backend or ("nccl" if use_gpu else "gloo")

    def on_worker_start(self, context) -> None:
        import torch.distributed as dist

        from oxray.train.torch._prepare import get_device

        os.environ["ACCELERATE_TORCH_DEVICE"] = str(get_device())
        if "nccl" in self.backend and not (os.environ.get("TORCH_NCCL_ASYNC_ERROR_HANDLING")
                                           or os.environ.get("TORCH_NCCL_BLOCKING_WAIT")):
            os.environ["TORCH_NCCL_ASYNC_ERROR_HANDLING"] = "1"
        if self.config.init_method == "env":
            url = "env://"
        else:
            url = f"tcp://{os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']}"
        dist.init_process_group(backend=self.backend, init_method=url, rank=context.world_rank,
                                world_size=context.world_size, timeout=datetime.timedelta(seconds=self.config.timeout_s))

    def before_train(self) -> None:
        import torch

        from oxray.train.torch._prepare import get_device

        device = get_device()
        if device.type == "cuda":
            torch.cuda.set_device(device)

    def on_worker_shutdown(self) -> None:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            dist.destroy_process_group()


class TorchTrainer(DataParallelTrainer):
    """Runs `train_loop_per_worker` on `scaling_config.num_workers` workers with a torch
    process group set up in each."""

    _label = "TorchTrainer"

    def __init__(self, train_loop_per_worker, *, train_loop_config=None, torch_config: Optional[TorchConfig] = None,
                 scaling_config=None, run_config=None, datasets=None, dataset_config=None, validation_config=None,
                 metadata=None, resume_from_checkpoint=None):
        from oxray.train._config import ScalingConfig

        if validation_config is not None:
            raise ValueError("TorchTrainer(validation_config=...): checkpoint validation is not supported by "
                             "oxray.train; validate from a UserCallback's after_report or after fit()")

        scaling_config = scaling_config or ScalingConfig()
        super().__init__(train_loop_per_worker, train_loop_config=train_loop_config,
                         backend_config=_TorchBackend(torch_config or TorchConfig(), scaling_config.use_gpu),
                         scaling_config=scaling_config, run_config=run_config, datasets=datasets,
                         dataset_config=dataset_config, metadata=metadata, resume_from_checkpoint=resume_from_checkpoint)
