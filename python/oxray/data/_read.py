"""Where datasets come from: Python values put in the store at once (`from_*`), and lazy
reads, one task per file (or group of files), resolved eagerly so a missing path fails at
the call."""

import functools
import glob
import io
import os
from typing import Any, Callable, Iterable, List, Optional, Tuple

import numpy as np

import oxray
from oxray.data import _block
from oxray.data._plan import BlocksSource, Piece, ReadSource, ReadTask, row_ranges

IMAGE_EXTENSIONS = ("png", "jpg", "jpeg", "tif", "tiff", "bmp", "gif", "webp")


def _needs(module: str, where: str):
    try:
        return __import__(module, fromlist=["_"])
    except ImportError:
        raise ImportError(f"{where} needs {module.split('.')[0]}: pip install 'oxray[data]'") from None


# ---- values already in this process ------------------------------------------------------

def put_blocks(blocks: Iterable) -> BlocksSource:
    pieces = []
    for block in blocks:
        rows = _block.num_rows(block)
        schema = _block.Schema.of(block) if _block.column_names(block) else None
        pieces.append(Piece(oxray.put(block), 0, rows, _block.size_bytes(block), schema))
    return BlocksSource(tuple(pieces))


def chunks(count: int, parts: int) -> List[Tuple[int, int]]:
    """At most `parts` ranges of `count` rows, none empty (one empty range for none)."""
    return row_ranges(count, max(1, min(parts, count)) if count else 1)


def items_source(items: List[Any], num_blocks: int) -> BlocksSource:
    rows = [item if isinstance(item, dict) else {"item": item} for item in items]
    return put_blocks(_block.from_rows(rows[a:b], "from_items") for a, b in chunks(len(rows), num_blocks) if b > a)


def _range_block(start: int, stop: int):
    return [{"id": np.arange(start, stop, dtype=np.int64)}]


def range_source(n: int, num_blocks: int) -> ReadSource:
    if not isinstance(n, int) or isinstance(n, bool) or n < 0:
        raise ValueError(f"range: n must be a non-negative integer, got {n!r}")
    tasks = tuple(ReadTask(functools.partial(_range_block, a, b), rows=b - a, nbytes=8 * (b - a))
                  for a, b in chunks(n, num_blocks))
    return ReadSource("ReadRange", tasks)


# ---- files -------------------------------------------------------------------------------

def _has_glob(path: str) -> bool:
    return any(c in path for c in "*?[")


def _filesystem(path: str, filesystem: Any) -> Tuple[Any, str]:
    """(a pyarrow filesystem or None for local files, the path within it)."""
    if filesystem is not None:
        pafs = _needs("pyarrow.fs", "a filesystem argument")
        if not isinstance(filesystem, pafs.FileSystem):  # an fsspec filesystem
            filesystem = pafs.PyFileSystem(pafs.FSSpecHandler(filesystem))
        return filesystem, path.split("://", 1)[-1] if "://" in path else path
    if path.startswith(("local://", "file://")):
        return None, path.split("://", 1)[1]
    if "://" in path:
        pafs = _needs("pyarrow.fs", f"reading {path}")
        return pafs.FileSystem.from_uri(path)
    return None, os.path.expanduser(path)


def _visible(name: str) -> bool:
    return not name.startswith((".", "_"))


def resolve(paths: Any, filesystem: Any, where: str, extensions: Optional[Tuple[str, ...]] = None) -> List[Tuple]:
    """Every file under `paths` (files, directories walked in name order, globs), as
    (filesystem, path, root, size). Missing paths raise FileNotFoundError."""
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    if not paths:
        raise ValueError(f"{where}: no paths given")
    found = []
    for given in paths:
        fs, path = _filesystem(os.fspath(given), filesystem)
        before = len(found)
        if fs is None:
            _resolve_local(path, found, where)
        else:
            _resolve_remote(fs, path, found, where)
        if len(found) == before:
            raise FileNotFoundError(f"{where}: {given} has no files")
    if extensions:
        kept = [f for f in found if f[1].lower().rsplit(".", 1)[-1] in extensions]
        if not kept:
            raise FileNotFoundError(f"{where}: no files with extensions {list(extensions)} in {list(paths)}")
        found = kept
    return found


def _resolve_local(path: str, found: List, where: str) -> None:
    if _has_glob(path):
        matches = sorted(glob.glob(path))
        if not matches:
            raise FileNotFoundError(f"{where}: nothing matches {path}")
        for match in matches:
            _resolve_local(match, found, where)
        return
    if os.path.isfile(path):
        found.append((None, path, os.path.dirname(path), os.path.getsize(path)))
    elif os.path.isdir(path):
        for root, dirs, files in os.walk(path):
            dirs[:] = sorted(d for d in dirs if _visible(d))
            for name in sorted(files):
                if _visible(name):
                    full = os.path.join(root, name)
                    found.append((None, full, path, os.path.getsize(full)))
    else:
        raise FileNotFoundError(f"{where}: no such file or directory: {path}")


def _resolve_remote(fs, path: str, found: List, where: str) -> None:
    import pyarrow.fs as pafs

    info = fs.get_file_info(path)
    if info.type == pafs.FileType.File:
        found.append((fs, path, os.path.dirname(path), info.size))
    elif info.type == pafs.FileType.Directory:
        infos = fs.get_file_info(pafs.FileSelector(path, recursive=True))
        for entry in sorted(infos, key=lambda e: e.path):
            parts = entry.path[len(path):].strip("/").split("/")
            if entry.type == pafs.FileType.File and all(_visible(p) for p in parts):
                found.append((fs, entry.path, path, entry.size))
    else:
        raise FileNotFoundError(f"{where}: no such file or directory: {path}")


def _open(fs, path: str):
    return open(path, "rb") if fs is None else fs.open_input_file(path)


def hive_partitions(root: str, path: str) -> dict:
    """`key=value` directories between `root` and the file."""
    relative = os.path.relpath(os.path.dirname(path), root) if root else os.path.dirname(path)
    out = {}
    for part in relative.replace("\\", "/").split("/"):
        if "=" in part:
            key, value = part.split("=", 1)
            out[key] = value
    return out


def _read_files(reader: Callable, files: List[Tuple], include_paths: bool):
    blocks = []
    for fs, path, root, _size in files:
        block = reader(fs, path, root)
        if include_paths:
            block = _block.with_column(block, "path", np.array([path] * _block.num_rows(block), dtype=object),
                                       "include_paths")
        blocks.append(block)
    return blocks


def file_source(name: str, reader: Callable, files: List[Tuple], num_blocks: Optional[int],
                min_blocks: int, include_paths: bool = False) -> ReadSource:
    """One read task per file, or per group of consecutive files when there are more files
    than blocks wanted."""
    groups = chunks(len(files), num_blocks or max(min_blocks, 1)) if len(files) > (num_blocks or min_blocks) \
        else [(i, i + 1) for i in range(len(files))]
    tasks = tuple(ReadTask(functools.partial(_read_files, reader, files[a:b], include_paths),
                           nbytes=sum(f[3] for f in files[a:b])) for a, b in groups)
    return ReadSource(name, tasks)


# ---- readers (run in the read tasks) -----------------------------------------------------

def parquet_reader(columns, fs, path, root):
    import pyarrow.parquet as pq

    with _open(fs, path) as f:
        table = pq.read_table(f, columns=columns)
    for key, value in hive_partitions(root, path).items():
        if key not in table.column_names and (columns is None or key in columns):
            table = _block.with_column(table, key, np.array([value] * table.num_rows, dtype=object), "partition")
    return table


def csv_reader(arrow_args, fs, path, root):
    import pyarrow.csv as pcsv

    with _open(fs, path) as f:
        return pcsv.read_csv(f, **arrow_args)


def json_reader(arrow_args, fs, path, root):
    import pyarrow.json as pjson

    with _open(fs, path) as f:
        data = f.read()
    stripped = data.lstrip()
    if stripped.startswith(b"["):  # a JSON array of objects rather than JSON lines
        import json

        return _block.from_rows(json.loads(data), f"read_json({path})")
    return pjson.read_json(io.BytesIO(data), **arrow_args)


def text_reader(encoding, drop_empty_lines, fs, path, root):
    with _open(fs, path) as f:
        lines = f.read().decode(encoding).splitlines()
    if drop_empty_lines:
        lines = [line for line in lines if line.strip()]
    return {"text": np.array(lines, dtype=object)}


def binary_reader(fs, path, root):
    with _open(fs, path) as f:
        data = f.read()
    column = np.empty(1, dtype=object)
    column[0] = data
    return {"bytes": column}


def image_reader(size, mode, fs, path, root):
    try:
        from PIL import Image
    except ImportError:
        raise ImportError("read_images needs Pillow: pip install pillow") from None
    with _open(fs, path) as f:
        image = Image.open(io.BytesIO(f.read()))
        image.load()
    if mode is not None:
        image = image.convert(mode)
    if size is not None:
        height, width = size
        image = image.resize((width, height))
    return {"image": np.asarray(image)[None, ...]}
