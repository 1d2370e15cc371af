"""The experiment directory (`storage_path/name`): `.validate_storage_marker`, `tuner.pkl`
(what `Tuner.restore` rebuilds the run from) and `experiment_state-<date>.json`, a JSON
line per trial state change, appended: the newest line of a trial is its state."""

import datetime
import glob
import json
import os
from typing import Any, Dict, List, Optional

from oxray.train._storage import MARKER, resolve
from oxray.tune._metrics import to_json

TUNER_PKL = "tuner.pkl"


class Experiment:
    def __init__(self, storage_path: str, name: str, storage_filesystem: Any = None):
        filesystem, root = resolve(storage_path, storage_filesystem)
        if filesystem is not None:
            raise NotImplementedError(f"storage at {storage_path!r}: Tune keeps its runs on a local or shared "
                                      "directory for now (use a mounted path)")
        self.name = name
        self.root = os.path.join(root, name)
        self.state_file: Optional[str] = None
        self.searcher_file: Optional[str] = None

    def path(self, *parts: str) -> str:
        return os.path.join(self.root, *parts)

    def create(self, tuner_state: bytes) -> None:
        os.makedirs(self.root, exist_ok=True)
        open(self.path(MARKER), "a").close()
        temporary = self.path(TUNER_PKL + ".tmp")
        with open(temporary, "wb") as f:
            f.write(tuner_state)
        os.replace(temporary, self.path(TUNER_PKL))

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
