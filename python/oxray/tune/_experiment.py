"""The experiment directory (`storage_path/name`): `.validate_storage_marker`, `tuner.pkl`
(what `Tuner.restore` rebuilds the run from) and `experiment_state-<date>.json`, a JSON
line per trial state change, appended: the newest line of a trial is its state.

Storage given as a URI (`s3://...`) or a pyarrow filesystem is reached through pyarrow,
where nothing can be appended to: the driver then keeps its files (states, results,
params, errors) in a local staging copy, made for the run, and uploads what changed every
`SYNC_S` and at the end, while trial workers write their checkpoints straight to storage,
as Ray Tune does."""

import datetime
import glob
import json
import os
import shutil
import tempfile
import time
from typing import Any, Dict, List, Optional, Tuple

from oxray.train._checkpoint import Checkpoint
from oxray.train._storage import MARKER, Storage, copy_dir
from oxray.tune._metrics import to_json

TUNER_PKL = "tuner.pkl"
SYNC_S = 10.0
STAGING = "oxray-tune-staging"


class Experiment:
    def __init__(self, storage_path: str, name: str, storage_filesystem: Any = None):
        self.name = name
        self.storage = Storage(storage_path, name, storage_filesystem)
        self.remote = self.storage.fs is not None
        self.root = staging_dir(name) if self.remote else self.storage.experiment_path
        self.state_file: Optional[str] = None
        self.searcher_file: Optional[str] = None
        self.uploaded: Dict[str, Tuple[int, int]] = {}  # staged file -> (size, mtime) last uploaded
        self.synced_at = 0.0

    def path(self, *parts: str) -> str:
        """A path in the driver's copy of the experiment (the experiment itself when local)."""
        return os.path.join(self.root, *parts)

    @property
    def storage_path(self) -> str:
        """Where the experiment is kept, on its filesystem."""
        return self.storage.experiment_path

    def create(self, tuner_state: bytes) -> None:
        os.makedirs(self.root, exist_ok=True)
        open(self.path(MARKER), "a").close()
        temporary = self.path(TUNER_PKL + ".tmp")
        with open(temporary, "wb") as f:
            f.write(tuner_state)
        os.replace(temporary, self.path(TUNER_PKL))
        self.sync(force=True)

    # ----- the driver's files

    def save_searcher(self, searcher) -> None:
        """The searcher's state (`Searcher.save`), replaced whole, for `Tuner.restore`."""
        if self.searcher_file is None:
            date = datetime.datetime.now().strftime("%Y-%m-%d_%H-%M-%S")
            self.searcher_file = newest_searcher_state(self.root) or self.path(SEARCHER_STATE.format(date=date))
        temporary = self.searcher_file + ".tmp"
        searcher.save(temporary)
        os.replace(temporary, self.searcher_file)

    def record(self, trial) -> None:
        if self.state_file is None:
            existing = sorted(glob.glob(self.path("experiment_state-*.json")))
            date = datetime.datetime.now().strftime("%Y-%m-%d_%H-%M-%S")
            self.state_file = existing[-1] if existing else self.path(f"experiment_state-{date}.json")
        state = trial.state()
        state["config"] = trial.config
        with open(self.state_file, "a", encoding="utf-8") as f:
            f.write(to_json(state) + "\n")

    def sync(self, force: bool = False) -> None:
        """Uploads the staged files that changed since they were last uploaded (remote
        storage only); at most every SYNC_S unless forced."""
        if not self.remote or (not force and time.monotonic() - self.synced_at < SYNC_S):
            return
        self.synced_at = time.monotonic()
        for rel, stamp in changed_files(self.root, self.uploaded):
            target = self.storage.path(rel)
            self.storage.fs.create_dir(os.path.dirname(target), recursive=True)
            with open(os.path.join(self.root, rel), "rb") as src, self.storage.fs.open_output_stream(target) as dst:
                shutil.copyfileobj(src, dst)
            self.uploaded[rel] = stamp

    def download(self) -> None:
        """Makes the staging copy of a remote experiment, checkpoints left where they are."""
        if not self.remote:
            return
        import pyarrow.fs

        selector = pyarrow.fs.FileSelector(self.storage_path, recursive=True, allow_not_found=True)
        for info in self.storage.fs.get_file_info(selector):
            rel = info.path[len(self.storage_path):].lstrip("/")
            if info.type != pyarrow.fs.FileType.File or is_checkpoint_file(rel):
                continue
            local = self.path(rel)
            os.makedirs(os.path.dirname(local), exist_ok=True)
            with self.storage.fs.open_input_stream(info.path) as src, open(local, "wb") as dst:
                shutil.copyfileobj(src, dst)
            stat = os.stat(local)
            self.uploaded[rel] = (stat.st_size, stat.st_mtime_ns)

    def close(self) -> None:
        """After the last sync: a remote experiment's staging copy is no longer needed."""
        if not self.remote:
            return
        try:
            self.sync(force=True)
        finally:
            shutil.rmtree(self.root, ignore_errors=True)
            try:  # the shared parent goes with the last run's copy
                os.rmdir(os.path.dirname(self.root))
            except OSError:
                pass

    # ----- checkpoints, where trial workers write them

    def trial_storage(self, trial_dir: str) -> Tuple[Any, str]:
        """`(filesystem, path)` of a trial's directory in storage; None for the local one."""
        return self.storage.fs, self.storage.path(os.path.basename(trial_dir))

    def checkpoint(self, trial_dir: str, name: str) -> Checkpoint:
        fs, path = self.trial_storage(trial_dir)
        return Checkpoint(f"{path}/{name}", fs)

    def has_checkpoint(self, trial_dir: str, name: str) -> bool:
        return self.storage.exists(f"{os.path.basename(trial_dir)}/{name}")

    def delete_checkpoint(self, trial_dir: str, name: str) -> None:
        self.storage.delete(f"{os.path.basename(trial_dir)}/{name}")

    def copy_checkpoint(self, src_dir: str, src_name: str, dst_dir: str, dst_name: str) -> None:
        """A copy made whole: what was at the target before is replaced."""
        self.delete_checkpoint(dst_dir, dst_name)
        source, target = self.checkpoint(src_dir, src_name), self.checkpoint(dst_dir, dst_name)
        copy_dir(source.path, self.storage.fs, target.path, self.storage.fs)

    def move_checkpoint(self, trial_dir: str, src_name: str, dst_name: str) -> None:
        source, target = self.checkpoint(trial_dir, src_name), self.checkpoint(trial_dir, dst_name)
        if self.storage.fs is None:
            os.replace(source.path, target.path)
            return
        # Object stores (s3, gs) move single objects, not directories: copy, then delete.
        copy_dir(source.path, self.storage.fs, target.path, self.storage.fs)
        self.delete_checkpoint(trial_dir, src_name)

    def checkpoint_names(self, trial_dir: str) -> List[str]:
        base = os.path.basename(trial_dir)
        if self.storage.fs is None:
            path = self.storage.path(base)
            return sorted(d for d in os.listdir(path) if is_checkpoint_dir(d)) if os.path.isdir(path) else []
        import pyarrow.fs

        infos = self.storage.fs.get_file_info(pyarrow.fs.FileSelector(self.storage.path(base), allow_not_found=True))
        return sorted(os.path.basename(i.path) for i in infos if is_checkpoint_dir(os.path.basename(i.path)))


def staging_dir(name: str) -> str:
    """A fresh local copy of a remote experiment for this run (a restore downloads into it)."""
    parent = os.path.join(tempfile.gettempdir(), STAGING)
    while True:
        os.makedirs(parent, exist_ok=True)
        try:
            return tempfile.mkdtemp(prefix=f"{name}-", dir=parent)
        except FileNotFoundError:  # another run's close removed the empty parent meanwhile
            continue


def is_checkpoint_dir(name: str) -> bool:
    return name.startswith("checkpoint_") and name[len("checkpoint_"):].isdigit()


def is_checkpoint_file(rel: str) -> bool:
    """Whether a path inside the experiment lies in a checkpoint (or a staged exploit)."""
    parts = rel.split("/")
    return len(parts) > 2 and (is_checkpoint_dir(parts[1]) or parts[1] == ".exploit_checkpoint")


def changed_files(root: str, uploaded: Dict[str, Tuple[int, int]]) -> List[Tuple[str, Tuple[int, int]]]:
    """The files under `root` (relative, `/`-separated) whose size or time differ from what
    `uploaded` says, with their new (size, mtime); temporary files are left out."""
    changed = []
    for folder, _, files in os.walk(root):
        for name in files:
            if name.endswith(".tmp"):
                continue
            full = os.path.join(folder, name)
            try:
                stat = os.stat(full)
            except FileNotFoundError:  # replaced in the meantime: the next sync has it
                continue
            rel = os.path.relpath(full, root).replace(os.sep, "/")
            stamp = (stat.st_size, stat.st_mtime_ns)
            if uploaded.get(rel) != stamp:
                changed.append((rel, stamp))
    return sorted(changed)


SEARCHER_STATE = "searcher-state-{date}.pkl"


def newest_searcher_state(root: str) -> Optional[str]:
    found = sorted(glob.glob(os.path.join(root, SEARCHER_STATE.format(date="*"))))
    return found[-1] if found else None


def load_states(root: str) -> List[Dict[str, Any]]:
    """Each trial's newest state, in the order the trials were made."""
    states: Dict[str, Dict[str, Any]] = {}
    for name in sorted(glob.glob(os.path.join(root, "experiment_state-*.json"))):
        with open(name, encoding="utf-8") as f:
            for line in f:
                if line.strip():
                    try:
                        state = json.loads(line)
                    except ValueError:  # a line cut short by a crash
                        continue
                    states[state["trial_id"]] = state
    return list(states.values())
