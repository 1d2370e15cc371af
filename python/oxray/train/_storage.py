"""Where a run keeps its checkpoints: a local or shared directory, or a URI (`s3://...`)
through pyarrow's filesystems (`fsspec` ones too, when installed). Every worker writes its
checkpoint files straight to storage; nothing passes through the driver."""

import os
import shutil
import tempfile
import uuid
from typing import Any, List, Optional, Tuple

MARKER = ".validate_storage_marker"


def is_uri(path: str) -> bool:
    return "://" in path and not path.startswith("file://")


def resolve(path: str, filesystem: Any = None) -> Tuple[Any, str]:
    """`(filesystem, path on it)`; the filesystem is None for the local one."""
    if filesystem is not None:
        return filesystem, path
    if path.startswith("file://"):
        return None, path[len("file://"):]
    if not is_uri(path):
        return None, os.path.abspath(os.path.expanduser(path))
    try:
        import pyarrow.fs
    except ImportError:
        raise ImportError(f"storage at {path!r} needs pyarrow (pip install pyarrow, and fsspec for other schemes)")
    try:
        return pyarrow.fs.FileSystem.from_uri(path)
    except (pyarrow.ArrowInvalid, ValueError) as arrow_error:
        try:
            import fsspec
            from pyarrow.fs import FSSpecHandler, PyFileSystem
        except ImportError:
            raise ValueError(f"pyarrow cannot reach {path!r} ({arrow_error}); fsspec is not installed") from None
        fs, inner = fsspec.core.url_to_fs(path)
        return PyFileSystem(FSSpecHandler(fs)), inner


def copy_dir(src: str, src_fs: Any, dst: str, dst_fs: Any) -> None:
    """Copies a directory tree between filesystems, merging into what is there."""
    if src_fs is None and dst_fs is None:
        shutil.copytree(src, dst, dirs_exist_ok=True)
        return
    import pyarrow.fs

    local = pyarrow.fs.LocalFileSystem()
    (dst_fs or local).create_dir(dst, recursive=True)
    pyarrow.fs.copy_files(src, dst, source_filesystem=src_fs or local, destination_filesystem=dst_fs or local)


class Storage:
    """A run's experiment directory (`storage_path/name`) on its filesystem."""

    def __init__(self, storage_path: str, name: str, filesystem: Any = None):
        self.fs, root = resolve(storage_path, filesystem)
        self.storage_fs_path = root.rstrip("/")
        self.experiment_path = self.storage_fs_path + "/" + name

    # Ray's StorageContext names, for what get_context().get_storage() returns.
    @property
    def storage_filesystem(self):
        """The pyarrow filesystem of the storage; a local one when it is a plain path."""
        if self.fs is not None:
            return self.fs
        import pyarrow.fs

        return pyarrow.fs.LocalFileSystem()

    @property
    def experiment_fs_path(self) -> str:
        return self.experiment_path

    def path(self, *parts: str) -> str:
        return "/".join((self.experiment_path,) + parts)

    def create(self) -> None:
        self.write_text(MARKER, "")

    def check_reachable(self) -> None:
        """A worker on another node that does not see the marker writes to storage the
        driver cannot read: say so before training rather than after."""
        if not self.exists(MARKER):
            raise RuntimeError(f"the storage path {self.experiment_path!r} is not visible from this node: a run on "
                               "several nodes needs storage they all share (NFS, or a URI such as s3://...)")

    def exists(self, rel: str) -> bool:
        if self.fs is None:
            return os.path.exists(self.path(rel))
        import pyarrow.fs

        return self.fs.get_file_info(self.path(rel)).type != pyarrow.fs.FileType.NotFound

    def read_text(self, rel: str) -> Optional[str]:
        data = self.read_bytes(rel)
        return None if data is None else data.decode()

    def read_bytes(self, rel: str) -> Optional[bytes]:
        if not self.exists(rel):
            return None
        if self.fs is None:
            with open(self.path(rel), "rb") as f:
                return f.read()
        with self.fs.open_input_stream(self.path(rel)) as f:
            return f.read()

    def write_text(self, rel: str, text: str) -> None:
        """Whole or not at all: a crash never leaves half a file."""
        target = self.path(rel)
        if self.fs is None:
            os.makedirs(os.path.dirname(target), exist_ok=True)
            temporary = f"{target}.{uuid.uuid4().hex[:8]}.tmp"
            with open(temporary, "w", encoding="utf-8") as f:
                f.write(text)
                f.flush()
                os.fsync(f.fileno())
            os.replace(temporary, target)
            return
        self.fs.create_dir(self.experiment_path, recursive=True)
        with self.fs.open_output_stream(target) as f:
            f.write(text.encode())

    def append_line(self, rel: str, line: str) -> None:
        if self.fs is None:
            with open(self.path(rel), "a", encoding="utf-8") as f:
                f.write(line + "\n")
            return
        self.write_text(rel, (self.read_text(rel) or "") + line + "\n")

    def upload(self, local_dir: str, dir_name: str) -> None:
        copy_dir(local_dir, None, self.path(dir_name), self.fs)

    def delete(self, dir_name: str) -> None:
        if self.fs is None:
            shutil.rmtree(self.path(dir_name), ignore_errors=True)
        else:
            try:
                self.fs.delete_dir(self.path(dir_name))
            except FileNotFoundError:
                pass

    def listdir(self) -> List[str]:
        if self.fs is None:
            return sorted(os.listdir(self.experiment_path)) if os.path.isdir(self.experiment_path) else []
        import pyarrow.fs

        infos = self.fs.get_file_info(pyarrow.fs.FileSelector(self.experiment_path, allow_not_found=True))
        return sorted(os.path.basename(i.path) for i in infos)


def temporary_dir(prefix: str) -> str:
    return tempfile.mkdtemp(prefix=prefix)
