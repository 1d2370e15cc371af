"""Trainables: functions `f(config)` that call `tune.report`, and `Trainable` classes
whose `step()` the worker calls in a loop; plus `with_resources` and `with_parameters`."""

import copy
import dataclasses
import inspect
import os
import pickle
import shutil
import tempfile
from typing import Any, Callable, Dict, List, Optional, Tuple, Union

from oxray.train._checkpoint import Checkpoint

DICT_CHECKPOINT = "_dict_checkpoint.pkl"  # where a save_checkpoint that returns a dict is kept


class Trainable:
    """Subclass with `setup(config)`, `step() -> dict`, and for checkpoints
    `save_checkpoint(dir)` / `load_checkpoint(dir_or_dict)`."""

    def __init__(self, config: Optional[Dict] = None, **kwargs):
        self.config = config or {}
        self._iteration = 0
        self.setup(copy.deepcopy(self.config), **kwargs)

    def setup(self, config: Dict, **kwargs) -> None:
        pass

    def step(self) -> Dict:
        raise NotImplementedError(f"{type(self).__name__}.step() must return a dict of metrics")

    def save_checkpoint(self, checkpoint_dir: str) -> Optional[Dict]:
        return None

    def load_checkpoint(self, checkpoint: Union[str, Dict]) -> None:
        pass

    def cleanup(self) -> None:
        pass

    def reset_config(self, new_config: Dict) -> bool:
        return False

    @classmethod
    def default_resource_request(cls, config: Dict):
        return None

    @property
    def iteration(self) -> int:
        return self._iteration

    @property
    def training_iteration(self) -> int:
        return self._iteration

    @property
    def trial_id(self) -> str:
        from oxray.tune._session import get_context

        return get_context().get_trial_id()

    @property
    def trial_name(self) -> str:
        from oxray.tune._session import get_context

        return get_context().get_trial_name()

    @property
    def logdir(self) -> str:
        from oxray.tune._session import get_context

        return get_context().get_trial_dir()


STRATEGIES = ("PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD")


def summed(bundles) -> Dict[str, float]:
    """Each resource over all the bundles."""
    total: Dict[str, float] = {}
    for bundle in bundles:
        for k, v in bundle.items():
            total[k] = total.get(k, 0.0) + v
    return total


class PlacementGroupFactory:
    """Resources as bundles; the trial's own worker holds the first bundle, and the tasks
    and actors it starts run in the others (its placement group captures them)."""

    def __init__(self, bundles: List[Dict[str, float]], strategy: str = "PACK", *args, **kwargs):
        if not bundles or not all(isinstance(b, dict) for b in bundles):
            raise ValueError("PlacementGroupFactory takes a non-empty list of resource dicts")
        if strategy not in STRATEGIES:
            raise ValueError(f"PlacementGroupFactory(strategy={strategy!r}): one of {', '.join(STRATEGIES)}")
        self.bundles, self.strategy = [dict(b) for b in bundles], strategy

    @property
    def head_bundle(self) -> Dict[str, float]:
        return self.bundles[0]

    @property
    def required_resources(self) -> Dict[str, float]:
        return summed(self.bundles)

    def __eq__(self, other):
        return isinstance(other, PlacementGroupFactory) and (self.bundles, self.strategy) == (other.bundles,
                                                                                             other.strategy)

    def __repr__(self):
        return f"PlacementGroupFactory({self.bundles!r}, strategy={self.strategy!r})"


def is_class_trainable(trainable: Any) -> bool:
    return inspect.isclass(trainable) and issubclass(trainable, Trainable)


def trainable_name(trainable: Any) -> str:
    name = getattr(trainable, "_oxray_tune_name", None) or getattr(trainable, "__name__", None)
    return name or type(trainable).__name__


def with_resources(trainable: Any, resources: Any) -> Any:
    """The trainable, asking for `resources` per trial: `{"cpu": 2, "gpu": 1, "<custom>": x}`,
    a PlacementGroupFactory, or `fn(config)` returning either."""
    if is_class_trainable(trainable):
        wrapped = type(trainable.__name__, (trainable,), {"__module__": trainable.__module__})
        wrapped._oxray_tune_resources = resources
        return wrapped
    wrapped = _Wrapped(trainable)
    wrapped._oxray_tune_resources = resources
    return wrapped


class _Wrapped:
    """A function trainable with attributes attached; a module-level class so it pickles
    by reference to the function it wraps."""

    def __init__(self, fn: Callable, extra: Optional[Dict[str, Any]] = None):
        self.fn, self.extra = fn, extra or {}
        self._oxray_tune_name = trainable_name(fn)
        self._oxray_tune_resources = getattr(fn, "_oxray_tune_resources", None)

    def __call__(self, config):
        if not self.extra:
            return self.fn(config)
        import oxray

        values = {k: oxray.get(v) for k, v in self.extra.items()}
        return self.fn(config, **values)


def with_parameters(trainable: Any, **kwargs) -> Any:
    """The trainable, given `kwargs` (large objects: a dataset, a model) from the object
    store, put there once for all trials."""
    import oxray

    refs = {k: oxray.put(v) for k, v in kwargs.items()}
    if is_class_trainable(trainable):
        def setup(self, config, **_):
            trainable.setup(self, config, **{k: oxray.get(v) for k, v in refs.items()})

        return type(trainable.__name__, (trainable,), {"setup": setup, "__module__": trainable.__module__})
    return _Wrapped(trainable, refs)


@dataclasses.dataclass(frozen=True)
class TrialResources:
    """What a trial holds while it runs: its worker's bundle first, then (from a
    PlacementGroupFactory) the bundles its own tasks and actors run in."""

    bundles: Tuple[Dict[str, float], ...]
    strategy: str = "PACK"

    @property
    def head(self) -> Dict[str, float]:
        return self.bundles[0]

    @property
    def total(self) -> Dict[str, float]:
        return summed(self.bundles)

    @property
    def grouped(self) -> bool:
        """Whether the trial needs a placement group of its own."""
        return len(self.bundles) > 1

    def to_json(self) -> Dict[str, Any]:
        return {"bundles": list(self.bundles), "strategy": self.strategy}

    @classmethod
    def from_json(cls, value: Dict[str, Any]) -> "TrialResources":
        if "bundles" not in value:  # a run saved with one bundle, as a plain dict
            return cls((dict(value),))
        return cls(tuple(dict(b) for b in value["bundles"]), value.get("strategy", "PACK"))


def resources_for(trainable: Any, config: Dict) -> TrialResources:
    """The trial's resources, in oxray's names (CPU, GPU, custom): 1 CPU by default."""
    request = getattr(trainable, "_oxray_tune_resources", None)
    if request is None and is_class_trainable(trainable):
        request = trainable.default_resource_request(config)
    if callable(request) and not isinstance(request, PlacementGroupFactory):
        request = request(config)
    if request is None:
        return TrialResources(({"CPU": 1.0},))
    if isinstance(request, PlacementGroupFactory):
        # The first bundle is the trial worker's, as given: empty, the worker holds nothing.
        bundles = [_bundle(request.bundles[0])] + [_bundle(b, needed=True) for b in request.bundles[1:]]
        return TrialResources(tuple(bundles), request.strategy)
    if not isinstance(request, dict):
        raise TypeError(f"trial resources must be a dict or a PlacementGroupFactory, got {type(request).__name__}")
    resources = _bundle(request)
    resources.setdefault("CPU", 0.0 if resources else 1.0)  # 1 CPU unless it names others
    return TrialResources((resources,))


def _bundle(request: Dict[str, Any], needed: bool = False) -> Dict[str, float]:
    """One bundle in oxray's names; `needed`: it must ask for something."""
    names = {"cpu": "CPU", "gpu": "GPU"}
    resources = {names.get(k, k): float(v) for k, v in request.items()}
    for k, v in resources.items():
        if v < 0:
            raise ValueError(f"trial resources: {k}={v} is not an amount >= 0")
    if needed and not any(resources.values()):
        raise ValueError(f"trial resources: the bundle {request!r} asks for nothing")
    return resources


def check_picklable(trainable: Any) -> None:
    from oxray._private import serialization

    try:
        serialization.dumps(trainable)
    except Exception as e:
        raise TypeError(f"the trainable {trainable_name(trainable)!r} cannot be pickled, so it cannot be sent to "
                        f"the trial workers: {e}. Move what it captures (locks, open files, clients) into the "
                        "function, or pass it with tune.with_parameters") from e


def run_function(fn: Callable, config: Dict, report: Callable) -> None:
    """A function trainable; a dict it returns is its last result."""
    returned = fn(config)
    if isinstance(returned, dict):
        report(returned)
    elif returned is not None and not isinstance(returned, (int, float)):
        raise TypeError(f"a function trainable returns None or a dict of metrics, got {type(returned).__name__}")
    elif isinstance(returned, (int, float)) and not isinstance(returned, bool):
        report({"_metric": returned})


def run_class(cls: type, config: Dict, session, checkpoint_config) -> None:
    """The class trainable's loop: `step()` until a result says `done` or the run stops it,
    checkpointing every `checkpoint_frequency` steps or when a result asks for it."""
    from oxray.tune._errors import StopTrial

    trainable = cls(config)
    frequency = getattr(checkpoint_config, "checkpoint_frequency", 0) or 0
    at_end = bool(getattr(checkpoint_config, "checkpoint_at_end", False))
    try:
        if session.checkpoint is not None:
            with session.checkpoint.as_directory() as d:
                trainable.load_checkpoint(_load_arg(d))
        trainable._iteration = session.iteration
        while True:
            result = trainable.step()
            if not isinstance(result, dict):
                raise TypeError(f"{cls.__name__}.step() must return a dict, got {type(result).__name__}")
            trainable._iteration += 1
            done = bool(result.get("done"))
            wants = result.get("should_checkpoint") or (frequency and trainable._iteration % frequency == 0)
            checkpoint = _save(trainable) if wants or (done and at_end) else None
            try:
                session.report(result, checkpoint)
            except StopTrial:
                if at_end and checkpoint is None:
                    session.persist(_save(trainable))
                raise
            finally:
                if checkpoint is not None:
                    shutil.rmtree(checkpoint.path, ignore_errors=True)
            if done:
                return
    finally:
        trainable.cleanup()


def _save(trainable: Trainable) -> Checkpoint:
    directory = tempfile.mkdtemp(prefix="oxray_tune_ckpt_")
    saved = trainable.save_checkpoint(directory)
    if isinstance(saved, dict):
        with open(os.path.join(directory, DICT_CHECKPOINT), "wb") as f:
            pickle.dump(saved, f)
    return Checkpoint.from_directory(directory)


def _load_arg(directory: str) -> Union[str, Dict]:
    path = os.path.join(directory, DICT_CHECKPOINT)
    if os.path.exists(path):
        with open(path, "rb") as f:
            return pickle.load(f)
    return directory


