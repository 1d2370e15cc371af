"""Turning a search space into trial configs: every point of the grid (the cartesian
product of all `grid_search` values, the first grid key varying fastest), repeated
`num_samples` times, each with fresh draws of the random domains. Pure: the same space,
count and seed give the same configs."""

import copy
import itertools
import random
from typing import Any, Dict, Iterator, List, Optional, Tuple

from oxray.tune.search.sample import Domain, Function

Path = Tuple[Any, ...]


def is_grid(value: Any) -> bool:
    return isinstance(value, dict) and len(value) == 1 and "grid_search" in value


def find_unresolved(space: Any, path: Path = ()) -> List[Tuple[Path, Any]]:
    """`(path, grid-or-domain)` for each value still to choose, in the space's order."""
    if is_grid(space) or isinstance(space, Domain):
        return [(path, space)]
    found: List[Tuple[Path, Any]] = []
    if isinstance(space, dict):
        for key, value in space.items():
            found += find_unresolved(value, path + (key,))
    elif isinstance(space, (list, tuple)):
        for i, value in enumerate(space):
            found += find_unresolved(value, path + (i,))
    return found


def _assign(config: Any, path: Path, value: Any) -> None:
    for key in path[:-1]:
        config = config[key]
    config[path[-1]] = value


class _Spec(dict):
    """What a `sample_from` function sees: `spec.config.lr` or `spec["config"]["lr"]`."""

    def __getattr__(self, name):
        try:
            value = self[name]
        except KeyError:
            raise AttributeError(name) from None
        return _Spec(value) if isinstance(value, dict) and not isinstance(value, _Spec) else value


def _to_mutable(space: Any) -> Any:
    """A copy whose tuples are lists, so values can be written into it."""
    if isinstance(space, dict) and not is_grid(space):
        return {k: _to_mutable(v) for k, v in space.items()}
    if isinstance(space, (list, tuple)):
        return [_to_mutable(v) for v in space]
    return space


def grid_points(space: Any) -> List[Dict[Path, Any]]:
    grids = [(p, v["grid_search"]) for p, v in find_unresolved(space) if is_grid(v)]
    if not grids:
        return [{}]
    # The first grid key varies fastest: walk the product of the reversed keys.
    reversed_grids = list(reversed(grids))
    return [{p: v for (p, _), v in zip(reversed_grids, values)}
            for values in itertools.product(*(g for _, g in reversed_grids))]

def resolve(space: Any, grid_point: Dict[Path, Any], rng: random.Random) -> Tuple[Dict[Path, Any], Dict]:
    """One config: the grid point's values, fresh draws for the domains, then the
    `sample_from` functions (which may read the rest). Returns `(chosen values, config)`."""
    config = _to_mutable(copy.deepcopy(space))
    chosen: Dict[Path, Any] = {}
    for path, value in grid_point.items():
        _assign(config, path, value)
        chosen[path] = value
    pending = [(p, d) for p, d in find_unresolved(config) if isinstance(d, Domain)]
    for path, domain in [(p, d) for p, d in pending if not isinstance(d, Function)]:
        chosen[path] = domain.sample(rng=rng)
        _assign(config, path, chosen[path])
    for path, domain in [(p, d) for p, d in pending if isinstance(d, Function)]:
        value = domain.sample(_Spec(config=config))
        # A function may return a domain or a grid-free value; a domain is drawn once more.
        if isinstance(value, Domain):
            value = value.sample(rng=rng)
        chosen[path] = value
        _assign(config, path, value)
    return chosen, config


def generate_variants(space: Any, num_samples: int = 1, seed: Optional[int] = None,
                      constant_grid_search: bool = False) -> Iterator[Tuple[Dict[Path, Any], Dict]]:
    """Every trial's `(chosen values, config)`: `num_samples` rounds over the grid."""
    rng = random.Random(seed)
    points = grid_points(space)
    rounds = itertools.count() if num_samples == -1 else range(num_samples)
    for _ in rounds:
        fixed = None
        for point in points:
            if constant_grid_search and fixed is not None:
                chosen, config = resolve(space, point, random.Random(fixed))
            else:
                fixed = rng.random() if constant_grid_search else None
                chosen, config = resolve(space, point, random.Random(fixed) if fixed is not None else rng)
            yield chosen, config


def count_variants(space: Any, num_samples: int) -> Optional[int]:
    return None if num_samples == -1 else len(grid_points(space)) * num_samples


def format_vars(chosen: Dict[Path, Any]) -> str:
    """`k=v,...` of the chosen values (last key of each path, sorted), safe for a directory name."""
    import re

    def clean(value):
        if isinstance(value, float):
            return f"{value:.4f}"
        return re.sub(r"[^a-zA-Z0-9_-]+", "_", str(value)).strip("_")

    return ",".join(f"{clean(p[-1])}={clean(v)}" for p, v in sorted(chosen.items(), key=lambda kv: str(kv[0])))


def flatten_chosen(chosen: Dict[Path, Any]) -> Dict[str, Any]:
    return {"/".join(str(k) for k in path): value for path, value in chosen.items()}
