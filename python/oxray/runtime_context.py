"""`oxray.get_runtime_context()`: who and where this process is, as Ray's RuntimeContext."""

import functools
import os
from typing import Any, Dict, List, Optional

from oxray._private import worker


# Ray's accelerator resource names (`ray._private.accelerators`), the keys of
# `get_accelerator_ids()`.
_ACCELERATOR_RESOURCES = ("GPU", "TPU", "NPU", "HPU", "neuron_cores", "RBLN", "FURIOSA", "MBLT", "TTNPU")

# Set by the worker loop for the task it runs (and for the actor it is).
# `placement_group`: (group id, capture child tasks) of the task or actor, when in a group.
_current = {"task_id": None, "task_name": None, "actor_id": None, "actor_name": None, "placement_group": None}


def qualified_name(code, method=None) -> str:
    """The module and qualified name of a task's function, or of an actor's class with the
    method (`mod.f`, `mod.Actor.method`), as Ray's `get_task_function_name()` gives them."""
    while isinstance(code, functools.partial):  # a dynamic generator: the function it runs
        code = code.args[0] if code.args else code.func
    name = f"{getattr(code, '__module__', None) or ''}.{getattr(code, '__qualname__', type(code).__qualname__)}"
    return f"{name}.{method}" if method else name


class RuntimeContext:
    def get_job_id(self) -> str:
        """The job this process works for, as Ray's JobID in hex ("01000000"): a driver's
        own, given when it connected, or that of the task or actor running here."""
        from oxray import _native

        if _native.current_job_id() is None:
            worker.client()  # a driver is given its job when it connects
        return _native.current_job_id()

    def get_node_id(self) -> str:
        """The node this process runs on (a driver's too: the node it connected through)."""
        return os.environ.get("OXRAY_NODE_ID") or worker.client().node_id()

    def get_task_id(self) -> Optional[str]:
        return _current["task_id"]

    def get_actor_id(self) -> Optional[str]:
        return _current["actor_id"]

    def get_actor_name(self) -> Optional[str]:
        """The name the current actor was given, if any."""
        return _current["actor_name"]

    def get_task_name(self) -> Optional[str]:
        return _current["task_name"]

    def get_task_function_name(self) -> Optional[str]:
        """The module and qualified name of what the current task runs (`mod.f`,
        `mod.Actor.method`), as Ray's; None in a driver."""
        current = _current.get("task_function")
        return qualified_name(*current) if current else None

    @property
    def namespace(self) -> Optional[str]:
        return self.get_namespace()

    def get_placement_group_id(self) -> Optional[str]:
        """The placement group the current task or actor runs in, if any."""
        current = _current["placement_group"]
        return current[0] if current else None

    def get_namespace(self) -> Optional[str]:
        return worker.namespace()

    @property
    def current_actor(self):
        """A handle to the actor this code runs in (as Ray's: an error outside an actor)."""
        actor = _current.get("actor")
        if actor is None:
            raise RuntimeError("current_actor is only available inside an actor")
        from oxray.actor import ActorHandle

        # Not holding the actor's creation object: the actor still ends with its last
        # handle outside itself.
        return ActorHandle(actor["actor_id"], "", actor["class_name"], actor["methods"], name=actor.get("name"),
                           namespace=actor.get("namespace") if actor.get("name") else None, owner=actor["owner"],
                           max_task_retries=actor.get("max_task_retries") or 0)

    @property
    def was_current_actor_reconstructed(self) -> bool:
        """Whether the actor this code runs in was restarted after its worker died (as
        Ray's: its constructor runs again in a new process)."""
        if _current.get("actor") is None:
            raise RuntimeError("was_current_actor_reconstructed is only available inside an actor")
        return bool(_current.get("actor_restarts"))

    def get_assigned_resources(self) -> Dict[str, float]:
        """The resources the current task or actor holds (empty in a driver), as Ray's."""
        return {name: amount for name, amount in (_current.get("resources") or {}).items() if amount > 0}

    def get_accelerator_ids(self) -> Dict[str, List[str]]:
        """The accelerators this worker holds, by Ray's resource names: GPUs (its
        CUDA_VISIBLE_DEVICES); oxray leases no other kind, so theirs are empty, as Ray's are
        on a node without them (code that reads `["NPU"]` finds a list)."""
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        ids = {name: [] for name in _ACCELERATOR_RESOURCES}
        ids["GPU"] = [g for g in visible.split(",") if g] if visible else []
        return ids

    @property
    def gcs_address(self) -> str:
        return worker.client().address

    def get(self) -> Dict[str, Any]:
        return {"job_id": self.get_job_id(), "node_id": self.get_node_id(), "namespace": self.get_namespace()}


def get_runtime_context() -> RuntimeContext:
    return RuntimeContext()
