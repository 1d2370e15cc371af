"""`Dataset`: a lazy plan of reads and transforms, executed as a stream when consumed."""

import functools
import itertools
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple, Union

from oxray.data import _block, _plan, _shuffle, _split, _transforms
from oxray.data._executor import Execution
from oxray.data._plan import ActorPoolStrategy, AllToAllOp, BlocksSource, LimitOp, MapOp, Plan, UnionSource
from oxray.data._progress import Progress
from oxray.data._stats import ExecutionStats
from oxray.data.context import DataContext
from oxray.data.iterator import DataIterator, _DatasetIterator, check_batch_size

DEFAULT_BATCH_SIZE = 1024
_REMOTE_ARGS = {"num_cpus", "num_gpus", "memory", "resources", "scheduling_strategy", "max_retries",
                "retry_exceptions", "runtime_env", "accelerator_type", "label_selector"}


class Dataset:
    def __init__(self, plan: Plan, context: Optional[DataContext] = None):
        self._plan = plan
        self._context = context or DataContext.get_current()
        self._last_stats: Optional[ExecutionStats] = None

    def _with(self, op) -> "Dataset":
        return Dataset(self._plan.then(op), self._context)

    # ---- transforms (lazy) -----------------------------------------------------------------

    def _map_op(self, transform, where: str, compute, concurrency, num_cpus, num_gpus, memory,
                ray_remote_args: Dict[str, Any], min_rows: Optional[int] = None) -> "Dataset":
        unknown = set(ray_remote_args) - _REMOTE_ARGS
        if unknown:
            raise TypeError(f"{where} got unexpected arguments {sorted(unknown)}")
        remote_args = dict(ray_remote_args)
        for name, value in (("num_cpus", num_cpus), ("num_gpus", num_gpus), ("memory", memory)):
            if value is not None:
                if value < 0:
                    raise ValueError(f"{where}: {name} must not be negative, got {value}")
                remote_args[name] = value
        is_class = _transforms.is_class(transform.fn)
        strategy, task_cap = _compute(compute, concurrency, is_class, where)
        return self._with(MapOp(transform, strategy, remote_args, min_rows, task_cap))

    def map(self, fn, *, compute=None, fn_args=None, fn_kwargs=None, fn_constructor_args=None,
            fn_constructor_kwargs=None, num_cpus=None, num_gpus=None, memory=None, concurrency=None,
            **ray_remote_args) -> "Dataset":
        _check_callable(fn, "map")
        t = _transforms.MapRows(fn, fn_args=fn_args, fn_kwargs=fn_kwargs, ctor_args=fn_constructor_args,
                                ctor_kwargs=fn_constructor_kwargs)
        return self._map_op(t, t.name, compute, concurrency, num_cpus, num_gpus, memory, ray_remote_args)

    def map_batches(self, fn, *, batch_size: Union[int, None, str] = "default", compute=None,
                    batch_format: Optional[str] = "default", zero_copy_batch: bool = False, fn_args=None,
                    fn_kwargs=None, fn_constructor_args=None, fn_constructor_kwargs=None, num_cpus=None,
                    num_gpus=None, memory=None, concurrency=None, **ray_remote_args) -> "Dataset":
        _check_callable(fn, "map_batches")
        where = f"MapBatches({_transforms.describe(fn)})"
        if batch_size == "default":
            batch_size = DEFAULT_BATCH_SIZE
        elif batch_size == "auto":
            batch_size = None
        check_batch_size(batch_size, where)
        if batch_format is None:
            batch_format = "default"
        if batch_format not in _block.BATCH_FORMATS:
            raise ValueError(f"{where}: batch_format must be one of {_block.BATCH_FORMATS}, got {batch_format!r}")
        if num_gpus and batch_size is None:
            raise ValueError(f"{where}: num_gpus needs an integer batch_size")
        if not _transforms.is_class(fn) and (fn_constructor_args or fn_constructor_kwargs):
            raise ValueError(f"{where}: fn_constructor_args and fn_constructor_kwargs are for callable classes")
        t = _transforms.MapBatches(fn, batch_size, batch_format, zero_copy_batch, fn_args=fn_args,
                                   fn_kwargs=fn_kwargs, ctor_args=fn_constructor_args,
                                   ctor_kwargs=fn_constructor_kwargs)
        return self._map_op(t, where, compute, concurrency, num_cpus, num_gpus, memory, ray_remote_args,
                            min_rows=batch_size)

    def filter(self, fn=None, *, expr=None, compute=None, fn_args=None, fn_kwargs=None, fn_constructor_args=None,
               fn_constructor_kwargs=None, num_cpus=None, num_gpus=None, memory=None, concurrency=None,
               **ray_remote_args) -> "Dataset":
        if expr is not None:
            raise NotImplementedError("filter(expr=...) is not supported; pass a function of a row")
        _check_callable(fn, "filter")
        t = _transforms.Filter(fn, fn_args=fn_args, fn_kwargs=fn_kwargs, ctor_args=fn_constructor_args,
                               ctor_kwargs=fn_constructor_kwargs)
        return self._map_op(t, t.name, compute, concurrency, num_cpus, num_gpus, memory, ray_remote_args)

    def flat_map(self, fn, *, compute=None, fn_args=None, fn_kwargs=None, fn_constructor_args=None,
                 fn_constructor_kwargs=None, num_cpus=None, num_gpus=None, memory=None, concurrency=None,
                 **ray_remote_args) -> "Dataset":
        _check_callable(fn, "flat_map")
        t = _transforms.FlatMap(fn, fn_args=fn_args, fn_kwargs=fn_kwargs, ctor_args=fn_constructor_args,
                                ctor_kwargs=fn_constructor_kwargs)
        return self._map_op(t, t.name, compute, concurrency, num_cpus, num_gpus, memory, ray_remote_args)

    def add_column(self, col: str, fn: Callable, *, batch_format: Optional[str] = "pandas", compute=None,
                   concurrency=None, **ray_remote_args) -> "Dataset":
        _check_callable(fn, "add_column")
        if batch_format not in _block.BATCH_FORMATS:
            raise ValueError(f"add_column: batch_format must be one of {_block.BATCH_FORMATS}, got {batch_format!r}")
        t = _transforms.AddColumn(col, fn, batch_format)
        return self._map_op(t, t.name, compute, concurrency, None, None, None, ray_remote_args)

    def drop_columns(self, cols: List[str], *, compute=None, concurrency=None, **ray_remote_args) -> "Dataset":
        return self._map_op(_transforms.DropColumns(_names(cols, "drop_columns")), "drop_columns", compute,
                            concurrency, None, None, None, ray_remote_args)

    def select_columns(self, cols: Union[str, List[str]], *, compute=None, concurrency=None,
                       **ray_remote_args) -> "Dataset":
        return self._map_op(_transforms.SelectColumns(_names(cols, "select_columns")), "select_columns", compute,
                            concurrency, None, None, None, ray_remote_args)

    def rename_columns(self, names: Dict[str, str], *, concurrency=None, **ray_remote_args) -> "Dataset":
        if not isinstance(names, dict):
            raise TypeError(f"rename_columns takes a dict of old to new names, got {type(names).__name__}")
        return self._map_op(_transforms.RenameColumns(names), "rename_columns", None, concurrency, None, None,
                            None, ray_remote_args)

    def limit(self, limit: int) -> "Dataset":
        if not isinstance(limit, int) or isinstance(limit, bool) or limit < 0:
            raise ValueError(f"limit must be a non-negative integer, got {limit!r}")
        return self._with(LimitOp(limit))

    def repartition(self, num_blocks: int, *, shuffle: bool = False) -> "Dataset":
        if not isinstance(num_blocks, int) or num_blocks < 1:
            raise ValueError(f"repartition: num_blocks must be a positive integer, got {num_blocks!r}")
        if shuffle:
            run = functools.partial(_shuffle.random_shuffle, seed=None, num_blocks=num_blocks)
            return self._with(AllToAllOp(f"Repartition[{num_blocks}, shuffle]", run))
        return self._with(AllToAllOp(f"Repartition[{num_blocks}]",
                                     functools.partial(_shuffle.repartition, num_blocks=num_blocks)))

    def random_shuffle(self, *, seed: Optional[int] = None, num_blocks: Optional[int] = None) -> "Dataset":
        run = functools.partial(_shuffle.random_shuffle, seed=seed, num_blocks=num_blocks)
        return self._with(AllToAllOp("RandomShuffle", run))

    def randomize_block_order(self, *, seed: Optional[int] = None) -> "Dataset":
        return self._with(AllToAllOp("RandomizeBlockOrder",
                                     functools.partial(_shuffle.randomize_block_order, seed=seed)))

    def union(self, *others: "Dataset") -> "Dataset":
        for other in others:
            if not isinstance(other, Dataset):
                raise TypeError(f"union takes datasets, got {type(other).__name__}")
        return Dataset(Plan(UnionSource((self._plan,) + tuple(o._plan for o in others))), self._context)

    # ---- splits ----------------------------------------------------------------------------

    def split(self, n: int, *, equal: bool = False, locality_hints=None) -> List["MaterializedDataset"]:
        if not isinstance(n, int) or n < 1:
            raise ValueError(f"split: n must be a positive integer, got {n!r}")
        pieces = self._materialized_pieces()
        total = sum(p.rows for p in pieces)
        if equal:
            ranges = [(i * (total // n), (i + 1) * (total // n)) for i in range(n)]
        else:
            ranges = _plan.row_ranges(total, n)
        return [MaterializedDataset._of(_shuffle.cut(pieces, a, b), self._context) for a, b in ranges]

    def split_at_indices(self, indices: List[int]) -> List["MaterializedDataset"]:
        if any(b < a for a, b in zip(indices, indices[1:])) or any(i < 0 for i in indices):
            raise ValueError(f"split_at_indices: indices must be non-negative and sorted, got {indices}")
        pieces = self._materialized_pieces()
        total = sum(p.rows for p in pieces)
        bounds = [0] + [min(i, total) for i in indices] + [total]
        return [MaterializedDataset._of(_shuffle.cut(pieces, a, b), self._context) for a, b in zip(bounds, bounds[1:])]

    def split_proportionately(self, proportions: List[float]) -> List["MaterializedDataset"]:
        if not proportions or any(p <= 0 for p in proportions) or sum(proportions) >= 1:
            raise ValueError(f"split_proportionately: proportions must be positive and sum to less than 1, "
                             f"got {proportions}")
        total = self.count()
        indices = [int(total * p) for p in itertools.accumulate(proportions)]
        return self.split_at_indices(indices)

    def train_test_split(self, test_size: Union[int, float], *, shuffle: bool = False,
                         seed: Optional[int] = None) -> Tuple["MaterializedDataset", "MaterializedDataset"]:
        dataset = self.random_shuffle(seed=seed) if shuffle else self
        if isinstance(test_size, float):
            if not 0 < test_size < 1:
                raise ValueError(f"train_test_split: a float test_size must be between 0 and 1, got {test_size}")
        elif not isinstance(test_size, int) or test_size < 1:
            raise ValueError(f"train_test_split: test_size must be a positive integer or a fraction, got {test_size!r}")
        materialized = dataset.materialize()
        total = materialized.count()
        test_rows = int(total * test_size) if isinstance(test_size, float) else test_size
        if test_rows > total:
            raise ValueError(f"train_test_split: test_size {test_size} is more than the {total} rows of the dataset")
        train, test = materialized.split_at_indices([total - test_rows])
        return train, test

    def streaming_split(self, n: int, *, equal: bool = False, locality_hints=None) -> List[DataIterator]:
        return _split.streaming_split(self, n, equal, locality_hints)

    # ---- execution -------------------------------------------------------------------------

    def _describe(self) -> str:
        names = []
        source = self._plan.source
        if isinstance(source, _plan.ReadSource):
            names.append(source.name)
        elif isinstance(source, UnionSource):
            names.append("Union")
        for op in self._plan.ops:
            if isinstance(op, MapOp):
                names.append(op.transform.name)
            elif isinstance(op, LimitOp):
                names.append(f"Limit[{op.limit}]")
            else:
                names.append(op.name)
        return "Dataset" if not names else "->".join(names)

    def _execute(self, progress_name: Optional[str] = "") -> Execution:
        stats = ExecutionStats()
        if self._plan.ops or not isinstance(self._plan.source, BlocksSource) or self._last_stats is None:
            self._last_stats = stats  # reading blocks already made keeps the stats of their making
        show = progress_name is not None and self._context.enable_progress_bars
        progress = Progress(progress_name or self._describe(), self._known_rows(), enabled=show) if show else None
        return Execution(self._plan, self._context.budget_bytes(), progress, stats,
                         self._context.scheduling_strategy)

    def _known_rows(self) -> Optional[int]:
        """The row count when it is known without running anything."""
        if any(not isinstance(op, LimitOp) for op in self._plan.ops):
            return None
        source = self._plan.source
        if isinstance(source, BlocksSource):
            total = sum(p.rows for p in source.pieces)
        elif isinstance(source, _plan.ReadSource) and all(t.rows is not None for t in source.tasks):
            total = sum(t.rows for t in source.tasks)
        else:
            return None
        for op in self._plan.ops:
            total = min(total, op.limit)
        return total

    def _materialized_pieces(self) -> List[_plan.Piece]:
        if isinstance(self._plan.source, BlocksSource) and not self._plan.ops:
            return list(self._plan.source.pieces)
        return list(self._execute())

    def materialize(self) -> "MaterializedDataset":
        out = MaterializedDataset._of(self._materialized_pieces(), self._context)
        out._last_stats = self._last_stats
        return out

    def iterator(self) -> DataIterator:
        return _DatasetIterator(self)

    def iter_batches(self, **kwargs) -> Iterator[Any]:
        return self.iterator().iter_batches(**kwargs)

    def iter_torch_batches(self, **kwargs) -> Iterator[Any]:
        return self.iterator().iter_torch_batches(**kwargs)

    def iter_rows(self) -> Iterator[Dict[str, Any]]:
        return self.iterator().iter_rows()

    def __iter__(self):
        return self.iter_rows()

    def take(self, limit: int = 20) -> List[Dict[str, Any]]:
        return list(itertools.islice(self.limit(limit).iter_rows(), limit))

    def take_all(self, limit: Optional[int] = None) -> List[Dict[str, Any]]:
        rows = list(self.iter_rows() if limit is None else self.limit(limit + 1).iter_rows())
        if limit is not None and len(rows) > limit:
            raise ValueError(f"take_all: the dataset has more than {limit} rows")
        return rows

    def take_batch(self, batch_size: int = 20, *, batch_format: Optional[str] = "default"):
        check_batch_size(batch_size, "take_batch")
        blocks = list(self.limit(batch_size).iterator()._blocks())
        if not blocks:
            raise ValueError("take_batch: the dataset is empty")
        return _block.to_batch(_block.concat(blocks), batch_format or "default")

    def show(self, limit: int = 20) -> None:
        for row in self.take(limit):
            print(row)

    def count(self) -> int:
        known = self._known_rows()
        if known is not None:
            return known
        return sum(p.rows for p in self._execute())

    def schema(self, fetch_if_missing: bool = True) -> Optional[_block.Schema]:
        source = self._plan.source
        if isinstance(source, BlocksSource) and not self._plan.ops:
            return next((p.schema for p in source.pieces if p.schema is not None), None)
        execution = self._execute(progress_name=None)
        try:
            for piece in execution:
                if piece.schema is not None:
                    return piece.schema
        finally:
            execution.close()
        return None

    def columns(self, fetch_if_missing: bool = True) -> Optional[List[str]]:
        schema = self.schema()
        return None if schema is None else list(schema.names)

    def size_bytes(self) -> int:
        return sum(p.nbytes for p in self._materialized_pieces())

    def to_pandas(self, limit: Optional[int] = None):
        import pandas as pd

        dataset = self if limit is None else self.limit(limit)
        blocks = list(dataset.iterator()._blocks())
        if not blocks:
            return pd.DataFrame()
        return _block.to_pandas(_block.concat(blocks))

    def stats(self) -> str:
        return (self._last_stats or ExecutionStats()).summary()

    # ---- writes ----------------------------------------------------------------------------

    def write_parquet(self, path: str, *, filesystem=None, try_create_dir: bool = True, **arrow_parquet_args):
        from oxray.data import _write

        _write.write(self, path, filesystem, "parquet", arrow_parquet_args, try_create_dir)

    def write_csv(self, path: str, *, filesystem=None, try_create_dir: bool = True, **arrow_csv_args):
        from oxray.data import _write

        _write.write(self, path, filesystem, "csv", arrow_csv_args, try_create_dir)

    def write_json(self, path: str, *, filesystem=None, try_create_dir: bool = True, **json_args):
        from oxray.data import _write

        _write.write(self, path, filesystem, "json", json_args, try_create_dir)

    def __repr__(self):
        return f"Dataset({self._describe()})"


class MaterializedDataset(Dataset):
    """A dataset whose blocks are in the store: iterating it runs nothing again."""

    @staticmethod
    def _of(pieces: List[_plan.Piece], context: Optional[DataContext] = None) -> "MaterializedDataset":
        return MaterializedDataset(Plan(BlocksSource(tuple(pieces))), context)

    def num_blocks(self) -> int:
        return len(self._plan.source.pieces)

    def __repr__(self):
        return f"MaterializedDataset(num_blocks={self.num_blocks()}, num_rows={self.count()})"


def _check_callable(fn, where: str) -> None:
    if not callable(fn):
        raise TypeError(f"{where} takes a function or a callable class, got {type(fn).__name__}")


def _names(cols, where: str) -> List[str]:
    if isinstance(cols, str):
        cols = [cols]
    cols = list(cols)
    if not cols or not all(isinstance(c, str) for c in cols):
        raise ValueError(f"{where} takes column names, got {cols!r}")
    return cols


def _compute(compute, concurrency, is_class: bool, where: str):
    """(the actor pool strategy or None for tasks, the most tasks at once)."""
    if isinstance(compute, ActorPoolStrategy):
        if not is_class:
            raise ValueError(f"{where}: an actor pool runs callable classes; pass a class, not a function")
        return compute, None
    if compute not in (None, "tasks", "actors"):
        raise ValueError(f"{where}: compute must be None, 'tasks' or an ActorPoolStrategy, got {compute!r}")
    if compute == "tasks" and is_class:
        raise ValueError(f"{where}: a callable class runs on an actor pool, not as tasks")
    if concurrency is not None:
        if isinstance(concurrency, tuple):
            if len(concurrency) != 2 or not is_class:
                raise ValueError(f"{where}: concurrency=(min, max) is for callable classes")
            return ActorPoolStrategy(min_size=concurrency[0], max_size=concurrency[1]), None
        if not isinstance(concurrency, int) or isinstance(concurrency, bool) or concurrency < 1:
            raise ValueError(f"{where}: concurrency must be a positive integer or (min, max), got {concurrency!r}")
        return (ActorPoolStrategy(size=concurrency), None) if is_class else (None, concurrency)
    return (ActorPoolStrategy(min_size=1), None) if is_class else (None, None)
