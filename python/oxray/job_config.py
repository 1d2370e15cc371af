"""`JobConfig`, as Ray's `ray.job_config.JobConfig`: what `init(job_config=...)` says about
the driver's job."""

import os
from typing import Any, Dict, Optional


class JobConfig:
    def __init__(self, jvm_options=None, code_search_path=None, runtime_env: Optional[Dict[str, Any]] = None,
                 _client_job: bool = False, metadata: Optional[Dict[str, str]] = None,
                 ray_namespace: Optional[str] = None, default_actor_lifetime: str = "non_detached",
                 _py_driver_sys_path=None):
        if default_actor_lifetime not in ("detached", "non_detached"):
            raise ValueError(f"default_actor_lifetime must be 'detached' or 'non_detached', "
                             f"got {default_actor_lifetime!r}")
        if isinstance(code_search_path, str):
            raise TypeError("code_search_path must be a list of directories, not a string")
        self.code_search_path = [os.path.abspath(p) for p in code_search_path or []]
        self.runtime_env = runtime_env
        self.metadata = dict(metadata or {})
        self.ray_namespace = ray_namespace
        self.default_actor_lifetime = default_actor_lifetime

    def set_runtime_env(self, runtime_env: Optional[Dict[str, Any]], validate: bool = False) -> None:
        self.runtime_env = runtime_env

    def set_ray_namespace(self, ray_namespace: str) -> None:
        self.ray_namespace = ray_namespace

    def set_metadata(self, key: str, value: str) -> None:
        self.metadata[key] = value

    def set_default_actor_lifetime(self, default_actor_lifetime: str) -> None:
        JobConfig(default_actor_lifetime=default_actor_lifetime)  # the same check
        self.default_actor_lifetime = default_actor_lifetime
