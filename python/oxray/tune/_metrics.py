"""Result dicts: flattening nested metrics to "a/b/c" keys, and JSON that never fails."""

import json
import math
from typing import Any, Dict

from oxray.train._checkpoints import flatten as flatten_metrics


def flatten(result: Dict[str, Any], keep_config: bool = True) -> Dict[str, Any]:
    """Nested results as `a/b` keys; without the trial's `config` unless `keep_config`."""
    return flatten_metrics(result if keep_config else {k: v for k, v in result.items() if k != "config"})


class SafeEncoder(json.JSONEncoder):
    """Numbers stay numbers (NaN as Ray writes it), anything else becomes its repr."""

    def default(self, value):
        for kind in ("item", "tolist"):  # numpy scalars and arrays
            if hasattr(value, kind):
                try:
                    return getattr(value, kind)()
                except Exception:
                    pass
        return repr(value)


def to_json(value: Any, **kwargs) -> str:
    return json.dumps(value, cls=SafeEncoder, **kwargs)


def is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def finite(value: Any) -> bool:
    return is_number(value) and math.isfinite(value)
