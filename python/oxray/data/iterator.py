"""`DataIterator`: one consumer's view of a dataset. Each `iter_*` call is one epoch and runs
the pipeline again (a streaming split's coordinator deals every epoch's rows afresh).

Blocks are fetched, cut into batches and formatted on a background thread
(`prefetch_batches` ahead), so the consumer's step and the pipeline overlap."""

import abc
import queue
import threading
from typing import Any, Callable, Dict, Iterator, Optional

import numpy as np

import oxray
from oxray.data import _block
from oxray.data._batcher import batch_blocks


class DataIterator(abc.ABC):
    """Base of the iterators `Dataset.iterator()` and `Dataset.streaming_split()` return."""

    @abc.abstractmethod
    def _pieces(self) -> Iterator:
        """The pieces of one epoch; the iterator has a `close()`."""

    def _blocks(self) -> Iterator:
        pieces = self._pieces()
        try:
            for piece in pieces:
                block = oxray.get(piece.ref)
                yield _block.slice_block(block, piece.start, piece.stop)
        finally:
            close = getattr(pieces, "close", None)
            if close is not None:
                close()

    def iter_batches(self, *, prefetch_batches: int = 1, batch_size: Optional[int] = 256,
                     batch_format: Optional[str] = "default", drop_last: bool = False,
                     local_shuffle_buffer_size: Optional[int] = None, local_shuffle_seed: Optional[int] = None,
                     _finalize_fn: Optional[Callable] = None) -> Iterator[Any]:
        check_batch_size(batch_size, "iter_batches")
        if batch_format not in _block.BATCH_FORMATS:
            raise ValueError(f"iter_batches: batch_format must be one of {_block.BATCH_FORMATS}, got {batch_format!r}")
        if local_shuffle_buffer_size is not None and (not isinstance(local_shuffle_buffer_size, int)
                                                      or local_shuffle_buffer_size < 1):
            raise ValueError(f"local_shuffle_buffer_size must be a positive integer, got {local_shuffle_buffer_size!r}")
        if prefetch_batches < 0:
            raise ValueError(f"prefetch_batches must not be negative, got {prefetch_batches}")

        def produce():
            for block in batch_blocks(self._blocks(), batch_size, drop_last, local_shuffle_buffer_size,
                                      local_shuffle_seed):
                batch = _block.to_batch(block, batch_format)
                yield _finalize_fn(batch) if _finalize_fn is not None else batch

        if prefetch_batches == 0:
            yield from produce()
        else:
            yield from _in_background(produce, prefetch_batches)

    def iter_torch_batches(self, *, prefetch_batches: int = 1, batch_size: Optional[int] = 256,
                           dtypes: Any = None, device: Any = "auto", collate_fn: Optional[Callable] = None,
                           drop_last: bool = False, local_shuffle_buffer_size: Optional[int] = None,
                           local_shuffle_seed: Optional[int] = None, pin_memory: bool = False) -> Iterator[Any]:
        if collate_fn is not None and dtypes is not None:
            raise ValueError("iter_torch_batches: collate_fn and dtypes cannot be given together; "
                             "convert the types in collate_fn")
        target = _torch_device(device)

        def finalize(batch):
            if collate_fn is not None:
                out = collate_fn(batch)
                return _move(out, target, pin_memory)
            return {name: _tensor(values, _dtype_for(dtypes, name), target, pin_memory)
                    for name, values in batch.items()}

        yield from self.iter_batches(prefetch_batches=prefetch_batches, batch_size=batch_size,
                                     batch_format="numpy", drop_last=drop_last,
                                     local_shuffle_buffer_size=local_shuffle_buffer_size,
                                     local_shuffle_seed=local_shuffle_seed, _finalize_fn=finalize)

    def iter_rows(self) -> Iterator[Dict[str, Any]]:
        for block in self._blocks():
            yield from _block.iter_rows(block)

    def __iter__(self):
        return self.iter_rows()

    def materialize(self):
        from oxray.data._plan import Plan
        from oxray.data._read import put_blocks
        from oxray.data.dataset import MaterializedDataset

        return MaterializedDataset(Plan(put_blocks(self._blocks())))


def check_batch_size(batch_size: Any, where: str) -> None:
    if batch_size is None:
        return
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"{where}: batch_size must be a positive integer or None, got {batch_size!r}")


def _in_background(produce: Callable[[], Iterator], depth: int) -> Iterator:
    """The items of `produce()`, made on a thread of their own up to `depth` ahead."""
    items: "queue.Queue" = queue.Queue(maxsize=depth)
    stop = threading.Event()
    done = object()

    def run():
        source = produce()
        try:
            for item in source:
                while not stop.is_set():
                    try:
                        items.put((item, None), timeout=0.1)
                        break
                    except queue.Full:
                        continue
                if stop.is_set():
                    return
            items.put((done, None))
        except BaseException as e:  # handed to the consumer, raised there
            _put_final(items, (done, e), stop)
        finally:
            source.close()

    thread = threading.Thread(target=run, name="oxray-data-prefetch", daemon=True)
    thread.start()
    try:
        while True:
            item, error = items.get()
            if item is done:
                if error is not None:
                    raise error
                return
            yield item
    finally:
        stop.set()
        thread.join(timeout=30)


def _put_final(items: "queue.Queue", value, stop: threading.Event) -> None:
    while not stop.is_set():
        try:
            items.put(value, timeout=0.1)
            return
        except queue.Full:
            continue


def _torch_device(device: Any):
    import torch

    if device == "auto":
        try:
            from oxray.train import _session

            if _session._session is not None:  # inside a training function
                from oxray.train.torch import get_device

                return get_device()
        except ImportError:
            pass
        return None
    return torch.device(device) if device is not None else None


def _dtype_for(dtypes: Any, name: str):
    if dtypes is None:
        return None
    if isinstance(dtypes, dict):
        if name not in dtypes:
            raise KeyError(f"iter_torch_batches: dtypes names {sorted(dtypes)} but not the column {name!r}; "
                           f"a dict of dtypes must name every column")
        return dtypes[name]
    return dtypes


def _tensor(values: np.ndarray, dtype, device, pin_memory: bool):
    import torch

    if values.dtype == object:
        try:
            values = np.stack(list(values))
        except ValueError as e:
            raise ValueError(f"iter_torch_batches: a column of values of different shapes cannot be a tensor ({e}); "
                             f"use collate_fn") from None
    if not values.flags.writeable:
        values = values.copy()  # a view of the store is read-only; a tensor may be changed in place
    tensor = torch.as_tensor(values, dtype=dtype)
    return _move(tensor, device, pin_memory)


def _move(value: Any, device, pin_memory: bool):
    import torch

    if isinstance(value, torch.Tensor):
        if pin_memory and value.device.type == "cpu" and torch.cuda.is_available():
            value = value.pin_memory()
        return value.to(device, non_blocking=True) if device is not None else value
    if isinstance(value, dict):
        return {k: _move(v, device, pin_memory) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_move(v, device, pin_memory) for v in value)
    return value


class _DatasetIterator(DataIterator):
    """Every epoch runs the whole dataset in the consuming process."""

    def __init__(self, dataset):
        self._dataset = dataset

    def _pieces(self):
        return self._dataset._execute()

    def stats(self) -> str:
        return self._dataset.stats()

    def __repr__(self):
        return f"DataIterator({self._dataset!r})"
