"""Blocks, the unit of data between operators: a `pyarrow.Table`, or a dict of numpy arrays
of equal length (a "numpy block", which needs no pyarrow and holds tensor columns of any
shape). Both pickle with out-of-band buffers, so a block in the node store is read back as
zero-copy views. Everything here is a pure function of its arguments."""

from typing import Any, Dict, Iterable, Iterator, List, Optional

import numpy as np

Block = Any  # pyarrow.Table | Dict[str, np.ndarray]
BATCH_FORMATS = ("default", "numpy", "pandas", "pyarrow")


def is_arrow(block: Block) -> bool:
    return type(block).__module__.startswith("pyarrow")


def _is_pandas(value: Any) -> bool:
    return type(value).__module__.startswith("pandas") and hasattr(value, "columns")


def num_rows(block: Block) -> int:
    if isinstance(block, dict):
        return len(next(iter(block.values()))) if block else 0
    return block.num_rows


def column_names(block: Block) -> List[str]:
    return list(block) if isinstance(block, dict) else list(block.column_names)


def size_bytes(block: Block) -> int:
    if isinstance(block, dict):
        return int(sum(v.nbytes for v in block.values()))
    return int(block.nbytes)


def slice_block(block: Block, start: int, stop: int) -> Block:
    if start == 0 and stop >= num_rows(block):
        return block
    if isinstance(block, dict):
        return {k: v[start:stop] for k, v in block.items()}
    return block.slice(start, stop - start)


def take_rows(block: Block, indices: np.ndarray) -> Block:
    if isinstance(block, dict):
        return {k: v[indices] for k, v in block.items()}
    return block.take(indices)


def concat(blocks: List[Block]) -> Block:
    """One block of all rows, in order. Numpy blocks stay numpy; a mix becomes Arrow."""
    blocks = [b for b in blocks if num_rows(b) > 0] or blocks[:1]
    if not blocks:
        return {}
    if len(blocks) == 1:
        return blocks[0]
    if all(isinstance(b, dict) for b in blocks):
        names = list(blocks[0])
        for b in blocks[1:]:
            if list(b) != names and set(b) != set(names):
                raise ValueError(f"cannot combine blocks with different columns: {names} and {list(b)}")
        return {k: _concat_arrays([b[k] for b in blocks]) for k in names}
    import pyarrow as pa

    return pa.concat_tables([to_arrow(b) for b in blocks], promote_options="default")


def _concat_arrays(arrays: List[np.ndarray]) -> np.ndarray:
    if any(a.dtype == object for a in arrays) or len({a.shape[1:] for a in arrays}) > 1:
        out = np.empty(sum(len(a) for a in arrays), dtype=object)
        at = 0
        for a in arrays:
            for i in range(len(a)):
                out[at] = a[i]
                at += 1
        return out
    return np.concatenate(arrays)


# ---- conversions -------------------------------------------------------------------------

def to_numpy(block: Block) -> Dict[str, np.ndarray]:
    if isinstance(block, dict):
        return block
    return {name: _arrow_column_to_numpy(block.column(name)) for name in block.column_names}


def _arrow_column_to_numpy(column) -> np.ndarray:
    import pyarrow as pa

    if isinstance(column.type, pa.FixedShapeTensorType):
        chunk = column.combine_chunks() if column.num_chunks != 1 else column.chunk(0)
        return chunk.to_numpy_ndarray()
    if column.num_chunks == 1:
        return column.chunk(0).to_numpy(zero_copy_only=False)
    return column.to_numpy()


def to_arrow(block: Block):
    import pyarrow as pa

    if not isinstance(block, dict):
        return block
    return pa.table({name: _numpy_column_to_arrow(values) for name, values in block.items()})


def _numpy_column_to_arrow(values: np.ndarray):
    import pyarrow as pa

    if values.ndim > 1:
        return pa.FixedShapeTensorArray.from_numpy_ndarray(np.ascontiguousarray(values))
    if values.dtype == object and len(values) and isinstance(values[0], np.ndarray):
        return pa.array([v.tolist() for v in values])
    return pa.array(values)


def to_pandas(block: Block):
    import pandas as pd

    if not isinstance(block, dict):
        if not any(_is_tensor_type(t) for t in block.schema.types):
            return block.to_pandas()
        block = to_numpy(block)
    return pd.DataFrame({k: (v if v.ndim == 1 else list(v)) for k, v in block.items()})


def _is_tensor_type(arrow_type) -> bool:
    import pyarrow as pa

    return isinstance(arrow_type, pa.FixedShapeTensorType)


def to_batch(block: Block, batch_format: str):
    if batch_format in ("default", "numpy"):
        return to_numpy(block)
    if batch_format == "pandas":
        return to_pandas(block)
    if batch_format == "pyarrow":
        return to_arrow(block)
    raise ValueError(f"batch_format must be one of {BATCH_FORMATS}, got {batch_format!r}")


def from_batch(value: Any, where: str) -> Block:
    """The block a batch function returned, checked: a dict of equal-length arrays (or
    lists), a pandas DataFrame, or a pyarrow Table."""
    if isinstance(value, dict):
        block = {}
        for name, column in value.items():
            if not isinstance(name, str):
                raise TypeError(f"{where} returned a dict with a non-string key {name!r}; column names must be strings")
            if isinstance(column, np.ndarray):
                block[name] = column
            elif hasattr(column, "__array__"):  # torch tensors, pandas series, arrow arrays
                block[name] = np.asarray(column)
            else:
                block[name] = column_from_values(list(column))
        lengths = {k: len(v) for k, v in block.items()}
        if len(set(lengths.values())) > 1:
            raise ValueError(f"{where} returned columns of different lengths: {lengths}")
        return block
    if _is_pandas(value):
        try:
            import pyarrow as pa

            return pa.Table.from_pandas(value, preserve_index=False)
        except Exception:  # no pyarrow, or values Arrow cannot hold as they are (arrays): numpy
            pass
        return {str(c): column_from_values(list(value[c])) for c in value.columns}
    if is_arrow(value) and hasattr(value, "column_names"):
        return value
    raise TypeError(f"{where} must return a dict of numpy arrays, a pandas.DataFrame or a pyarrow.Table, "
                    f"got {type(value).__name__}")


# ---- rows --------------------------------------------------------------------------------

def column_from_values(values: List[Any]) -> np.ndarray:
    """A numpy column from Python values: numbers keep their dtype, equal-shaped arrays are
    stacked, and anything else (strings, bytes, mixed) is an object column, as Ray shows them."""
    if values and all(isinstance(v, np.ndarray) for v in values):
        if len({v.shape for v in values}) == 1 and len({v.dtype for v in values}) == 1:
            return np.stack(values)
    elif values and all(isinstance(v, (bool, int, float, complex, np.generic)) for v in values):
        try:
            return np.asarray(values)
        except (ValueError, OverflowError):
            pass
    out = np.empty(len(values), dtype=object)
    for i, v in enumerate(values):
        out[i] = v
    return out


def from_rows(rows: List[Dict[str, Any]], where: str) -> Block:
    if not rows:
        return {}
    names = list(rows[0])
    for row in rows:
        if not isinstance(row, dict):
            raise TypeError(f"{where} must return dict rows, got {type(row).__name__}: {row!r:.100}")
        if len(row) != len(names) or any(n not in row for n in names):
            raise ValueError(f"{where} returned rows with different columns: {names} and {list(row)}")
    return {name: column_from_values([row[name] for row in rows]) for name in names}


def iter_rows(block: Block) -> Iterator[Dict[str, Any]]:
    columns = {k: (v.tolist() if v.ndim == 1 and v.dtype != object else list(v)) for k, v in to_numpy(block).items()}
    names = list(columns)
    for i in range(num_rows(block)):
        yield {name: columns[name][i] for name in names}


def select(block: Block, names: List[str], where: str) -> Block:
    present = column_names(block)
    missing = [n for n in names if n not in present]
    if missing:
        raise KeyError(f"{where}: no column {missing[0]!r}; the data has {present}")
    if isinstance(block, dict):
        return {n: block[n] for n in names}
    return block.select(names)


def drop(block: Block, names: List[str], where: str) -> Block:
    present = column_names(block)
    select(block, names, where)  # the same error for a missing column
    return select(block, [n for n in present if n not in names], where)


def with_column(block: Block, name: str, values: Any, where: str) -> Block:
    rows = num_rows(block)
    if _is_pandas(values) or is_arrow(values):
        values = values.to_numpy()
    column = values if isinstance(values, np.ndarray) else column_from_values(list(values))
    if len(column) != rows:
        raise ValueError(f"{where} returned {len(column)} values for a batch of {rows} rows")
    if isinstance(block, dict):
        return {**block, name: column}
    block = block.drop_columns([name]) if name in block.column_names else block
    return block.append_column(name, _numpy_column_to_arrow(column))


def mask(block: Block, keep: np.ndarray) -> Block:
    if isinstance(block, dict):
        return {k: v[keep] for k, v in block.items()}
    import pyarrow as pa

    return block.filter(pa.array(keep))


def batches(block: Block, batch_size: Optional[int]) -> Iterable[Block]:
    rows = num_rows(block)
    if batch_size is None or batch_size >= rows:
        yield block
        return
    for start in range(0, rows, batch_size):
        yield slice_block(block, start, min(rows, start + batch_size))


class Schema:
    """Column names and types of a dataset (Arrow types, or numpy dtypes and tensor shapes)."""

    def __init__(self, names: List[str], types: List[Any]):
        self.names, self.types = list(names), list(types)

    @staticmethod
    def of(block: Block) -> "Schema":
        if isinstance(block, dict):
            return Schema(list(block), [_numpy_type(v) for v in block.values()])
        return Schema(block.column_names, list(block.schema.types))

    @property
    def base_schema(self):
        return self

    def __eq__(self, other):
        return isinstance(other, Schema) and (self.names, [str(t) for t in self.types]) == \
            (other.names, [str(t) for t in other.types])

    def __repr__(self):
        width = max([len("Column")] + [len(n) for n in self.names])
        lines = [f"{'Column':<{width}}  Type", f"{'------':<{width}}  ----"]
        lines += [f"{n:<{width}}  {t}" for n, t in zip(self.names, self.types)]
        return "\n".join(lines)


def _numpy_type(values: np.ndarray) -> str:
    if values.ndim > 1:
        return f"numpy.ndarray(shape={values.shape[1:]}, dtype={values.dtype})"
    if values.dtype == object and len(values):
        first = values[0]
        return {str: "string", bytes: "binary"}.get(type(first), "object")
    return str(values.dtype)
