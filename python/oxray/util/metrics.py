"""Application metrics, as Ray's `ray.util.metrics`: `Counter`, `Gauge` and `Histogram` with
tags, recorded in any process of the cluster (drivers, tasks, actors) and exported on the
head's `/metrics` as `ray_<name>`, with the node and process that recorded them as labels.

Each process keeps its values and sends them to the head every few seconds
(`OXRAY_METRICS_REPORT_INTERVAL_MS`, 5000 by default) and when it ends.
"""

import atexit
import os
import re
import threading
from typing import Dict, List, Optional, Tuple

__all__ = ["Counter", "Gauge", "Histogram"]

_NAME = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")
_lock = threading.Lock()
# (name, sorted tag items) -> [value] for counters and gauges, or
# [bucket counts, sum, count] for histograms.
_values: Dict[Tuple[str, Tuple[Tuple[str, str], ...]], list] = {}
# name -> (kind, description, boundaries)
_kinds: Dict[str, Tuple[str, str, Tuple[float, ...]]] = {}
_flusher: Optional[threading.Thread] = None
_wake = threading.Event()


class Metric:
    """What the three kinds share: a name, a description, and the tag keys every value of it
    carries (each given with the value or as a default)."""

    _kind = ""

    def __init__(self, name: str, description: str = "", tag_keys: Optional[Tuple[str, ...]] = None,
                 _boundaries: Tuple[float, ...] = ()):
        if not name:
            raise ValueError("Empty name is not allowed. Please provide a metric name.")
        if not _NAME.match(name):
            raise ValueError(f"Invalid metric name {name!r}: use letters, digits, '_' and ':', "
                             "not starting with a digit.")
        tag_keys = tag_keys or ()
        if not isinstance(tag_keys, tuple):
            raise TypeError(f"tag_keys should be a tuple type, got: {type(tag_keys)}")
        for key in tag_keys:
            if not isinstance(key, str):
                raise TypeError(f"Tag keys must be str, got {type(key)}.")
        with _lock:
            known = _kinds.get(name)
            if known is not None and known[0] != self._kind:
                raise ValueError(f"Metric {name!r} is already a {known[0]} in this process.")
            _kinds[name] = (self._kind, description, _boundaries)
        self._name = name
        self._description = description
        self._tag_keys = tag_keys
        self._default_tags: Dict[str, str] = {}
        _start_flusher()

    def set_default_tags(self, default_tags: Dict[str, str]) -> "Metric":
        """Tags used when a value is recorded without them."""
        for key, value in default_tags.items():
            if key not in self._tag_keys:
                raise ValueError(f"Unrecognized tag key {key!r}: the metric's tag keys are {self._tag_keys}.")
            if not isinstance(value, str):
                raise TypeError(f"Tag values must be str, got {type(value)}.")
        self._default_tags = dict(default_tags)
        return self

    @property
    def info(self) -> Dict:
        return {"name": self._name, "description": self._description, "tag_keys": self._tag_keys,
                "default_tags": self._default_tags}

    def _tags(self, tags: Optional[Dict[str, str]]) -> Tuple[Tuple[str, str], ...]:
        final = dict(self._default_tags)
        final.update(tags or {})
        unknown = [k for k in final if k not in self._tag_keys]
        if unknown:
            raise ValueError(f"Unrecognized tag keys: {', '.join(unknown)}; the metric's are {self._tag_keys}.")
        missing = [k for k in self._tag_keys if k not in final]
        if missing:
            raise ValueError(f"Missing value for tag key(s): {','.join(missing)}.")
        for value in final.values():
            if not isinstance(value, str):
                raise TypeError(f"Tag values must be str, got {type(value)}.")
        return tuple(sorted(final.items()))

    def _key(self, tags):
        return (self._name, self._tags(tags))


def _number(value) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"value must be a number, got {type(value)}")
    return float(value)


class Counter(Metric):
    """A total that only grows (`inc`)."""

    _kind = "counter"

    def inc(self, value: float = 1.0, tags: Optional[Dict[str, str]] = None) -> None:
        value = _number(value)
        if value <= 0:
            raise ValueError(f"value must be >0, got {value}")
        key = self._key(tags)
        with _lock:
            _values.setdefault(key, [0.0])[0] += value


class Gauge(Metric):
    """A value that goes up and down (`set`)."""

    _kind = "gauge"

    def set(self, value: float, tags: Optional[Dict[str, str]] = None) -> None:
        value = _number(value)
        key = self._key(tags)
        with _lock:
            _values[key] = [value]


class Histogram(Metric):
    """How values spread over buckets (`observe`): `boundaries` are the buckets' upper bounds,
    positive and increasing."""

    _kind = "histogram"

    def __init__(self, name: str, description: str = "", boundaries: Optional[List[float]] = None,
                 tag_keys: Optional[Tuple[str, ...]] = None):
        if not boundaries:
            raise ValueError("boundaries must be a non-empty list of positive numbers.")
        for i, bound in enumerate(boundaries):
            if isinstance(bound, bool) or not isinstance(bound, (int, float)) or bound <= 0:
                raise ValueError(f"Invalid `boundaries` argument at index {i}, {bound}. "
                                 "Use positive values for the arguments.")
        if list(boundaries) != sorted(boundaries) or len(set(boundaries)) != len(boundaries):
            raise ValueError(f"boundaries must increase, got {boundaries}.")
        self._boundaries = tuple(float(b) for b in boundaries)
        super().__init__(name, description, tag_keys, self._boundaries)

    def observe(self, value: float, tags: Optional[Dict[str, str]] = None) -> None:
        value = _number(value)
        key = self._key(tags)
        bucket = next((i for i, bound in enumerate(self._boundaries) if value <= bound), len(self._boundaries))
        with _lock:
            state = _values.setdefault(key, [[0] * (len(self._boundaries) + 1), 0.0, 0])
            state[0][bucket] += 1
            state[1] += value
            state[2] += 1

    @property
    def info(self) -> Dict:
        return dict(super().info, boundaries=list(self._boundaries))


def _samples():
    """What this process holds now, as the native client sends it."""
    with _lock:
        out = []
        for (name, tags), value in _values.items():
            kind, description, boundaries = _kinds[name]
            if kind == "histogram":
                out.append((name, kind, description, list(tags), 0.0, list(boundaries), list(value[0]), value[1],
                            value[2]))
            else:
                out.append((name, kind, description, list(tags), value[0], [], [], 0.0, 0))
        return out


def _interval_s() -> float:
    try:
        return max(0.1, int(os.environ.get("OXRAY_METRICS_REPORT_INTERVAL_MS", "5000")) / 1000)
    except ValueError:
        return 5.0


def flush() -> bool:
    """Sends this process's values to the head now; False when it is not connected."""
    from oxray._private import worker

    samples = _samples()
    if not samples or worker.was_shut_down():
        return False
    in_worker = bool(os.environ.get("OXRAY_WORKER_ID"))
    if not (in_worker or worker.is_initialized()):
        return False
    try:
        client = worker.client()
        node = os.environ.get("OXRAY_NODE_ID") or client.node_id()
        client.report_metrics(f"{node}:{os.getpid()}", samples)
        return True
    except Exception:  # the head is away: the next round sends the same totals
        return False


def _flush_forever():
    while True:
        _wake.wait(_interval_s())
        _wake.clear()
        flush()


def _start_flusher():
    global _flusher
    with _lock:
        if _flusher is not None:
            return
        _flusher = threading.Thread(target=_flush_forever, name="oxray-metrics", daemon=True)
        _flusher.start()
    # Registered after the client's own exit handler, so it runs first: the last values go
    # out while the connection is still there.
    atexit.register(flush)
