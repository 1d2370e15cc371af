"""`BasicVariantGenerator`: the default searcher, which ignores results: the grid crossed
with `num_samples` random draws (plus any `points_to_evaluate` first)."""

import itertools
import random
from typing import Dict, List, Optional

from oxray.tune.search.searcher import Searcher, merge_suggestion
from oxray.tune.search.variants import generate_variants


class BasicVariantGenerator(Searcher):
    def __init__(self, points_to_evaluate: Optional[List[Dict]] = None, max_concurrent: int = 0,
                 constant_grid_search: bool = False, random_state=None):
        super().__init__()
        self.points_to_evaluate = list(points_to_evaluate or [])
        self.max_concurrent = max_concurrent
        self.constant_grid_search = constant_grid_search
        if isinstance(random_state, random.Random):
            random_state = random_state.random()
        self.seed = random_state
        self.space: Dict = {}
        self.num_samples = 1
        self._variants = None
        self._taken = 0  # variants handed out, so a restored generator goes on after them
        self._chosen: Dict[str, Dict] = {}
        self._live: set = set()

    def set_search_properties(self, metric, mode, config, **spec) -> bool:
        super().set_search_properties(metric, mode, config)
        self.space = config or {}
        self.num_samples = spec.get("num_samples", self.num_samples)
        self._variants = None
        return True

    def _next_variant(self):
        if self._variants is None:
            variants = generate_variants(self.space, self.num_samples, self.seed, self.constant_grid_search)
            self._variants = itertools.islice(variants, self._taken, None)
        variant = next(self._variants, None)
        self._taken += variant is not None
        return variant

    def suggest(self, trial_id: str):
        if self.max_concurrent and len(self._live) >= self.max_concurrent:
            return None
        if self.points_to_evaluate:
            point = self.points_to_evaluate.pop(0)
            # A given point still has its unspecified domains drawn.
            chosen, config = next(generate_variants(merge_suggestion(self.space, point), 1, self.seed))
        else:
            variant = self._next_variant()
            if variant is None:
                return Searcher.FINISHED
            chosen, config = variant
        self._chosen[trial_id] = chosen
        self._live.add(trial_id)
        return config

    def on_trial_complete(self, trial_id, result=None, error=False):
        self._live.discard(trial_id)

    def chosen_values(self, trial_id):
        return self._chosen.get(trial_id, {})

    def get_state(self):
        # The generator itself does not pickle: a restored run does not draw new variants.
        return {k: v for k, v in vars(self).items() if k != "_variants"}
