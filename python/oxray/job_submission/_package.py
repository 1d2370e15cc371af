"""Packing local directories for `working_dir` and `py_modules`, as Ray's client does:
a stored zip, named by its content, uploaded once."""

import fnmatch
import hashlib
import io
import os
import zipfile
from pathlib import Path
from typing import Iterable, List, Tuple

DEFAULT_EXCLUDES = (".git", ".venv", "venv", "__pycache__")
UPLOAD_LIMIT = 100 * 1024 * 1024


def _excluded(rel: str, patterns: Iterable[str]) -> bool:
    parts = rel.split("/")
    for pattern in patterns:
        pattern = pattern.strip("/")
        if "/" in pattern:
            if fnmatch.fnmatch(rel, pattern):
                return True
        elif any(fnmatch.fnmatch(p, pattern) for p in parts):
            return True
    return False


class _GitIgnore:
    """The patterns of the .gitignore files inside the packed directory, as Ray applies
    them: each file's patterns for what lies below it (negations are not followed)."""

    def __init__(self):
        self.rules = []  # (base, pattern, anchored, dirs_only)

    def read(self, base: str, directory: Path) -> None:
        try:
            lines = (directory / ".gitignore").read_text(errors="replace").splitlines()
        except OSError:
            return
        for line in lines:
            line = line.strip()
            if not line or line.startswith(("#", "!")):
                continue
            dirs_only = line.endswith("/")
            pattern = line.strip("/")
            self.rules.append((base, pattern, "/" in line.rstrip("/"), dirs_only))

    def ignores(self, rel: str, is_dir: bool) -> bool:
        for base, pattern, anchored, dirs_only in self.rules:
            if dirs_only and not is_dir:
                continue
            if base not in ("", ".") and not rel.startswith(base + "/"):
                continue
            inner = rel[len(base) + 1:] if base not in ("", ".") else rel
            if fnmatch.fnmatch(inner, pattern) if anchored else fnmatch.fnmatch(inner.rsplit("/", 1)[-1], pattern):
                return True
        return False


def pack_dir(directory: str, prefix: str = None, excludes: List[str] = ()) -> Tuple[str, bytes]:
    """Returns the package name and the archive bytes."""
    root = Path(directory)
    if not root.is_dir():
        raise ValueError(f"{directory} is not a directory")
    patterns = list(DEFAULT_EXCLUDES) + list(excludes or ())
    gitignore = _GitIgnore()
    files = []
    for current, dirs, names in os.walk(root):
        rel_dir = Path(current).relative_to(root).as_posix()
        gitignore.read(rel_dir, Path(current))
        dirs[:] = sorted(d for d in dirs if not _excluded(_join(rel_dir, d), patterns)
                         and not gitignore.ignores(_join(rel_dir, d), True))
        for name in sorted(names):
            rel = _join(rel_dir, name)
            path = Path(current) / name
            if (path.is_file() and not path.is_symlink() and not _excluded(rel, patterns)
                    and not gitignore.ignores(rel, False)):
                files.append((rel, path))
    digest = hashlib.sha256()
    buffer = io.BytesIO()
    size = 0
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_STORED) as archive:
        for rel, path in sorted(files):
            data = path.read_bytes()
            size += len(data)
            if size > UPLOAD_LIMIT:
                raise ValueError(f"{directory} is larger than {UPLOAD_LIMIT >> 20} MiB: exclude files with 'excludes'")
            name = f"{prefix}/{rel}" if prefix else rel
            digest.update(name.encode() + b"\0" + data)
            archive.writestr(name, data)
    return f"_ray_pkg_{digest.hexdigest()[:16]}.zip", buffer.getvalue()


def _join(base: str, name: str) -> str:
    return name if base in ("", ".") else f"{base}/{name}"
