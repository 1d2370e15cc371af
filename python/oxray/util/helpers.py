"""`as_completed` and `map_unordered`, as Ray's `ray.util` ones: results as they finish,
so a caller never waits on a slow task while finished ones sit unread, and `map_unordered`
never keeps more tasks in flight than it was told to."""

from typing import Any, Iterable, Iterator, Optional, Sequence

from oxray._private import worker

DEFAULT_CHUNK_SIZE = 10
DEFAULT_BACKPRESSURE_SIZE = 100


def _check(chunk_size: int, wait_options) -> None:
    if chunk_size < 1:
        raise ValueError("`chunk_size` must be >= 1")
    if "num_returns" in wait_options:
        raise ValueError("Use the `chunk_size` argument instead of `num_returns`.")


def _next_batch(refs, chunk_size: int, yield_obj_refs: bool, wait_options):
    """(what is ready: values, or refs with `yield_obj_refs`; the refs not ready)."""
    ready, rest = worker.wait(refs, num_returns=min(chunk_size, len(refs)), **wait_options)
    return (ready if yield_obj_refs else worker.get(ready)), rest


def as_completed(refs: Sequence, *, chunk_size: int = DEFAULT_CHUNK_SIZE, yield_obj_refs: bool = False,
                 **kwargs) -> Iterator[Any]:
    """Yields the values of `refs` (the refs themselves with `yield_obj_refs`) in batches
    of up to `chunk_size` as they become ready. Other keyword arguments go to `wait`
    (`timeout`, `fetch_local`): with a timeout, a batch may be smaller."""
    _check(chunk_size, kwargs)
    refs = list(refs)
    while refs:
        results, refs = _next_batch(refs, chunk_size, yield_obj_refs, kwargs)
        yield from results


def map_unordered(fn, items: Iterable, *, backpressure_size: Optional[int] = DEFAULT_BACKPRESSURE_SIZE,
                  chunk_size: int = DEFAULT_CHUNK_SIZE, yield_obj_refs: bool = False, **kwargs) -> Iterator[Any]:
    """Runs the remote function `fn` on each item and yields the results as they finish.
    Once `backpressure_size` tasks are in flight (None: no limit), it waits for a batch of
    `chunk_size` of them before starting more. Other keyword arguments go to `wait`."""
    if backpressure_size is None:
        backpressure_size = float("inf")
    elif backpressure_size <= 0:
        raise ValueError("backpressure_size must be positive.")
    _check(chunk_size, kwargs)
    refs = []
    for item in items:
        refs.append(fn.remote(item))
        if len(refs) >= backpressure_size:
            results, refs = _next_batch(refs, chunk_size, yield_obj_refs, kwargs)
            yield from results
    yield from as_completed(refs, chunk_size=chunk_size, yield_obj_refs=yield_obj_refs, **kwargs)
