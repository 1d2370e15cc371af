"""`Result`: what a run left: its metrics, its checkpoints and where they are."""

import dataclasses
import json
from typing import Any, Dict, List, Optional, Tuple

from oxray.train._checkpoint import Checkpoint
from oxray.train._checkpoints import SNAPSHOT, flatten
from oxray.train._storage import Storage

REPORTS = "result.json"  # one JSON line per joined report: rank 0's metrics


@dataclasses.dataclass
class Result:
    metrics: Optional[Dict[str, Any]]
    checkpoint: Optional[Checkpoint]
    path: str
    filesystem: Any = None
    error: Optional[BaseException] = None
    best_checkpoints: List[Tuple[Checkpoint, Dict[str, Any]]] = dataclasses.field(default_factory=list)
    return_value: Any = None
    _reports: List[Dict[str, Any]] = dataclasses.field(default_factory=list, repr=False)

    @property
    def metrics_dataframe(self):
        """Every report's metrics (rank 0's), one row each, as a pandas DataFrame."""
        import pandas

        return pandas.DataFrame([flatten(m) for m in self._reports])

    def get_best_checkpoint(self, metric: str, mode: str) -> Optional[Checkpoint]:
        if mode not in ("max", "min"):
            raise ValueError(f"mode must be 'max' or 'min', got {mode!r}")
        scored = [(flatten(m).get(metric), c) for c, m in self.best_checkpoints]
        scored = [(v, c) for v, c in scored if isinstance(v, (int, float))]
        if not scored:
            return None
        pick = max if mode == "max" else min
        return pick(scored, key=lambda vc: vc[0])[1]

    @classmethod
    def from_path(cls, path: str, storage_filesystem: Any = None) -> "Result":
        """The result of a run from its directory (`storage_path/name`)."""
        root, name = path.rstrip("/").rsplit("/", 1)
        return load(Storage(root, name, storage_filesystem))


def load(storage: Storage, return_value: Any = None, error: Optional[BaseException] = None) -> Result:
    snapshot_text = storage.read_text(SNAPSHOT)
    if snapshot_text is None and storage.read_text(REPORTS) is None and not storage.exists(""):
        raise FileNotFoundError(f"no training run at {storage.experiment_path!r}")
    snapshot = json.loads(snapshot_text) if snapshot_text else {"checkpoint_results": [], "latest_checkpoint_result": None}
    reports = [json.loads(line) for line in (storage.read_text(REPORTS) or "").splitlines() if line.strip()]

    def checkpoint(entry):
        return Checkpoint(storage.path(entry["dir_name"]), storage.fs)

    latest = snapshot.get("latest_checkpoint_result")
    return Result(
        metrics=reports[-1] if reports else (latest or {}).get("metrics"),
        checkpoint=checkpoint(latest) if latest else None,
        path=storage.experiment_path,
        filesystem=storage.fs,
        error=error,
        best_checkpoints=[(checkpoint(e), e["metrics"]) for e in snapshot["checkpoint_results"]],
        return_value=return_value,
        _reports=reports,
    )
