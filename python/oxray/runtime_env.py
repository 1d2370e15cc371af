"""`RuntimeEnv` and `RuntimeEnvConfig`, as Ray's `ray.runtime_env`: dicts with checked
fields, accepted wherever a runtime_env dict is (`remote`, `options`, `init`, `JobConfig`)."""

from typing import Any, Dict, List, Optional

DEFAULT_SETUP_TIMEOUT_SECONDS = 600


def check_config(config: Dict[str, Any]) -> None:
    """A runtime_env's `config`, checked as Ray's RuntimeEnvConfig checks it."""
    if not isinstance(config, dict):
        raise TypeError(f"runtime_env config must be a dict or a RuntimeEnvConfig, got {type(config).__name__}")
    unknown = set(config) - {"setup_timeout_seconds", "eager_install", "log_files"}
    if unknown:
        raise ValueError(f"runtime_env config {sorted(unknown)} is not known; known: "
                         "['eager_install', 'log_files', 'setup_timeout_seconds']")
    timeout = config.get("setup_timeout_seconds", DEFAULT_SETUP_TIMEOUT_SECONDS)
    if isinstance(timeout, bool) or not isinstance(timeout, int):
        raise TypeError(f"setup_timeout_seconds must be an int, got {type(timeout).__name__}")
    if timeout <= 0 and timeout != -1:
        raise ValueError(f"setup_timeout_seconds must be greater than zero or -1 (no limit), got {timeout}")
    if not isinstance(config.get("eager_install", True), bool):
        raise TypeError("eager_install must be a bool")
    log_files = config.get("log_files")
    if log_files is not None and not (isinstance(log_files, list) and all(isinstance(f, str) for f in log_files)):
        raise TypeError("log_files must be a list of strings")


class RuntimeEnvConfig(dict):
    """How a runtime_env is set up: `setup_timeout_seconds` (600; -1 for no limit) bounds
    its preparation on a node; `eager_install` and `log_files` are accepted."""

    def __init__(self, setup_timeout_seconds: int = DEFAULT_SETUP_TIMEOUT_SECONDS, eager_install: bool = True,
                 log_files: Optional[List[str]] = None):
        super().__init__(setup_timeout_seconds=setup_timeout_seconds, eager_install=eager_install)
        if log_files is not None:
            self["log_files"] = log_files
        check_config(self)


class RuntimeEnv(dict):
    """A runtime_env as a dict of the fields given (those left out or None are not set)."""

    def __init__(self, *, py_modules: Optional[List[str]] = None, working_dir: Optional[str] = None,
                 pip=None, env_vars: Optional[Dict[str, str]] = None, config=None, **kwargs: Any):
        super().__init__()
        fields = dict(py_modules=py_modules, working_dir=working_dir, pip=pip, env_vars=env_vars, config=config,
                      **{k: v for k, v in kwargs.items() if k != "_validate"})
        self.update({k: v for k, v in fields.items() if v is not None})
        if "config" in self:
            check_config(self["config"])
            self["config"] = RuntimeEnvConfig(**self["config"])

    def working_dir(self) -> str:
        return self.get("working_dir", "")

    def py_modules(self) -> List[str]:
        return list(self.get("py_modules", []))

    def env_vars(self) -> Dict[str, str]:
        return dict(self.get("env_vars", {}))

    def has_working_dir(self) -> bool:
        return bool(self.get("working_dir"))

    def to_dict(self) -> Dict[str, Any]:
        return dict(self)
