"""`@serve.multiplexed`: a per-replica LRU cache of models loaded by model id, and
`serve.get_multiplexed_model_id()`."""

import asyncio
import collections
import functools
import inspect
from typing import Callable, Optional


def get_multiplexed_model_id() -> str:
    """The model id of the request being handled ("" when it has none)."""
    from oxray.serve import _context

    return _context.current_request().multiplexed_model_id


class _ModelCache:
    def __init__(self, load: Callable, capacity: int):
        self.load = load
        self.capacity = capacity
        self.models: "collections.OrderedDict[str, object]" = collections.OrderedDict()
        self.loading = {}

    async def get(self, self_arg, model_id: str):
        if model_id in self.models:
            self.models.move_to_end(model_id)
            return self.models[model_id]
        # Concurrent requests for one model load it once.
        task = self.loading.get(model_id)
        if task is None:
            task = self.loading[model_id] = asyncio.ensure_future(self._load(self_arg, model_id))
            task.add_done_callback(lambda _t: self.loading.pop(model_id, None))
        return await asyncio.shield(task)

    async def _load(self, self_arg, model_id: str):
        while len(self.models) >= self.capacity:
            _, evicted = self.models.popitem(last=False)
            await _unload(evicted)
        args = (self_arg, model_id) if self_arg is not None else (model_id,)
        model = self.load(*args)
        if inspect.isawaitable(model):
            model = await model
        self.models[model_id] = model
        return model


async def _unload(model) -> None:
    """An evicted model gets its `__del__` called, as Ray does."""
    finalizer = getattr(model, "__del__", None)
    if finalizer is None:
        return
    try:
        result = finalizer()
        if inspect.isawaitable(result):
            await result
    except Exception:  # a failing finalizer must not fail the request that evicted it
        pass


def multiplexed(func: Optional[Callable] = None, max_num_models_per_replica: int = 3):
    """`@serve.multiplexed` or `@serve.multiplexed(max_num_models_per_replica=n)` on
    `async def load(self, model_id)` (or a function `load(model_id)`)."""
    if func is not None and not callable(func):
        raise TypeError("@serve.multiplexed can only be used to decorate functions or methods.")
    if isinstance(max_num_models_per_replica, bool) or not isinstance(max_num_models_per_replica, int) \
            or (max_num_models_per_replica < 1 and max_num_models_per_replica != -1):
        raise ValueError(f"max_num_models_per_replica must be a positive integer (or -1 for no limit), "
                         f"got {max_num_models_per_replica!r}")
    capacity = float("inf") if max_num_models_per_replica == -1 else max_num_models_per_replica

    def decorate(load):
        params = list(inspect.signature(load).parameters)
        method = bool(params) and params[0] == "self"
        if len(params) != (2 if method else 1):
            raise TypeError("@serve.multiplexed must decorate a function that takes a model id "
                            "(`async def load(self, model_id)` or `async def load(model_id)`).")
        caches = {}  # per instance (one per replica), keyed by id; a function has one

        @functools.wraps(load)
        async def wrapper(*args):
            self_arg = args[0] if method else None
            model_id = args[-1]
            if not isinstance(model_id, str):
                raise TypeError(f"The model id must be a string, got {type(model_id).__name__}")
            key = id(self_arg)
            cache = caches.get(key)
            if cache is None:
                cache = caches[key] = _ModelCache(load, capacity)
            return await cache.get(self_arg, model_id)

        wrapper._serve_model_caches = caches
        return wrapper

    return decorate(func) if func is not None else decorate
