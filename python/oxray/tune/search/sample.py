"""Search-space domains (`tune.uniform(...)`, `tune.choice(...)`, ...): each draws a value
from a `random.Random`, so a seeded generator gives the same variants every run."""

import math
import random
from typing import Any, Callable, List, Optional, Sequence


class Domain:
    """A value to be drawn per trial."""

    def sample(self, spec: Any = None, rng: Optional[random.Random] = None) -> Any:
        # Every domain of this module draws its own way; a user's subclass must too.
        raise NotImplementedError(f"{type(self).__name__} must define sample()")

    def __repr__(self):
        fields = ", ".join(f"{k}={v!r}" for k, v in vars(self).items())
        return f"{type(self).__name__}({fields})"


def _quantize(value: float, q: Optional[float]) -> float:
    if not q:
        return value
    # Multiples of q, kept on q's decimal grid (0.1 * 3 is 0.30000000000000004 otherwise).
    return round(round(value / q) * q, 10)


class Float(Domain):
    def __init__(self, lower: float, upper: float, log: bool = False, q: Optional[float] = None, base: float = 10):
        if lower >= upper:
            raise ValueError(f"a float range needs lower < upper, got [{lower}, {upper})")
        if log and lower <= 0:
            raise ValueError(f"a log-uniform range needs lower > 0, got {lower}")
        self.lower, self.upper, self.log, self.q, self.base = float(lower), float(upper), log, q, base

    def sample(self, spec=None, rng=None):
        rng = rng or random
        if self.log:
            lo, hi = math.log(self.lower, self.base), math.log(self.upper, self.base)
            value = self.base ** rng.uniform(lo, hi)
        else:
            value = rng.uniform(self.lower, self.upper)
        value = _quantize(value, self.q)
        return min(max(value, self.lower), self.upper) if self.q else value


class Integer(Domain):
    """Integers in [lower, upper); `upper` is included when quantized with q > 1."""

    def __init__(self, lower: int, upper: int, log: bool = False, q: int = 1, base: float = 10):
        if lower >= upper:
            raise ValueError(f"an integer range needs lower < upper, got [{lower}, {upper})")
        if log and lower <= 0:
            raise ValueError(f"a log integer range needs lower > 0, got {lower}")
        self.lower, self.upper, self.log, self.q, self.base = int(lower), int(upper), log, int(q), base

    def sample(self, spec=None, rng=None):
        rng = rng or random
        if self.log:
            lo, hi = math.log(self.lower, self.base), math.log(self.upper, self.base)
            value = int(self.base ** rng.uniform(lo, hi))
            value = min(max(value, self.lower), self.upper - 1)
        elif self.q > 1:
            value = rng.randint(self.lower, self.upper)
        else:
            value = rng.randrange(self.lower, self.upper)
        if self.q > 1:
            value = int(round(value / self.q) * self.q)
            value = min(max(value, self.lower), self.upper)
        return value


class Categorical(Domain):
    def __init__(self, categories: Sequence[Any]):
        categories = list(categories)
        if not categories:
            raise ValueError("tune.choice() needs at least one category")
        self.categories = categories

    def sample(self, spec=None, rng=None):
        return (rng or random).choice(self.categories)

    def __len__(self):
        return len(self.categories)


class Normal(Domain):
    def __init__(self, mean: float = 0.0, sd: float = 1.0, q: Optional[float] = None):
        if sd <= 0:
            raise ValueError(f"tune.randn() needs sd > 0, got {sd}")
        self.mean, self.sd, self.q = float(mean), float(sd), q

    def sample(self, spec=None, rng=None):
        return _quantize((rng or random).gauss(self.mean, self.sd), self.q)


class Function(Domain):
    """`sample_from(fn)`: `fn(spec)` sees the trial's config resolved so far (`spec.config.x`)."""

    def __init__(self, func: Callable):
        if not callable(func):
            raise TypeError(f"tune.sample_from() takes a callable, got {type(func).__name__}")
        self.func = func

    def sample(self, spec=None, rng=None):
        try:
            return self.func(spec)
        except TypeError:
            return self.func()


def uniform(lower: float, upper: float) -> Float:
    return Float(lower, upper)


def quniform(lower: float, upper: float, q: float) -> Float:
    return Float(lower, upper, q=q)


def loguniform(lower: float, upper: float, base: float = 10) -> Float:
    return Float(lower, upper, log=True, base=base)


def qloguniform(lower: float, upper: float, q: float, base: float = 10) -> Float:
    return Float(lower, upper, log=True, q=q, base=base)


def randint(lower: int, upper: int) -> Integer:
    return Integer(lower, upper)


def qrandint(lower: int, upper: int, q: int = 1) -> Integer:
    return Integer(lower, upper, q=q)


def lograndint(lower: int, upper: int, base: float = 10) -> Integer:
    return Integer(lower, upper, log=True, base=base)


def qlograndint(lower: int, upper: int, q: int, base: float = 10) -> Integer:
    return Integer(lower, upper, log=True, q=q, base=base)


def randn(mean: float = 0.0, sd: float = 1.0) -> Normal:
    return Normal(mean, sd)


def qrandn(mean: float, sd: float, q: float) -> Normal:
    return Normal(mean, sd, q)


def choice(categories: Sequence[Any]) -> Categorical:
    return Categorical(categories)


def sample_from(func: Callable) -> Function:
    return Function(func)


def grid_search(values: List[Any]) -> dict:
    """A grid over `values`; kept as Ray's `{"grid_search": [...]}` dict so printed and
    pickled spaces look the same."""
    values = list(values)
    if not values:
        raise ValueError("tune.grid_search() needs at least one value")
    return {"grid_search": values}
