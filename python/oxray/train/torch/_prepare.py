"""What makes a single-process torch script data-parallel inside a worker: its device, a
DistributedDataParallel model, a data loader with a DistributedSampler."""

import os
import random
from typing import Any, List

import torch


def _world_size() -> int:
    from oxray.train import _session

    return _session._session.context.world_size if _session._session is not None else 1


def get_devices() -> List[torch.device]:
    """The worker's GPUs as torch devices (their index within CUDA_VISIBLE_DEVICES, which
    the workers of a node share), or the CPU when it has none."""
    own = os.environ.get("OXRAY_TRAIN_GPU_IDS")
    visible = [g.strip() for g in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if g.strip()]
    ids = [g for g in own.split(",") if g] if own is not None else visible
    if ids and torch.cuda.is_available():
        return [torch.device("cuda", visible.index(g) if g in visible else i) for i, g in enumerate(ids)]
    return [torch.device("cpu")]


def get_device() -> torch.device:
    return get_devices()[0]


def prepare_model(model: torch.nn.Module, move_to_device: Any = True, parallel_strategy: str = "ddp",
                  parallel_strategy_kwargs: dict = None) -> torch.nn.Module:
    """Moves the model to the worker's device and, with more than one worker, wraps it in
    DistributedDataParallel ("ddp") or FullyShardedDataParallel ("fsdp")."""
    device = move_to_device if isinstance(move_to_device, torch.device) else get_device()
    if device.type == "cuda":
        torch.cuda.set_device(device)
    if move_to_device:
        model = model.to(device)
    kwargs = dict(parallel_strategy_kwargs or {})
    if _world_size() <= 1 or parallel_strategy is None:
        return model
    if parallel_strategy == "ddp":
        from torch.nn.parallel import DistributedDataParallel

        if device.type == "cuda":
            kwargs.setdefault("device_ids", [device])
            kwargs.setdefault("output_device", device)
        return DistributedDataParallel(model, **kwargs)
    if parallel_strategy == "fsdp":
        from torch.distributed.fsdp import FullyShardedDataParallel

        return FullyShardedDataParallel(model, **kwargs)
    raise ValueError(f"parallel_strategy={parallel_strategy!r}: 'ddp', 'fsdp' or None")


def _to(batch, device):
    if isinstance(batch, torch.Tensor):
        return batch.to(device, non_blocking=True)
    if isinstance(batch, dict):
        return {k: _to(v, device) for k, v in batch.items()}
    if isinstance(batch, (list, tuple)):
        moved = [_to(v, device) for v in batch]
        return type(batch)(*moved) if hasattr(batch, "_fields") else type(batch)(moved)
    return batch


class _DeviceLoader:
    """A data loader whose batches arrive on the worker's device."""

    def __init__(self, loader, device):
        self._loader, self._device = loader, device

    def __iter__(self):
        for batch in self._loader:
            yield _to(batch, self._device)

    def __len__(self):
        return len(self._loader)

    def __getattr__(self, name):
        return getattr(self._loader, name)


def prepare_data_loader(data_loader: torch.utils.data.DataLoader, add_dist_sampler: bool = True,
                        move_to_device: bool = True, auto_transfer: bool = True):
    """With more than one worker, the same loader over this worker's part of the data (a
    DistributedSampler, shuffling when the original did); its batches on the device. Call
    `loader.sampler.set_epoch(epoch)` each epoch for a new shuffle."""
    from torch.utils.data import DataLoader, DistributedSampler, IterableDataset, SequentialSampler

    loader = data_loader
    if (add_dist_sampler and _world_size() > 1 and not isinstance(loader.dataset, IterableDataset)
            and not isinstance(loader.sampler, DistributedSampler)):
        shuffle = not isinstance(loader.sampler, SequentialSampler)
        loader = DataLoader(
            loader.dataset, batch_size=loader.batch_size, sampler=DistributedSampler(loader.dataset, shuffle=shuffle),
            num_workers=loader.num_workers, collate_fn=loader.collate_fn, pin_memory=loader.pin_memory,
            drop_last=loader.drop_last, timeout=loader.timeout, worker_init_fn=loader.worker_init_fn,
            generator=loader.generator)
    if move_to_device:
        device = get_device()
        if device.type != "cpu":
            return _DeviceLoader(loader, device)
    return loader


def enable_reproducibility(seed: int = 0) -> None:
    torch.manual_seed(seed)
    random.seed(seed)
    try:
        import numpy

        numpy.random.seed(seed)
    except ImportError:
        pass
    torch.use_deterministic_algorithms(True)
    torch.backends.cudnn.benchmark = False
    os.environ["CUBLAS_WORKSPACE_CONFIG"] = ":4096:8"


def _removed(name: str, instead: str):
    def removed(*args, **kwargs):
        raise DeprecationWarning(f"oxray.train.torch.{name}() is not part of Train V2 (Ray removed it): {instead}")

    removed.__name__ = name
    return removed


# A ported script that still calls these stops with what to do instead.
accelerate = _removed("accelerate", "use torch.autocast / torch.amp in the training function")
backward = _removed("backward", "call loss.backward()")
prepare_optimizer = _removed("prepare_optimizer", "use the optimizer as it is")
