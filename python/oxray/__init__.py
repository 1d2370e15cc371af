"""oxray: a distributed compute runtime for AI workloads, compatible with Ray.

`import oxray as ray` keeps a Ray script's names: `init`, `shutdown`, `is_initialized`,
`cluster_resources`, `available_resources`, `nodes`, `get_runtime_context`, `remote`
(functions and classes), `method`, `get`, `put`, `wait`, and `oxray.job_submission`.
"""

from oxray import exceptions, util
from oxray._as_ray import install_as_ray
from oxray._private.generators import DynamicObjectRefGenerator, ObjectRefGenerator
from oxray._private.worker import (
    available_resources,
    cancel,
    cluster_resources,
    get,
    get_gpu_ids,
    init,
    is_initialized,
    kill,
    nodes,
    put,
    remote,
    shutdown,
    wait,
)
from oxray.actor import get_actor, method
from oxray.object_ref import ObjectID, ObjectRef
from oxray.runtime_context import get_runtime_context

# `import ray` served by oxray sets __version__ to Ray's compatible version; this one stays.
__oxray_version__ = __version__ = "0.1.0"

_LAZY = ("data", "serve", "train", "tune")  # imported on first use, as Ray's `ray.data`: numpy and torch are heavy


def __getattr__(name):
    if name in _LAZY:
        import importlib

        return importlib.import_module(f"oxray.{name}")
    raise AttributeError(f"module 'oxray' has no attribute {name!r}")

__all__ = [
    "DynamicObjectRefGenerator",
    "ObjectRefGenerator",
    "ObjectID",
    "ObjectRef",
    "available_resources",
    "cancel",
    "exceptions",
    "util",
    "get",
    "get_actor",
    "get_gpu_ids",
    "install_as_ray",
    "kill",
    "method",
    "put",
    "remote",
    "wait",
    "cluster_resources",
    "get_runtime_context",
    "init",
    "is_initialized",
    "nodes",
    "shutdown",
]
