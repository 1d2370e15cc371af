"""Which checkpoints a run keeps: the bookkeeping of committed checkpoints, decided by pure
functions over the run's reports, and the snapshot that a rerun of the same run resumes
from (`checkpoint_manager_snapshot.json`, written before anything is deleted)."""

import json
import math
from typing import Any, Dict, List, Optional, Tuple

from oxray.train._config import CheckpointConfig

SNAPSHOT = "checkpoint_manager_snapshot.json"
SNAPSHOT_VERSION = 1


def flatten(metrics: Dict[str, Any], prefix: str = "") -> Dict[str, Any]:
    """Nested dicts as `a/b` keys, as scores name them."""
    out = {}
    for key, value in metrics.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(flatten(value, name + "/"))
        else:
            out[name] = value
    return out


def score_key(entry: Dict[str, Any], config: CheckpointConfig) -> Tuple:
    """Sorts worst first. Without a score attribute the order of the reports decides; NaN
    ranks below -inf, below every real score; on a tie the later report is better."""
    index = entry["index"]
    attribute = config.checkpoint_score_attribute
    if attribute is None:
        return (0, 0.0, index)
    value = flatten(entry["metrics"]).get(attribute)
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        raise ValueError(f"checkpoint_score_attribute {attribute!r} is not a number in the reported metrics "
                         f"{entry['metrics']!r}")
    if math.isnan(value):
        return (0, 0.0, index)
    return (1, value if config.checkpoint_score_order == "max" else -value, index)


class CheckpointManager:
    """The committed checkpoints of a run, worst first, and the latest one."""

    def __init__(self, config: CheckpointConfig):
        self.config = config
        self.checkpoints: List[Dict[str, Any]] = []  # {"index", "dir_name", "metrics"}
        self.latest: Optional[Dict[str, Any]] = None
        self.report_index = 0

    def register(self, dir_name: str, metrics: Dict[str, Any]) -> List[str]:
        """Commits a checkpoint; returns the directories that fall out (never the latest)."""
        entry = {"index": self.report_index, "dir_name": dir_name, "metrics": metrics}
        score_key(entry, self.config)  # a bad score attribute fails before anything changes
        self.checkpoints = [c for c in self.checkpoints if c["dir_name"] != dir_name] + [entry]
        self.checkpoints.sort(key=lambda c: score_key(c, self.config))
        self.latest = entry
        keep = self.config.num_to_keep
        if keep is None or len(self.checkpoints) <= keep:
            return []
        best = self.checkpoints[-keep:]
        dropped = [c for c in self.checkpoints[:-keep] if c is not self.latest]
        self.checkpoints = [c for c in self.checkpoints if c in best or c is self.latest]
        return [c["dir_name"] for c in dropped]

    def advance(self) -> None:
        """A round of reports was joined (with or without a checkpoint)."""
        self.report_index += 1

    def snapshot(self) -> str:
        return json.dumps({
            "version": SNAPSHOT_VERSION,
            "checkpoint_results": self.checkpoints,
            "latest_checkpoint_result": self.latest,
            "current_report_index": self.report_index,
        }, indent=1, default=repr)

    @classmethod
    def restore(cls, config: CheckpointConfig, text: str) -> "CheckpointManager":
        data = json.loads(text)
        if data.get("version") != SNAPSHOT_VERSION:
            raise ValueError(f"{SNAPSHOT} has version {data.get('version')!r}, this oxray reads {SNAPSHOT_VERSION}")
        manager = cls(config)
        manager.checkpoints = list(data["checkpoint_results"])
        latest = data.get("latest_checkpoint_result")
        manager.latest = next((c for c in manager.checkpoints if latest and c["dir_name"] == latest["dir_name"]),
                              latest)
        manager.report_index = int(data.get("current_report_index", 0))
        return manager
