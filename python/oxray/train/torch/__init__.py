"""PyTorch on a worker group: `TorchTrainer` sets up `torch.distributed` in every worker
(gloo on CPUs, NCCL on GPUs, torchrun's environment) before the training function starts;
`prepare_model` and `prepare_data_loader` make a single-process script data-parallel."""

from oxray.train.torch._config import TorchConfig, TorchTrainer
from oxray.train.torch._prepare import (accelerate, backward, enable_reproducibility, get_device, get_devices,
                                        prepare_data_loader, prepare_model, prepare_optimizer)

__all__ = ["TorchConfig", "TorchTrainer", "accelerate", "backward", "enable_reproducibility", "get_device",
           "get_devices", "prepare_data_loader", "prepare_model", "prepare_optimizer"]
