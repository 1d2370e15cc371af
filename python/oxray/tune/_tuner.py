"""`Tuner`: checks the run's inputs before any trial starts, runs the experiment, and
restores a stopped one from its directory."""

import datetime
import os
import pickle
from typing import Any, Dict, List, Optional


from oxray.train._storage import Storage, is_uri
from oxray.tune._config import RunConfig, TuneConfig, default_storage_path
from oxray.tune._controller import TuneController
from oxray.tune._errors import TuneError
from oxray.tune._experiment import TUNER_PKL, Experiment, load_states, newest_searcher_state
from oxray.tune._result import ResultGrid, load_trial
from oxray.tune._trainable import TrialResources, check_picklable, trainable_name
from oxray.tune._trial import ERROR, PENDING, TERMINATED, Trial
from oxray.tune.schedulers import FIFOScheduler, TrialScheduler
from oxray.tune.search import BasicVariantGenerator, ConcurrencyLimiter, Searcher
from oxray.tune.search.variants import find_unresolved, is_grid


def check_trainable(trainable: Any) -> None:
    if type(trainable).__name__.endswith("Trainer") and hasattr(trainable, "fit"):
        raise TypeError("passing a Trainer to Tuner is not supported (Ray Train V2): call trainer.fit() inside a "
                        "function trainable, e.g. def train_driver_fn(config): TorchTrainer(...).fit(), and "
                        "tune that function")
    if not callable(trainable):
        raise TypeError(f"Tuner takes a function or a tune.Trainable subclass, got {type(trainable).__name__}")
    if isinstance(trainable, str):
        raise TypeError("Tuner takes the trainable itself, not a registered name")
    check_picklable(trainable)


def check_space(param_space: Any) -> None:
    if param_space is None:
        return
    if not isinstance(param_space, dict):
        raise TypeError(f"param_space must be a dict, got {type(param_space).__name__}")
    for path, value in find_unresolved(param_space):
        if is_grid(value) and not value["grid_search"]:
            raise ValueError(f"param_space: the grid_search at {'/'.join(map(str, path))} is empty")


def prepare_searcher(tune_config: TuneConfig, param_space: Dict) -> Searcher:
    searcher = tune_config.search_alg or BasicVariantGenerator()
    if isinstance(searcher, ConcurrencyLimiter) and tune_config.max_concurrent_trials:
        raise ValueError("both a ConcurrencyLimiter and TuneConfig(max_concurrent_trials) are set: keep one")
    if tune_config.max_concurrent_trials and not isinstance(searcher, BasicVariantGenerator):
        searcher = ConcurrencyLimiter(searcher, tune_config.max_concurrent_trials)
    if (tune_config.metric and searcher.metric and searcher.metric != tune_config.metric) or \
            (tune_config.mode and searcher.mode and searcher.mode != tune_config.mode):
        raise ValueError("the searcher has its own metric/mode and TuneConfig sets others: set them in one place")
    if not searcher.set_search_properties(tune_config.metric, tune_config.mode, param_space,
                                          num_samples=tune_config.num_samples):
        raise ValueError(f"{type(searcher).__name__} cannot take this search space")
    return searcher


def prepare_scheduler(tune_config: TuneConfig) -> TrialScheduler:
    scheduler = tune_config.scheduler or FIFOScheduler()
    scheduler.set_search_properties(tune_config.metric, tune_config.mode)
    return scheduler


class Tuner:
    def __init__(self, trainable: Any = None, *, param_space: Optional[Dict] = None,
                 tune_config: Optional[TuneConfig] = None, run_config: Optional[RunConfig] = None,
                 _restored: Optional[Dict] = None):
        self.trainable = trainable
        self.param_space = param_space if param_space is not None else {}
        self.tune_config = tune_config or TuneConfig()
        self.run_config = run_config or RunConfig()
        self._restored = _restored
        self._results: Optional[ResultGrid] = None
        check_trainable(trainable)
        check_space(self.param_space)
        if self.run_config.name is None:
            stamp = datetime.datetime.now().strftime("%Y-%m-%d_%H-%M-%S")
            self.run_config.name = f"{trainable_name(trainable)}_{stamp}"

    def _experiment(self) -> Experiment:
        return Experiment(self.run_config.storage_path or default_storage_path(), self.run_config.name,
                          self.run_config.storage_filesystem)

    def fit(self) -> ResultGrid:
        """Runs every trial; a trial's error is in the results (`errors`), not raised."""
        import oxray

        if not oxray.is_initialized():
            oxray.init()
        searcher = prepare_searcher(self.tune_config, self.param_space)
        scheduler = prepare_scheduler(self.tune_config)
        experiment = self._experiment()
        try:
            if self._restored:
                experiment.download()
            experiment.create(self._tuner_state())
            trials = self._restored_trials(experiment, searcher) if self._restored else []
            controller = TuneController(self.trainable, trainable_name(self.trainable), experiment, searcher,
                                        scheduler, self.tune_config, self.run_config, trials)
            trials = controller.run()
            self._results = ResultGrid([_to_result(t, experiment) for t in trials], experiment.storage_path,
                                       self.tune_config.metric, self.tune_config.mode)
        finally:
            experiment.close()
        return self._results

    def get_results(self) -> ResultGrid:
        if self._results is None:
            raise RuntimeError("get_results(): call fit() first (or restore a finished run and call fit())")
        return self._results

    # ----- restore

    def _tuner_state(self) -> bytes:
        from oxray._private import serialization

        state = {"param_space": self.param_space, "tune_config": self.tune_config, "run_config": self.run_config,
                 "trainable_name": trainable_name(self.trainable)}
        try:
            return serialization.dumps(state)
        except Exception:  # a search space or config that does not pickle cannot be restored
            return pickle.dumps({"trainable_name": state["trainable_name"]})

    @classmethod
    def can_restore(cls, path: str, storage_filesystem: Any = None) -> bool:
        return _where(path, storage_filesystem).exists(TUNER_PKL)

    @classmethod
    def restore(cls, path: str, trainable: Any, resume_unfinished: bool = True, resume_errored: bool = False,
                restart_errored: bool = False, param_space: Optional[Dict] = None, storage_filesystem: Any = None,
                _resume_config=None) -> "Tuner":
        """The run at `path` (its experiment directory, possibly moved): finished trials
        kept, unfinished ones resumed from their newest checkpoint."""
        where = _where(path, storage_filesystem)
        if not where.exists(TUNER_PKL):
            raise TuneError(f"no Tune run to restore at {path!r} (it has no {TUNER_PKL})")
        state = pickle.loads(where.read_bytes(TUNER_PKL))
        if "tune_config" not in state:
            raise TuneError(f"the run at {path!r} had a search space or config that could not be saved")
        run_config = state["run_config"]
        run_config.storage_path, run_config.name = _parent_and_name(path, storage_filesystem)
        run_config.storage_filesystem = storage_filesystem
        flags = {"resume_unfinished": resume_unfinished, "resume_errored": resume_errored,
                 "restart_errored": restart_errored}
        return cls(trainable, param_space=param_space if param_space is not None else state["param_space"],
                   tune_config=state["tune_config"], run_config=run_config, _restored=flags)

    def _restored_trials(self, experiment: Experiment, searcher: Searcher) -> List[Trial]:
        flags = self._restored
        trials = []
        for state in load_states(experiment.root):
            trial = _trial_from_state(experiment, state)
            if trial.status == ERROR:
                if flags["restart_errored"]:
                    trial.status, trial.checkpoints, trial.resume_from = PENDING, [], None
                elif flags["resume_errored"]:
                    trial.status = PENDING
            elif trial.status != TERMINATED:
                trial.status = PENDING if flags["resume_unfinished"] else TERMINATED
            trials.append(trial)
        if isinstance(searcher, BasicVariantGenerator):
            searcher._taken = len(trials)  # the variants those trials had are not drawn again
        else:
            saved = newest_searcher_state(experiment.root)
            if saved is not None:
                # What it learnt from the finished trials, and the trials it still waits for.
                searcher.restore(saved)
        return trials


def _trial_from_state(experiment: Experiment, state: Dict) -> Trial:
    path = experiment.path(state["path"])
    config = state.get("config") or {}
    try:
        with open(os.path.join(path, "params.pkl"), "rb") as f:
            config = pickle.load(f)
    except (OSError, pickle.UnpicklingError, EOFError):
        pass
    trial = Trial(state["trial_id"], state["trainable_name"], config, state["experiment_tag"], path,
                  TrialResources.from_json(state["resources"]), status=state["status"],
                  resume_from=state.get("resume_from"), checkpoint_index=state.get("checkpoint_index", 0),
                  num_failures=state.get("num_failures", 0), error_msg=state.get("error_msg"))
    trial.checkpoints = [(c, {}) for c in state.get("checkpoints", []) if experiment.has_checkpoint(path, c)]
    reports = [r for r in _read(path)]
    if reports:
        trial.last_result = reports[-1]
        trial.num_results = len(reports)
    if trial.status == ERROR:
        trial.error = TuneError(trial.error_msg or "the trial failed")
    return trial


def _read(path: str):
    from oxray.tune._result import read_reports

    return read_reports(path)


def _to_result(trial: Trial, experiment: Experiment):
    return load_trial(trial.path, error=trial.error if trial.status == ERROR else None, config=trial.config,
                      done=trial.status == TERMINATED, experiment=experiment)


def _parent_and_name(path: str, storage_filesystem: Any = None):
    """`(storage_path, name)` of an experiment's path: a local one made absolute, one on a
    filesystem or a URI kept as given."""
    path = str(path).rstrip("/")
    if path.startswith("file://"):
        path = path[len("file://"):]
    if storage_filesystem is None and not is_uri(path):
        path = os.path.abspath(os.path.expanduser(path))
    parent, _, name = path.rpartition("/")
    return parent, name


def _where(path: str, storage_filesystem: Any = None) -> Storage:
    return Storage(*_parent_and_name(path, storage_filesystem), storage_filesystem)


