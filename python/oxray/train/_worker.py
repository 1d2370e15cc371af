"""The actors of a worker group: `TrainWorker` runs the training function in a thread of
its own, so its other threads answer the controller's polls while it trains; `Sync` is
where the ranks meet for `report` and the collectives."""

import os
import pickle
import queue
import socket
import threading
import traceback
from typing import Any, Callable, Dict, Optional

from oxray._private.serialization import portable_error
from oxray.train import _session


class Sync:
    """Rounds of `broadcast_from_rank_zero`: each returns rank 0's value once every rank
    has arrived."""

    def __init__(self, world_size: int):
        self.world_size = world_size
        self.cond = threading.Condition()
        self.rounds: Dict[int, Dict[str, Any]] = {}

    def broadcast_from_rank_zero(self, rank: int, round_no: int, value: Any) -> Any:
        with self.cond:
            r = self.rounds.setdefault(round_no, {"arrived": 0, "left": 0, "value": None})
            if rank == 0:
                r["value"] = value
            r["arrived"] += 1
            self.cond.notify_all()
            self.cond.wait_for(lambda: r["arrived"] >= self.world_size)
            r["left"] += 1
            if r["left"] >= self.world_size:
                del self.rounds[round_no]
            return r["value"]


class TrainWorker:
    def __init__(self):
        self.reports: "queue.Queue[Dict]" = queue.Queue(maxsize=1)  # the trainer waits for each to be taken
        self.error: Optional[tuple] = None
        self.return_value: Any = None
        self.backend = None
        self.session: Optional[_session.Session] = None
        self.thread: Optional[threading.Thread] = None

    def metadata(self) -> Dict[str, Any]:
        import oxray

        return {
            "node_id": oxray.get_runtime_context().get_node_id(),
            "node_ip": os.environ.get("OXRAY_NODE_IP") or oxray.util.get_node_ip_address(),
            "hostname": socket.gethostname(),
            "pid": os.getpid(),
            "gpu_ids": [str(g) for g in oxray.get_gpu_ids()],
        }

    def free_port(self) -> int:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("", 0))
            return s.getsockname()[1]

    def init_session(self, info: Dict[str, Any], env: Dict[str, str], sync, backend) -> None:
        """Takes its place in the group: its ranks, environment and the run's checkpoint;
        then the backend sets up (a torch process group)."""
        os.environ.update(env)
        rank = info["context"].world_rank
        rounds = iter(range(1 << 62))

        def broadcast(value):
            if info["context"].world_size == 1:
                return value
            import oxray

            return oxray.get(sync.broadcast_from_rank_zero.remote(rank, next(rounds), value))

        self.session = _session.Session(info["context"], info["checkpoint"], self.reports.put, broadcast,
                                        info.get("dataset_shards"), info.get("report_index", 0))
        _session.install(self.session)
        self.backend = backend
        if backend is not None:
            backend.on_worker_start(info["context"])

    def run(self, fn: Callable, args: tuple) -> None:
        """Starts the training function and returns at once."""

        def train():
            try:
                if self.backend is not None:
                    self.backend.before_train()
                self.return_value = fn(*args)
                self.session.finish()
            except BaseException as error:  # the run's controller decides what it means
                self.error = (portable_error(error), traceback.format_exc())
            self.reports.put(None)  # after the reports it made, the end

        self.thread = threading.Thread(target=train, name="train", daemon=True)
        self.thread.start()

    def poll(self, wait_s: float) -> Dict[str, Any]:
        """The next report, or the end of the function, or nothing new after `wait_s`."""
        try:
            item = self.reports.get(timeout=wait_s)
        except queue.Empty:
            return {}
        if item is not None:
            return {"report": item}
        self.reports.put(None)  # later polls see the end too
        if self.error is not None:
            return {"error": self.error}
        try:
            pickle.dumps(self.return_value)
        except Exception as e:
            return {"error": (ValueError(f"the training function's return value cannot be pickled: {e}"), "")}
        return {"done": True, "return_value": self.return_value}

    def shutdown(self) -> None:
        if self.backend is not None:
            self.backend.on_worker_shutdown()
