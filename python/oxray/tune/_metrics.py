"""Result dicts: flattening nested metrics to "a/b/c" keys, and JSON that never fails."""

import json
import math
from typing import Any, Dict


def flatten(result: Dict[str, Any], prefix: str = "", keep_config: bool = True) -> Dict[str, Any]:
    flat: Dict[str, Any] = {}
    for key, value in result.items():
        if not keep_config and not prefix and key == "config":
            continue
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            flat.update(flatten(value, name + "/"))
        else:
            flat[name] = value
    return flat


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
