"""The warm pool of trial workers: actors made once per run and given one trial after
another, so starting a trial is one actor call, not a new process. An idle worker with
other resources than the next trial needs is ended to make room. A trial of several
bundles gets its worker inside a placement group of its own, which captures what the
trial starts, and which the worker keeps while it is pooled."""

from typing import Dict, List, Tuple

import oxray
from oxray.tune._runner import TrialRunner
from oxray.tune._trainable import TrialResources

Key = Tuple


def actor_options(resources: Dict[str, float]) -> Dict:
    options = {"num_cpus": resources.get("CPU", 0.0), "num_gpus": resources.get("GPU", 0.0)}
    if resources.get("memory"):
        options["memory"] = resources["memory"]
    custom = {k: v for k, v in resources.items() if k not in ("CPU", "GPU", "memory")}
    if custom:
        options["resources"] = custom
    return options


def key_of(resources: TrialResources) -> Key:
    return tuple(tuple(sorted(b.items())) for b in resources.bundles) + (resources.strategy,)


class WorkerPool:
    def __init__(self, runtime_env=None):
        self.runtime_env = runtime_env
        self.idle: Dict[Key, List] = {}
        self.busy: set = set()
        self.groups: Dict = {}  # worker -> the placement group it runs in
        self.created = 0

    def _new(self, resources: TrialResources):
        options = actor_options(resources.head)
        if self.runtime_env:
            options["runtime_env"] = self.runtime_env
        group = None
        if resources.grouped:
            from oxray.util.placement_group import placement_group, remove_placement_group
            from oxray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

            # A worker that holds nothing (an empty first bundle) runs in any bundle.
            held = any(resources.head.values())
            bundles = [dict(b) for b in resources.bundles if b is not resources.head or held]
            group = placement_group(bundles, strategy=resources.strategy)
            options["scheduling_strategy"] = PlacementGroupSchedulingStrategy(
                group, 0 if held else -1, placement_group_capture_child_tasks=True)
        self.created += 1
        try:
            actor = oxray.remote(TrialRunner).options(**options).remote()
        except BaseException:
            if group is not None:
                remove_placement_group(group)
            raise
        if group is not None:
            self.groups[actor] = group
        return actor

    def prewarm(self, count: int, resources: TrialResources) -> None:
        """Starts `count` workers now, so the first trials do not wait for processes."""
        for _ in range(count):
            self.idle.setdefault(key_of(resources), []).append(self._new(resources))

    def acquire(self, resources: TrialResources):
        actor = self.take_idle(resources)  # else an idle one of other resources made room
        if actor is None:
            actor = self._new(resources)
            self.busy.add(actor)
        return actor

    def take_idle(self, resources: TrialResources):
        """An idle worker of these resources, now busy; else None, and an idle worker of
        other resources is ended so that its room frees."""
        key = key_of(resources)
        if self.idle.get(key):
            actor = self.idle[key].pop()
            self.busy.add(actor)
            return actor
        other = next((actors for actors in self.idle.values() if actors), None)
        if other:
            self._end(other.pop())
        return None

    def release(self, actor, resources: TrialResources) -> None:
        self.busy.discard(actor)
        self.idle.setdefault(key_of(resources), []).append(actor)

    def discard(self, actor) -> None:
        self.busy.discard(actor)
        self._end(actor)

    def shutdown(self) -> None:
        for actor in list(self.busy) + [a for actors in self.idle.values() for a in actors]:
            self._end(actor)
        self.busy.clear()
        self.idle.clear()

    def _end(self, actor) -> None:
        try:
            oxray.kill(actor)
        except Exception:  # already gone
            pass
        group = self.groups.pop(actor, None)
        if group is not None:
            try:
                oxray.util.remove_placement_group(group)
            except Exception:  # already removed
                pass
