"""The per-block transforms a dataset's operators apply, run inside tasks and pool actors.
Consecutive transforms with the same compute are fused into one `Stage`: one task per block
for a whole chain of `map`, `map_batches`, `filter`, ..."""

import abc
import inspect
import time
from typing import Any, Callable, Dict, List, Optional, Tuple

import numpy as np

from oxray.data import _block
from oxray.data.exceptions import UserCodeException


def describe(fn: Any) -> str:
    return getattr(fn, "__name__", None) or type(fn).__name__


def is_class(fn: Any) -> bool:
    return inspect.isclass(fn)


class Transform(abc.ABC):
    """One operator's work on a block. `setup` runs once per process before the first block
    (a callable class is constructed there)."""

    name = "Transform"
    fn: Any = None

    def setup(self) -> None:
        pass

    @abc.abstractmethod
    def apply(self, block):
        """The block this transform makes of `block`."""

    def _call(self, target: Callable, *args, rows: int):
        try:
            return target(*args)
        except UserCodeException:
            raise
        except Exception as e:
            raise UserCodeException(f"{self.name} failed on a block of {rows} rows: {type(e).__name__}: {e}") from e


class _UserFunction(Transform):
    """A transform around a user function or callable class (`fn_args`, `fn_kwargs`, and
    `fn_constructor_args`/`fn_constructor_kwargs` for a class)."""

    def __init__(self, kind: str, fn: Any, fn_args=(), fn_kwargs=None, ctor_args=(), ctor_kwargs=None):
        self.fn, self.fn_args, self.fn_kwargs = fn, tuple(fn_args or ()), dict(fn_kwargs or {})
        self.ctor_args, self.ctor_kwargs = tuple(ctor_args or ()), dict(ctor_kwargs or {})
        self.name = f"{kind}({describe(fn)})"
        self._callable = None if is_class(fn) else fn

    def setup(self) -> None:
        if self._callable is None:
            try:
                self._callable = self.fn(*self.ctor_args, **self.ctor_kwargs)
            except Exception as e:
                raise UserCodeException(f"{self.name}: constructing {describe(self.fn)} failed: "
                                        f"{type(e).__name__}: {e}") from e

    def __getstate__(self):
        state = dict(self.__dict__)
        if is_class(self.fn):
            state["_callable"] = None  # each process constructs its own instance
        return state

    def invoke(self, value, rows: int):
        if self._callable is None:
            self.setup()
        fn, args, kwargs = self._callable, self.fn_args, self.fn_kwargs
        return self._call(lambda v: fn(v, *args, **kwargs), value, rows=rows)


class MapRows(_UserFunction):
    def __init__(self, fn, **kw):
        super().__init__("Map", fn, **kw)

    def apply(self, block):
        rows = _block.num_rows(block)
        out = [self.invoke(row, rows) for row in _block.iter_rows(block)]
        for row in out:
            if not isinstance(row, dict):
                raise TypeError(f"{self.name} must return a dict for each row, got {type(row).__name__}")
        return _block.from_rows(out, self.name)


class FlatMap(_UserFunction):
    def __init__(self, fn, **kw):
        super().__init__("FlatMap", fn, **kw)

    def apply(self, block):
        rows = _block.num_rows(block)
        out = []
        for row in _block.iter_rows(block):
            produced = self.invoke(row, rows)
            if isinstance(produced, dict):
                raise TypeError(f"{self.name} must return a list (or iterable) of dict rows, got a dict")
            out.extend(produced)
        return _block.from_rows(out, self.name)


class Filter(_UserFunction):
    def __init__(self, fn, **kw):
        super().__init__("Filter", fn, **kw)

    def apply(self, block):
        rows = _block.num_rows(block)
        keep = np.fromiter((bool(self.invoke(row, rows)) for row in _block.iter_rows(block)), dtype=bool, count=rows)
        return _block.mask(block, keep)


class MapBatches(_UserFunction):
    def __init__(self, fn, batch_size: Optional[int], batch_format: str, zero_copy_batch: bool = False, **kw):
        super().__init__("MapBatches", fn, **kw)
        self.batch_size, self.batch_format, self.zero_copy_batch = batch_size, batch_format, zero_copy_batch

    def apply(self, block):
        out = []
        for batch in _block.batches(block, self.batch_size):
            rows = _block.num_rows(batch)
            value = _block.to_batch(batch, self.batch_format)
            if self.batch_format in ("default", "numpy") and not self.zero_copy_batch:
                value = _writable(value)
            result = self.invoke(value, rows)
            if inspect.isgenerator(result) or (hasattr(result, "__next__") and not isinstance(result, dict)):
                out.extend(_block.from_batch(r, self.name) for r in result)
            else:
                out.append(_block.from_batch(result, self.name))
        return _block.concat(out) if out else {}


def _writable(batch: Dict[str, np.ndarray]) -> Dict[str, np.ndarray]:
    """Ray hands a batch function arrays it may change in place; views of the store are
    read-only, so those are copied (`zero_copy_batch=True` skips the copy)."""
    return {k: (v if v.flags.writeable else v.copy()) for k, v in batch.items()}


class AddColumn(_UserFunction):
    def __init__(self, column: str, fn, batch_format: str = "pandas", **kw):
        super().__init__("AddColumn", fn, **kw)
        self.column, self.batch_format = column, batch_format

    def apply(self, block):
        rows = _block.num_rows(block)
        values = self.invoke(_block.to_batch(block, self.batch_format), rows)
        return _block.with_column(block, self.column, values, self.name)


class SelectColumns(Transform):
    def __init__(self, columns: List[str]):
        self.columns, self.name = list(columns), f"SelectColumns({columns})"

    def apply(self, block):
        return _block.select(block, self.columns, self.name)


class DropColumns(Transform):
    def __init__(self, columns: List[str]):
        self.columns, self.name = list(columns), f"DropColumns({columns})"

    def apply(self, block):
        return _block.drop(block, self.columns, self.name)


class RenameColumns(Transform):
    def __init__(self, names: Dict[str, str]):
        self.names, self.name = dict(names), f"RenameColumns({names})"

    def apply(self, block):
        _block.select(block, list(self.names), self.name)
        if isinstance(block, dict):
            return {self.names.get(k, k): v for k, v in block.items()}
        return block.rename_columns([self.names.get(k, k) for k in block.column_names])


class Stage:
    """A fused chain: an optional read (a zero-argument callable returning blocks) and the
    transforms, run on the concatenation of the input pieces."""

    def __init__(self, transforms: List[Transform], read: Optional[Callable] = None, read_name: str = ""):
        self.transforms, self.read, self.read_name = list(transforms), read, read_name

    @property
    def name(self) -> str:
        names = ([self.read_name] if self.read_name else []) + [t.name for t in self.transforms]
        return "->".join(names) or "Identity"

    def setup(self) -> None:
        for t in self.transforms:
            t.setup()

    def run(self, read: Optional[Callable], bounds: List[Tuple[int, int]], blocks: Tuple[Any, ...]):
        """The output block and its metadata (rows, bytes, schema, times)."""
        began, cpu = time.perf_counter(), time.process_time()
        if read is not None:
            block = _block.concat(list(read()))
        else:
            block = _block.concat([_block.slice_block(b, s, e) for b, (s, e) in zip(blocks, bounds)])
        for t in self.transforms:
            if not _block.num_rows(block):
                break  # functions are not called on empty blocks, which are dropped
            block = t.apply(block)
        meta = {"rows": _block.num_rows(block), "bytes": _block.size_bytes(block),
                "schema": _block.Schema.of(block) if _block.column_names(block) else None,
                "wall_s": time.perf_counter() - began, "cpu_s": time.process_time() - cpu}
        return block, meta


class StageTask:
    """The function of a stage's tasks (`num_returns=2`: the block, then its metadata),
    shipped to a worker once, however many blocks it runs on."""

    def __init__(self, stage: Stage):
        self.stage, self.__name__ = stage, stage.name

    def __call__(self, read, bounds, *blocks):
        return self.stage.run(read, bounds, blocks)


class StageActor:
    """A pool actor: constructs the stage's callable classes once, then runs blocks."""

    def __init__(self, stage: Stage):
        self.stage = stage
        stage.setup()

    def ready(self) -> bool:
        return True

    def run(self, bounds, *blocks):
        return self.stage.run(None, bounds, blocks)
