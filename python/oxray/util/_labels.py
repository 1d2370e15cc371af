"""`label_selector` and `fallback_strategy` (Ray's label scheduling): the selector is matched
against the nodes' labels here and becomes a hard NodeAffinity choice among the nodes that
match; the fallbacks are tried in order when none does."""

import random
from typing import Any, Dict, List, Optional

_NO_MATCH = object()


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


def value_matches(wanted: str, actual: Optional[str]) -> bool:
    """One selector value against a node's label (None: the node lacks it), as Ray reads
    them: `v`, `!v`, `in(a,b)`, `!in(a,b)`."""
    negated = wanted.startswith("!")
    wanted = wanted[1:] if negated else wanted
    if wanted.startswith("in(") and wanted.endswith(")"):
        hit = actual in {v.strip() for v in wanted[3:-1].split(",")}
    else:
        hit = actual == wanted
    return not hit if negated else hit


def matches(selector: Dict[str, str], labels: Dict[str, str]) -> bool:
    return all(value_matches(wanted, labels.get(key)) for key, wanted in selector.items())


def choose(selectors: List[Dict[str, str]], nodes: List[Dict[str, Any]], here: Optional[str],
           pick=random.choice) -> Optional[str]:
    """The node to run on: for the first selector any alive node matches, this process's node
    when it does (as DEFAULT prefers it), else one of them; None when no selector matches."""
    alive = [n for n in nodes if n["Alive"]]
    for selector in selectors:
        fitting = [n["NodeID"] for n in alive if matches(selector, n["Labels"] or {})]
        if fitting:
            return here if here in fitting else pick(fitting)
    return None


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


def node_for(options: Dict[str, Any]):
    """None when the options have no selector; else the node id to run on, or _NO_MATCH."""
    wanted = selectors(options)
    if wanted is None:
        return None
    from oxray._private import worker

    chosen = choose(wanted, worker.nodes(), worker.client().node_id())
    return _NO_MATCH if chosen is None else chosen


def unmatched(node) -> bool:
    return node is _NO_MATCH
