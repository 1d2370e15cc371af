"""Writing a dataset: as its blocks come out of the stream, one task per block writes a file
named after the write and the block's position, so files sort in the dataset's order."""

import json
import os
import uuid
from typing import Any, Dict

import numpy as np

import oxray
from oxray.data import _block

_EXTENSIONS = {"parquet": "parquet", "csv": "csv", "json": "json"}


def _json_default(value: Any):
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def write_block(kind: str, filesystem, path: str, args: Dict[str, Any], start: int, stop: int, block) -> int:
    block = _block.slice_block(block, start, stop)
    opener = (lambda: open(path, "wb")) if filesystem is None else (lambda: filesystem.open_output_stream(path))
    with opener() as f:
        if kind == "parquet":
            import pyarrow.parquet as pq

            pq.write_table(_block.to_arrow(block), f, **args)
        elif kind == "csv":
            import pyarrow.csv as pcsv

            pcsv.write_csv(_block.to_arrow(block), f, **args)
        else:
            for row in _block.iter_rows(block):
                f.write((json.dumps(row, default=_json_default, **args) + "\n").encode())
    return _block.num_rows(block)


def write(dataset, path: str, filesystem, kind: str, args: Dict[str, Any], try_create_dir: bool) -> None:
    from oxray.data._read import _filesystem, _needs

    if kind in ("parquet", "csv"):
        _needs("pyarrow", f"write_{kind}")
    fs, root = _filesystem(os.fspath(path), filesystem)
    if try_create_dir:
        if fs is None:
            os.makedirs(root, exist_ok=True)
        else:
            fs.create_dir(root, recursive=True)
    elif fs is None and not os.path.isdir(root):
        raise FileNotFoundError(f"write_{kind}: no such directory: {root}")
    prefix = uuid.uuid4().hex[:12]
    task = oxray.remote(write_block).options(scheduling_strategy=dataset._context.scheduling_strategy)
    limit = max(1, int(oxray.cluster_resources().get("CPU", 1)))
    running = []
    execution = dataset._execute(progress_name=f"Write{kind.capitalize()}")
    try:
        for index, piece in enumerate(execution):
            name = f"{prefix}_{index:06d}_000000.{_EXTENSIONS[kind]}"
            target = os.path.join(root, name) if fs is None else f"{root.rstrip('/')}/{name}"
            running.append(task.remote(kind, fs, target, args, piece.start, piece.stop, piece.ref))
            if len(running) >= limit:
                ready, running = oxray.wait(running, num_returns=1)
                oxray.get(ready)
        oxray.get(running)
    finally:
        execution.close()
