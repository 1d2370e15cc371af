"""Serve's option classes, with Ray Serve's names and defaults. Each also accepts a plain
dict wherever an option takes it (`_coerce`)."""

import dataclasses
import enum
from typing import Any, Dict, List, Optional


def _coerce(cls, value, option: str):
    """`value` as an instance of `cls` (None stays None); unknown dict keys are an error."""
    if value is None or isinstance(value, cls):
        return value
    if isinstance(value, dict):
        known = {f.name for f in dataclasses.fields(cls)} | getattr(cls, "_ACCEPTED", set())
        unknown = set(value) - known
        if unknown:
            raise ValueError(f"{option}: unknown field(s) {sorted(unknown)}; known: {sorted(known)}")
        return cls(**value)
    raise TypeError(f"{option} must be a {cls.__name__} or a dict, got {type(value).__name__}")


def _as_dict(value) -> Optional[Dict[str, Any]]:
    if value is None:
        return None
    out = dataclasses.asdict(value)
    return {k: (v.value if isinstance(v, enum.Enum) else v) for k, v in out.items()}


@dataclasses.dataclass
class AutoscalingConfig:
    min_replicas: int = 1
    initial_replicas: Optional[int] = None
    max_replicas: int = 1
    target_ongoing_requests: float = 2
    look_back_period_s: float = 30.0
    upscale_delay_s: float = 30.0
    downscale_delay_s: float = 600.0
    downscale_to_zero_delay_s: Optional[float] = None
    upscaling_factor: Optional[float] = None
    downscaling_factor: Optional[float] = None
    aggregation_function: str = "mean"
    # Deprecated in Ray, accepted and kept.
    metrics_interval_s: float = 10.0
    smoothing_factor: float = 1.0
    upscale_smoothing_factor: Optional[float] = None
    downscale_smoothing_factor: Optional[float] = None
    policy: Any = None

    def __post_init__(self):
        for name in ("min_replicas", "max_replicas"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"autoscaling_config.{name} must be an integer >= 0, got {value!r}")
        if self.max_replicas < 1:
            raise ValueError(f"autoscaling_config.max_replicas must be >= 1, got {self.max_replicas}")
        if self.min_replicas > self.max_replicas:
            raise ValueError(f"autoscaling_config: min_replicas ({self.min_replicas}) must be <= max_replicas "
                             f"({self.max_replicas})")
        if self.initial_replicas is not None:
            if isinstance(self.initial_replicas, bool) or not isinstance(self.initial_replicas, int):
                raise ValueError(f"autoscaling_config.initial_replicas must be an integer, got {self.initial_replicas!r}")
            if not self.min_replicas <= self.initial_replicas <= self.max_replicas:
                raise ValueError(f"autoscaling_config: initial_replicas ({self.initial_replicas}) must be between "
                                 f"min_replicas ({self.min_replicas}) and max_replicas ({self.max_replicas})")
        if not self.target_ongoing_requests or self.target_ongoing_requests <= 0:
            raise ValueError(f"autoscaling_config.target_ongoing_requests must be > 0, got {self.target_ongoing_requests!r}")
        for name in ("upscaling_factor", "downscaling_factor"):
            value = getattr(self, name)
            if value is not None and value <= 0:
                raise ValueError(f"autoscaling_config.{name} must be > 0, got {value!r}")
        if self.aggregation_function not in ("mean", "max", "min"):
            raise ValueError(f"autoscaling_config.aggregation_function must be 'mean', 'max' or 'min', "
                             f"got {self.aggregation_function!r}")

    def initial(self) -> int:
        """How many replicas the deployment starts with."""
        return self.initial_replicas if self.initial_replicas is not None else self.min_replicas

    def dict(self) -> Dict[str, Any]:
        return _as_dict(self)


class ProxyLocation(str, enum.Enum):
    Disabled = "Disabled"
    HeadOnly = "HeadOnly"
    EveryNode = "EveryNode"

    @classmethod
    def coerce(cls, value) -> "ProxyLocation":
        if isinstance(value, cls):
            return value
        if value == "NoServer":  # Ray's legacy name
            return cls.Disabled
        try:
            return cls(value)
        except ValueError:
            raise ValueError(f"proxy_location must be one of {[m.value for m in cls]}, got {value!r}") from None


@dataclasses.dataclass
class HTTPOptions:
    host: str = "127.0.0.1"
    port: int = 8000
    root_path: str = ""
    request_timeout_s: Optional[float] = None
    keep_alive_timeout_s: float = 90.0
    ssl_keyfile: Optional[str] = None
    ssl_certfile: Optional[str] = None
    ssl_keyfile_password: Optional[str] = None
    ssl_ca_certs: Optional[str] = None
    location: Optional[str] = None
    middlewares: List[Any] = dataclasses.field(default_factory=list)

    def __post_init__(self):
        if isinstance(self.port, bool) or not isinstance(self.port, int) or not 0 <= self.port <= 65535:
            raise ValueError(f"http_options.port must be a port number, got {self.port!r}")
        if not isinstance(self.host, str) or not self.host:
            raise ValueError(f"http_options.host must be a host name or address, got {self.host!r}")

    def dict(self) -> Dict[str, Any]:
        return _as_dict(self)


@dataclasses.dataclass
class gRPCOptions:  # noqa: N801 (Ray's name)
    port: int = 9000
    grpc_servicer_functions: List[str] = dataclasses.field(default_factory=list)
    request_timeout_s: Optional[float] = None


@dataclasses.dataclass
class BackpressureConfig:
    status_code: int = 503
    retry_after_s: Optional[float] = None

    def __post_init__(self):
        if self.status_code not in (503, 429):
            raise ValueError(f"backpressure_config.status_code must be 503 or 429, got {self.status_code!r}")
        if self.retry_after_s is not None and self.retry_after_s < 0:
            raise ValueError(f"backpressure_config.retry_after_s must be >= 0, got {self.retry_after_s!r}")


@dataclasses.dataclass
class RequestRouterConfig:
    request_router_class: Any = None
    request_router_kwargs: Dict[str, Any] = dataclasses.field(default_factory=dict)
    request_routing_stats_period_s: float = 10.0
    request_routing_stats_timeout_s: float = 30.0
    initialization_timeout_s: float = 10.0


@dataclasses.dataclass
class LoggingConfig:
    encoding: str = "TEXT"
    log_level: Any = "INFO"
    logs_dir: Optional[str] = None
    enable_access_log: bool = True
    additional_log_standard_attrs: List[str] = dataclasses.field(default_factory=list)

    def __post_init__(self):
        if self.encoding not in ("TEXT", "JSON"):
            raise ValueError(f"logging_config.encoding must be 'TEXT' or 'JSON', got {self.encoding!r}")

