"""`label_selector` and `fallback_strategy` (Ray's label scheduling), checked here and
matched against the nodes' labels by the core: the selector first, then the fallbacks in
order."""

from typing import Any, Dict, List, Optional


def check_selector(selector, where: str = "label_selector") -> Dict[str, str]:
    if not isinstance(selector, dict):
        raise TypeError(f"{where} must be a dict of label name to value, got {type(selector).__name__}")
    for key, value in selector.items():
        if not isinstance(key, str) or not key:
            raise TypeError(f"{where}: label names must be non-empty strings, got {key!r}")
        if not isinstance(value, str):
            raise TypeError(f"{where}: the value of {key!r} must be a string, got {value!r}")
        if value.lstrip("!").startswith("in(") and not value.endswith(")"):
            raise ValueError(f"{where}: {key}={value!r} is not a value, '!value', 'in(a,b)' or '!in(a,b)'")
    return selector


def matches(selector: Dict[str, str], labels: Dict[str, str]) -> bool:
    """Whether a node with `labels` meets the selector: the core's own rule
    (`oxray_types::selector_matches`); the driver uses it to count what fits."""
    from oxray import _native

    return _native.selector_matches(dict(selector), dict(labels))


def check_fallback(fallback) -> List[Dict[str, str]]:
    if not isinstance(fallback, (list, tuple)):
        raise TypeError(f"fallback_strategy must be a list of dicts, got {type(fallback).__name__}")
    for i, option in enumerate(fallback):
        if not isinstance(option, dict) or "label_selector" not in option:
            raise ValueError(f"fallback_strategy[{i}] must be a dict with a 'label_selector', got {option!r}")
        unknown = set(option) - {"label_selector"}
        if unknown:
            raise ValueError(f"fallback_strategy[{i}]: unknown key(s) {sorted(unknown)}; known: label_selector")
        check_selector(option["label_selector"], f"fallback_strategy[{i}].label_selector")
    return list(fallback)


def selectors(options: Dict[str, Any]) -> Optional[List[Dict[str, str]]]:
    """The selectors to try, in order, or None when the options name none."""
    selector = options.get("label_selector")
    fallback = options.get("fallback_strategy")
    if selector is None and fallback is None:
        return None
    chosen = [check_selector(selector)] if selector is not None else [{}]
    if fallback is not None:
        chosen += [option["label_selector"] for option in check_fallback(fallback)]
    return chosen


def check(options: Dict[str, Any]) -> None:
    """Checks the label options where they are given; a strategy besides them is refused."""
    if selectors(options) is not None and options.get("scheduling_strategy") not in (None, "DEFAULT"):
        raise ValueError("label_selector and fallback_strategy cannot be combined with a scheduling_strategy")


class LabelStrategy:
    """Where work with label selectors goes: the core matches them against the nodes'
    labels (`tasks/labels.rs`), first the selector, then each fallback, and waits while no
    node matches, as a Ray task or actor stays pending."""

    def __init__(self, selectors: List[Dict[str, str]]):
        self.selectors = selectors


def strategy(options: Dict[str, Any], chosen):
    """The strategy for work with these options: its label selectors when it has any."""
    wanted = selectors(options)
    return chosen if wanted is None else LabelStrategy(wanted)
