"""A trial as the driver keeps it, and the files of its directory: `params.json`,
`params.pkl`, `result.json` (a JSON line per result), `progress.csv`, `checkpoint_NNNNNN/`,
`error.txt` and `error.pkl`. Files are appended to as results come, never rewritten."""

import csv
import dataclasses
import io
import os
import pickle
from typing import Any, Callable, Dict, List, Optional, Tuple

from oxray.tune._metrics import flatten, is_number, to_json
from oxray.tune._trainable import TrialResources

PENDING, RUNNING, PAUSED, TERMINATED, ERROR = "PENDING", "RUNNING", "PAUSED", "TERMINATED", "ERROR"


@dataclasses.dataclass(eq=False)
class Trial:
    trial_id: str
    trainable_name: str
    config: Dict[str, Any]
    experiment_tag: str
    path: str
    resources: TrialResources
    status: str = PENDING
    last_result: Dict[str, Any] = dataclasses.field(default_factory=dict)
    num_results: int = 0
    checkpoints: List[Tuple[str, Dict[str, Any]]] = dataclasses.field(default_factory=list)  # kept, oldest first
    resume_from: Optional[Dict[str, Any]] = None  # the result that carried the latest checkpoint
    checkpoint_index: int = 0
    num_failures: int = 0
    error: Optional[BaseException] = None
    error_msg: Optional[str] = None
    csv_header: Optional[List[str]] = None
    stopping: bool = False
    pausing: bool = False  # told to yield its worker; it goes on later from its checkpoint
    after_pause: Optional[str] = None  # "resume" or "stop", when decided before its worker let go
    exploit: Optional[Tuple[Dict[str, Any], str, Dict[str, Any]]] = None  # (config, staged checkpoint, its result)

    def __str__(self):
        return f"{self.trainable_name}_{self.trial_id}"

    @property
    def local_path(self) -> str:
        return self.path

    @property
    def latest_checkpoint(self) -> Optional[str]:
        return self.checkpoints[-1][0] if self.checkpoints else None

    def state(self) -> Dict[str, Any]:
        """What restore needs (a line of the experiment state)."""
        return {"trial_id": self.trial_id, "status": self.status, "path": os.path.basename(self.path),
                "experiment_tag": self.experiment_tag, "trainable_name": self.trainable_name,
                "resources": self.resources.to_json(), "checkpoints": [c for c, _ in self.checkpoints],
                "resume_from": self.resume_from, "checkpoint_index": self.checkpoint_index,
                "num_failures": self.num_failures, "error_msg": self.error_msg}


def dir_name(trainable_name: str, trial_id: str, experiment_tag: str, date: str) -> str:
    """`<trainable>_<trial id>_<index>_<k=v,...>_<date>`, the identifier cut at 130 characters."""
    identifier = f"{trainable_name}_{trial_id}".replace("/", "_") + f"_{experiment_tag}"
    return identifier[:130] + f"_{date}"


def write_params(trial: Trial) -> None:
    os.makedirs(trial.path, exist_ok=True)
    with open(os.path.join(trial.path, "params.json"), "w", encoding="utf-8") as f:
        f.write(to_json(trial.config, indent=2, sort_keys=True))
    try:
        from oxray._private import serialization

        data = serialization.dumps(trial.config)
    except Exception:
        return  # a config that does not pickle still has its params.json
    with open(os.path.join(trial.path, "params.pkl"), "wb") as f:
        f.write(data)


def csv_row(header: List[str], flat: Dict[str, Any]) -> str:
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=header, extrasaction="ignore", lineterminator="\n")
    writer.writerow({k: flat.get(k, "") for k in header})
    return out.getvalue()


def append_result(trial: Trial, result: Dict[str, Any]) -> None:
    with open(os.path.join(trial.path, "result.json"), "a", encoding="utf-8") as f:
        f.write(to_json(result) + "\n")
    flat = flatten(result, keep_config=False)
    text = ""
    if trial.csv_header is None:
        # The columns are those of the first result; later new keys are left out, as in Ray Tune.
        trial.csv_header = list(flat)
        text = ",".join(_csv_cell(h) for h in trial.csv_header) + "\n"
    with open(os.path.join(trial.path, "progress.csv"), "a", encoding="utf-8") as f:
        f.write(text + csv_row(trial.csv_header, flat))


def _csv_cell(value: str) -> str:
    return csv_row(["x"], {"x": value}).rstrip("\n")


def write_error(trial: Trial, error: BaseException, trace: str) -> None:
    os.makedirs(trial.path, exist_ok=True)
    with open(os.path.join(trial.path, "error.txt"), "a", encoding="utf-8") as f:
        f.write(f"Failure # {trial.num_failures} (occurred at {_now()})\n{trace or repr(error)}\n")
    try:
        with open(os.path.join(trial.path, "error.pkl"), "wb") as f:
            pickle.dump(error, f)
    except Exception:
        pass


def _now() -> str:
    import datetime

    return datetime.datetime.now().strftime("%Y-%m-%d_%H-%M-%S")


def checkpoints_to_delete(checkpoints: List[Tuple[str, Dict[str, Any]]], num_to_keep: Optional[int],
                          attribute: Optional[str], order: str) -> List[str]:
    """Which checkpoints go so that `num_to_keep` stay: the worst by `attribute` (the oldest
    when unset, or for those that lack it); the latest always stays."""
    if num_to_keep is None or len(checkpoints) <= num_to_keep:
        return []
    latest = checkpoints[-1][0]
    sign = 1 if order == "max" else -1

    def rank(item):
        index, (_, metrics) = item
        value = flatten(metrics).get(attribute) if attribute else None
        return (0, index) if not is_number(value) else (1, sign * value, index)

    ranked = sorted(enumerate(checkpoints), key=rank)  # worst first
    excess = len(checkpoints) - num_to_keep
    return [name for _, (name, _) in ranked if name != latest][:excess]


def prune_checkpoints(trial: Trial, checkpoint_config, delete: Callable[[str], None]) -> None:
    doomed = checkpoints_to_delete(trial.checkpoints, checkpoint_config.num_to_keep,
                                   checkpoint_config.checkpoint_score_attribute,
                                   checkpoint_config.checkpoint_score_order)
    for name in doomed:
        delete(name)
    trial.checkpoints = [c for c in trial.checkpoints if c[0] not in doomed]
