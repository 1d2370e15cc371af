"""`DataParallelTrainer`: runs one training function on every worker of a group, and
`fit()` drives the run to its end (see `_controller`)."""

import inspect
import signal
import threading
from typing import Any, Callable, Dict, Optional

import cloudpickle

from oxray.train._config import DataConfig, RunConfig, ScalingConfig
from oxray.train._result import Result


class Backend:
    """What a framework sets up in each worker: nothing, for plain functions."""

    # Modules each worker process imports as soon as it starts (OXRAY_WORKER_PRELOAD).
    preload: tuple = ()

    def on_worker_start(self, context) -> None:
        pass

    def before_train(self) -> None:
        pass

    def on_worker_shutdown(self) -> None:
        pass


def _arguments(fn: Callable, config: Optional[Dict]) -> tuple:
    """Ray's rule: the function takes no argument, or one (the config, `{}` when none)."""
    if not callable(fn):
        raise TypeError(f"train_loop_per_worker must be a function, got {type(fn).__name__}")
    try:
        parameters = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return (config or {},)
    required = [p for p in parameters
                if p.default is p.empty and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if len(required) > 1:
        raise ValueError(f"train_loop_per_worker takes at most one argument (train_loop_config); "
                         f"{getattr(fn, '__name__', fn)} requires {len(required)}")
    takes_any = any(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.VAR_POSITIONAL) for p in parameters)
    return (config or {},) if required or (takes_any and config is not None) else ()


class DataParallelTrainer:
    _label = "DataParallelTrainer"

    def __init__(self, train_loop_per_worker: Callable, *, train_loop_config: Optional[Dict] = None,
                 backend_config: Optional[Backend] = None, scaling_config: Optional[ScalingConfig] = None,
                 run_config: Optional[RunConfig] = None, datasets: Optional[Dict[str, Any]] = None,
                 dataset_config: Optional[DataConfig] = None, metadata=None, resume_from_checkpoint=None):
        for name, value in (("metadata", metadata), ("resume_from_checkpoint", resume_from_checkpoint)):
            if value is not None:
                raise DeprecationWarning(f"{type(self).__name__}({name}=...) is not supported (Ray Train V2 removed "
                                         "it): pass a starting checkpoint in train_loop_config and use "
                                         "`oxray.train.get_checkpoint() or config[...]`")
        if train_loop_config is not None and not isinstance(train_loop_config, dict):
            raise TypeError(f"train_loop_config must be a dict, got {type(train_loop_config).__name__}")
        self.fn_args = _arguments(train_loop_per_worker, train_loop_config)
        try:
            cloudpickle.dumps((train_loop_per_worker, train_loop_config))
        except Exception as e:
            raise TypeError(f"the training function (or its train_loop_config) cannot be pickled, so it cannot be sent "
                            f"to the workers: {e}. Create such objects (locks, open files, clients) inside the "
                            "function instead") from None
        self.train_loop_per_worker = train_loop_per_worker
        self.backend = backend_config if backend_config is not None else Backend()
        self.scaling_config = scaling_config or ScalingConfig()
        self.run_config = run_config or RunConfig()
        self.datasets = dict(datasets or {})
        self.dataset_config = dataset_config or DataConfig()

    def fit(self) -> Result:
        """Runs training to its end and returns its Result; raises TrainingFailedError when
        it cannot. Ctrl-C stops the workers and raises KeyboardInterrupt."""
        import oxray
        from oxray.train._controller import Controller

        if not oxray.is_initialized():
            oxray.init()
        controller = Controller(self._label, self.train_loop_per_worker, self.fn_args, self.scaling_config,
                                self.run_config, self.backend, self.datasets, self.dataset_config)
        if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGINT) is None:
            signal.signal(signal.SIGINT, signal.default_int_handler)
        return controller.run()
