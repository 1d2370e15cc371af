"""Label and field selectors as the list and watch query parameters spell them."""

import re

from .errors import bad_request

_TOKEN = re.compile(r"\s*(\(|\)|,|!=|==|=|!|[^\s(),!=]+)")


def _tokens(text):
    pos, out = 0, []
    text = text.strip()
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if not m or m.end() == pos:
            raise bad_request(f"unable to parse requirement: {text!r}")
        out.append(m.group(1))
        pos = m.end()
        while pos < len(text) and text[pos].isspace():
            pos += 1
    return out


def parse_label_selector(text):
    """Returns a list of (key, op, values); op is one of = != in notin exists !exists."""
    if not text or not text.strip():
        return []
    toks = _tokens(text)
    reqs, i = [], 0

    def fail():
        raise bad_request(f"unable to parse requirement: found invalid label selector {text!r}")

    while i < len(toks):
        if toks[i] == "!":
            if i + 1 >= len(toks) or toks[i + 1] in "(),!=":
                fail()
            reqs.append((toks[i + 1], "!exists", ()))
            i += 2
        else:
            key = toks[i]
            if key in ("(", ")", ",", "=", "==", "!="):
                fail()
            i += 1
            if i >= len(toks) or toks[i] == ",":
                reqs.append((key, "exists", ()))
            elif toks[i] in ("=", "==", "!="):
                op = "!=" if toks[i] == "!=" else "="
                value = ""
                if i + 1 < len(toks) and toks[i + 1] not in ("(", ")", ",", "=", "==", "!="):
                    value = toks[i + 1]
                    i += 1
                i += 1
                reqs.append((key, op, (value,)))
            elif toks[i] in ("in", "notin"):
                op = toks[i]
                i += 1
                if i >= len(toks) or toks[i] != "(":
                    fail()
                i += 1
                values = []
                while i < len(toks) and toks[i] != ")":
                    if toks[i] != ",":
                        values.append(toks[i])
                    i += 1
                if i >= len(toks):
                    fail()
                i += 1
                reqs.append((key, op, tuple(values)))
            else:
                fail()
        if i < len(toks):
            if toks[i] != ",":
                fail()
            i += 1
    return reqs


def labels_match(reqs, labels):
    labels = labels or {}
    for key, op, values in reqs:
        present = key in labels
        if op == "exists" and not present:
            return False
        if op == "!exists" and present:
            return False
        if op in ("=", "in") and (not present or labels[key] not in values):
            return False
        if op in ("!=", "notin") and present and labels[key] in values:
            return False
    return True


def parse_field_selector(text):
    """Returns a list of (path, op, value) with op '=' or '!='."""
    if not text or not text.strip():
        return []
    reqs = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        m = re.fullmatch(r"([A-Za-z0-9_.\-]+)\s*(==|!=|=)\s*(.*)", part)
        if not m:
            raise bad_request(f"invalid selector: {text!r}; can't understand {part!r}")
        reqs.append((m.group(1), "!=" if m.group(2) == "!=" else "=", m.group(3)))
    return reqs


def field_value(obj, path):
    cur = obj
    for key in path.split("."):
        if not isinstance(cur, dict):
            return ""
        cur = cur.get(key)
    if cur is None:
        return ""
    if isinstance(cur, bool):
        return "true" if cur else "false"
    return str(cur)


def fields_match(reqs, obj):
    for path, op, value in reqs:
        if (field_value(obj, path) == value) != (op == "="):
            return False
    return True
