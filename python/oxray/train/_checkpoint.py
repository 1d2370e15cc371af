"""`Checkpoint`: a directory of files on a filesystem (local, shared, or a URI's)."""

import contextlib
import json
import os
import shutil
import tempfile
import uuid
from typing import Any, Dict, Iterator, Optional

from oxray.train._storage import copy_dir, resolve

METADATA = ".metadata.json"


class Checkpoint:
    def __init__(self, path: str, filesystem: Any = None):
        self.filesystem, self.path = resolve(str(path), filesystem)

    @classmethod
    def from_directory(cls, path: str) -> "Checkpoint":
        if not os.path.isdir(path):
            raise ValueError(f"Checkpoint.from_directory: {path!r} is not a directory")
        return cls(os.path.abspath(path))

    def to_directory(self, path: Optional[str] = None) -> str:
        """The checkpoint's files in a local directory (a new one under the temp dir unless
        `path` is given)."""
        target = path or os.path.join(tempfile.gettempdir(), f"checkpoint_tmp_{uuid.uuid4().hex}")
        os.makedirs(target, exist_ok=True)
        copy_dir(self.path, self.filesystem, target, None)
        return target

    @contextlib.contextmanager
    def as_directory(self) -> Iterator[str]:
        """A local directory to read the checkpoint from: its own path when it is local, else
        a copy that is removed afterwards. Treat it as read-only."""
        if self.filesystem is None:
            yield self.path
            return
        local = self.to_directory()
        try:
            yield local
        finally:
            shutil.rmtree(local, ignore_errors=True)

    def get_metadata(self) -> Dict[str, Any]:
        with self.as_directory() as d:
            try:
                with open(os.path.join(d, METADATA), encoding="utf-8") as f:
                    return json.load(f)
            except FileNotFoundError:
                return {}

    def set_metadata(self, metadata: Dict[str, Any]) -> None:
        if self.filesystem is not None:
            with self.filesystem.open_output_stream(self.path.rstrip("/") + "/" + METADATA) as f:
                f.write(json.dumps(metadata).encode())
            return
        with open(os.path.join(self.path, METADATA), "w", encoding="utf-8") as f:
            json.dump(metadata, f)

    def update_metadata(self, metadata: Dict[str, Any]) -> None:
        self.set_metadata({**self.get_metadata(), **metadata})

    def __eq__(self, other):
        return isinstance(other, Checkpoint) and (self.path, type(self.filesystem)) == (other.path,
                                                                                         type(other.filesystem))

    def __hash__(self):
        return hash(self.path)

    def __repr__(self):
        fs = "" if self.filesystem is None else f", filesystem={type(self.filesystem).__name__}"
        return f"Checkpoint(path={self.path!r}{fs})"
