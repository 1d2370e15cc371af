"""The warm pool of trial workers: actors made once per run and given one trial after
another, so starting a trial is one actor call, not a new process. An idle worker with
other resources than the next trial needs is ended to make room."""

from typing import Dict, List, Tuple

import oxray
from oxray.tune._runner import TrialRunner

Key = Tuple[Tuple[str, float], ...]


def actor_options(resources: Dict[str, float]) -> Dict:
    options = {"num_cpus": resources.get("CPU", 0.0), "num_gpus": resources.get("GPU", 0.0)}
    if resources.get("memory"):
        options["memory"] = resources["memory"]
    custom = {k: v for k, v in resources.items() if k not in ("CPU", "GPU", "memory")}
    if custom:
        options["resources"] = custom
    return options


def key_of(resources: Dict[str, float]) -> Key:
    return tuple(sorted(resources.items()))


class WorkerPool:
    def __init__(self, runtime_env=None):
        self.runtime_env = runtime_env
        self.idle: Dict[Key, List] = {}
        self.busy: set = set()
        self.created = 0

    def _new(self, resources: Dict[str, float]):
        options = actor_options(resources)
        if self.runtime_env:
            options["runtime_env"] = self.runtime_env
        self.created += 1
        return oxray.remote(TrialRunner).options(**options).remote()

    def prewarm(self, count: int, resources: Dict[str, float]) -> None:
        """Starts `count` workers now, so the first trials do not wait for processes."""
        for _ in range(count):
            self.idle.setdefault(key_of(resources), []).append(self._new(resources))

    def acquire(self, resources: Dict[str, float]):
        key = key_of(resources)
        if self.idle.get(key):
            actor = self.idle[key].pop()
        else:
            for other, actors in self.idle.items():  # its resources are better used by this trial
                if other != key and actors:
                    _kill(actors.pop())
                    break
            actor = self._new(resources)
        self.busy.add(actor)
        return actor

    def release(self, actor, resources: Dict[str, float]) -> None:
        self.busy.discard(actor)
        self.idle.setdefault(key_of(resources), []).append(actor)

    def discard(self, actor) -> None:
        self.busy.discard(actor)
        _kill(actor)

    def shutdown(self) -> None:
        for actor in list(self.busy) + [a for actors in self.idle.values() for a in actors]:
            _kill(actor)
        self.busy.clear()
        self.idle.clear()


def _kill(actor) -> None:
    try:
        oxray.kill(actor)
    except Exception:  # already gone
        pass
