"""`oxray.data`: streaming datasets with Ray Data's names, on oxray's tasks, actors and node
object stores. Blocks are Arrow tables or dicts of numpy arrays; pyarrow and pandas are
optional (`pip install 'oxray[data]'`) and needed only by the readers, writers and batch
formats that use them."""

import collections.abc
from typing import Any, List, Optional, Union

from oxray.data import _read
from oxray.data._block import Schema
from oxray.data._plan import ActorPoolStrategy, Plan
from oxray.data.context import DataContext, ExecutionOptions, ExecutionResources
from oxray.data.dataset import Dataset, MaterializedDataset
from oxray.data.exceptions import UserCodeException
from oxray.data.iterator import DataIterator

__all__ = [
    "ActorPoolStrategy", "DataContext", "DataIterator", "Dataset", "ExecutionOptions", "ExecutionResources",
    "MaterializedDataset", "Schema", "UserCodeException", "from_arrow", "from_items", "from_numpy",
    "from_pandas", "range", "read_binary_files", "read_csv", "read_images", "read_json", "read_parquet",
    "read_text",
]

_builtin_range = range


def _blocks_wanted(override_num_blocks: Optional[int]) -> int:
    if override_num_blocks is not None:
        if not isinstance(override_num_blocks, int) or override_num_blocks < 1:
            raise ValueError(f"override_num_blocks must be a positive integer, got {override_num_blocks!r}")
        return override_num_blocks
    return DataContext.get_current().read_op_min_num_blocks


def range(n: int, *, override_num_blocks: Optional[int] = None) -> Dataset:  # noqa: A001
    """Rows {"id": 0} ... {"id": n - 1}, read lazily in blocks."""
    return Dataset(Plan(_read.range_source(n, _blocks_wanted(override_num_blocks))))


def from_items(items: List[Any], *, override_num_blocks: Optional[int] = None) -> MaterializedDataset:
    """Dict items become rows of their keys; other items go in an "item" column."""
    # Any sequence, as Ray's: `from_items(range(n))` is common in its examples.
    if not isinstance(items, collections.abc.Sequence) or isinstance(items, (str, bytes)):
        raise TypeError(f"from_items takes a list, got {type(items).__name__}")
    return MaterializedDataset(Plan(_read.items_source(list(items), _blocks_wanted(override_num_blocks))))


def _as_list(value, kind) -> list:
    values = list(value) if isinstance(value, (list, tuple)) else [value]
    for v in values:
        if not kind(v):
            raise TypeError(f"expected {kind.__doc__}, got {type(v).__name__}")
    return values


def from_numpy(ndarrays) -> MaterializedDataset:
    """Each array is a block of one "data" column (its first axis are the rows)."""
    import numpy as np

    def is_array(v):
        """numpy arrays"""
        return isinstance(v, np.ndarray)

    return MaterializedDataset(Plan(_read.put_blocks({"data": a if a.ndim else a.reshape(1)}
                                                     for a in _as_list(ndarrays, is_array))))


def from_pandas(dfs) -> MaterializedDataset:
    from oxray.data._block import _is_pandas, from_batch

    def is_frame(v):
        """pandas DataFrames"""
        return _is_pandas(v)

    return MaterializedDataset(Plan(_read.put_blocks(from_batch(df, "from_pandas") for df in _as_list(dfs, is_frame))))


def from_arrow(tables) -> MaterializedDataset:
    def is_table(v):
        """pyarrow Tables"""
        return type(v).__module__.startswith("pyarrow") and hasattr(v, "column_names")

    return MaterializedDataset(Plan(_read.put_blocks(_as_list(tables, is_table))))


def _file_read(name: str, paths, filesystem, reader, override_num_blocks, include_paths=False,
               extensions=None) -> Dataset:
    files = _read.resolve(paths, filesystem, name, extensions)
    wanted = override_num_blocks if override_num_blocks is not None else None
    min_blocks = DataContext.get_current().read_op_min_num_blocks
    return Dataset(Plan(_read.file_source("Read" + "".join(w.title() for w in name[5:].split("_")), reader, files,
                                          wanted, min_blocks, include_paths)))


def read_parquet(paths: Union[str, List[str]], *, filesystem=None, columns: Optional[List[str]] = None,
                 override_num_blocks: Optional[int] = None, file_extensions=None) -> Dataset:
    _read._needs("pyarrow.parquet", "read_parquet")
    import functools

    return _file_read("read_parquet", paths, filesystem, functools.partial(_read.parquet_reader, columns),
                      override_num_blocks, extensions=_extensions(file_extensions))


def read_csv(paths: Union[str, List[str]], *, filesystem=None, override_num_blocks: Optional[int] = None,
             include_paths: bool = False, file_extensions=None, **arrow_csv_args) -> Dataset:
    _read._needs("pyarrow.csv", "read_csv")
    import functools

    allowed = {"read_options", "parse_options", "convert_options"}
    unknown = set(arrow_csv_args) - allowed
    if unknown:
        raise TypeError(f"read_csv got unexpected arguments {sorted(unknown)}; arrow's are {sorted(allowed)}")
    return _file_read("read_csv", paths, filesystem, functools.partial(_read.csv_reader, arrow_csv_args),
                      override_num_blocks, include_paths, _extensions(file_extensions))


def read_json(paths: Union[str, List[str]], *, filesystem=None, override_num_blocks: Optional[int] = None,
              include_paths: bool = False, file_extensions=None, **arrow_json_args) -> Dataset:
    _read._needs("pyarrow.json", "read_json")
    import functools

    return _file_read("read_json", paths, filesystem, functools.partial(_read.json_reader, arrow_json_args),
                      override_num_blocks, include_paths, _extensions(file_extensions))


def read_text(paths: Union[str, List[str]], *, encoding: str = "utf-8", drop_empty_lines: bool = True,
              filesystem=None, override_num_blocks: Optional[int] = None, include_paths: bool = False,
              file_extensions=None) -> Dataset:
    import functools

    return _file_read("read_text", paths, filesystem,
                      functools.partial(_read.text_reader, encoding, drop_empty_lines), override_num_blocks,
                      include_paths, _extensions(file_extensions))


def read_binary_files(paths: Union[str, List[str]], *, include_paths: bool = False, filesystem=None,
                      override_num_blocks: Optional[int] = None, file_extensions=None) -> Dataset:
    return _file_read("read_binary_files", paths, filesystem, _read.binary_reader, override_num_blocks,
                      include_paths, _extensions(file_extensions))


def read_images(paths: Union[str, List[str]], *, filesystem=None, size=None, mode: Optional[str] = None,
                include_paths: bool = False, override_num_blocks: Optional[int] = None,
                file_extensions=_read.IMAGE_EXTENSIONS) -> Dataset:
    import functools

    if size is not None and (len(size) != 2 or any(not isinstance(s, int) or s < 1 for s in size)):
        raise ValueError(f"read_images: size must be (height, width) in positive integers, got {size!r}")
    return _file_read("read_images", paths, filesystem, functools.partial(_read.image_reader, size, mode),
                      override_num_blocks, include_paths, _extensions(file_extensions))


def _extensions(file_extensions) -> Optional[tuple]:
    if file_extensions is None:
        return None
    return tuple(e.lower().lstrip(".") for e in file_extensions)
