"""Searchers: which config each trial gets (`tune.search`)."""

from oxray.tune.search.basic_variant import BasicVariantGenerator
from oxray.tune.search.searcher import ConcurrencyLimiter, SearchAlgorithm, Searcher


def create_searcher(search_alg: str, **kwargs) -> Searcher:
    """A searcher by name: "variant_generator" (or "random") and "optuna"."""
    if search_alg in ("variant_generator", "random"):
        return BasicVariantGenerator(**kwargs)
    if search_alg == "optuna":
        from oxray.tune.search.optuna import OptunaSearch

        return OptunaSearch(**kwargs)
    raise ValueError(f"unknown searcher {search_alg!r}: 'variant_generator', 'random' or 'optuna'")


__all__ = ["BasicVariantGenerator", "ConcurrencyLimiter", "SearchAlgorithm", "Searcher", "create_searcher"]
