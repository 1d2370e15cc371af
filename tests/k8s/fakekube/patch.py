"""The four PATCH content types, applied to plain JSON documents.

Strategic merge knows the merge keys of the common built-in lists by field name rather than
from the built-in schemas; server-side apply is a merge that also drops the fields a manager
applied before and leaves out now.
"""

import copy

from .errors import ApiError


def _patch_error(message):
    return ApiError(422, message, "Invalid")


# --- JSON patch (RFC 6902) -------------------------------------------------------------------

def _pointer(path):
    if path == "":
        return []
    if not path.startswith("/"):
        raise _patch_error(f"json patch: invalid path {path!r}")
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def _resolve(doc, parts, path):
    """The container holding the last part of `parts`, and that last part."""
    cur = doc
    for part in parts[:-1]:
        if isinstance(cur, dict) and part in cur:
            cur = cur[part]
        elif isinstance(cur, list) and part.isdigit() and int(part) < len(cur):
            cur = cur[int(part)]
        else:
            raise _patch_error(f"json patch: path {path!r} does not exist")
    return cur, parts[-1]


def _list_index(container, key, path, allow_end):
    if allow_end and key == "-":
        return len(container)
    if not key.isdigit() or (key != "0" and key.startswith("0")):
        raise _patch_error(f"json patch: invalid list index in {path!r}")
    idx = int(key)
    if idx > len(container) or (idx == len(container) and not allow_end):
        raise _patch_error(f"json patch: index out of range in {path!r}")
    return idx


def _get(doc, path):
    parts = _pointer(path)
    if not parts:
        return True, doc
    try:
        container, key = _resolve(doc, parts, path)
    except ApiError:
        return False, None
    if isinstance(container, dict):
        return (key in container), container.get(key)
    if isinstance(container, list) and key.isdigit() and int(key) < len(container):
        return True, container[int(key)]
    return False, None


def _add(doc, path, value):
    parts = _pointer(path)
    if not parts:
        return value
    container, key = _resolve(doc, parts, path)
    if isinstance(container, dict):
        container[key] = value
    elif isinstance(container, list):
        container.insert(_list_index(container, key, path, True), value)
    else:
        raise _patch_error(f"json patch: path {path!r} does not exist")
    return doc


def _remove(doc, path):
    parts = _pointer(path)
    if not parts:
        raise _patch_error("json patch: cannot remove the whole document")
    container, key = _resolve(doc, parts, path)
    if isinstance(container, dict):
        if key not in container:
            raise _patch_error(f"json patch: unable to remove nonexistent key {key!r}: "
                               f"missing value at {path!r}")
        return container.pop(key)
    if isinstance(container, list):
        return container.pop(_list_index(container, key, path, False))
    raise _patch_error(f"json patch: path {path!r} does not exist")


def json_patch(doc, ops):
    if not isinstance(ops, list):
        raise ApiError(400, "json patch body must be a list of operations", "BadRequest")
    doc = copy.deepcopy(doc)
    for n, op in enumerate(ops):
        if not isinstance(op, dict) or "op" not in op or "path" not in op:
            raise ApiError(400, f"json patch operation {n} needs 'op' and 'path'", "BadRequest")
        kind, path = op["op"], op["path"]
        if kind in ("add", "replace", "test") and "value" not in op:
            raise _patch_error(f"json patch: operation {kind} at {path!r} needs a value")
        if kind == "add":
            doc = _add(doc, path, copy.deepcopy(op["value"]))
        elif kind == "remove":
            _remove(doc, path)
        elif kind == "replace":
            found, _ = _get(doc, path)
            if not found:
                raise _patch_error(f"json patch: replace operation does not apply: "
                                   f"doc is missing key: {path}")
            if _pointer(path):
                _remove(doc, path)
            doc = _add(doc, path, copy.deepcopy(op["value"]))
        elif kind in ("move", "copy"):
            src = op.get("from")
            found, value = _get(doc, src if isinstance(src, str) else "\0")
            if not found:
                raise _patch_error(f"json patch: {kind} from missing path {src!r}")
            if kind == "move":
                _remove(doc, src)
            doc = _add(doc, path, copy.deepcopy(value))
        elif kind == "test":
            found, value = _get(doc, path)
            # A missing path tests equal to null, which clients use to assert absence.
            if (value if found else None) != op["value"]:
                raise _patch_error(f"json patch: test operation for path {path!r} failed")
        else:
            raise _patch_error(f"json patch: unknown operation {kind!r}")
    return doc


# --- JSON merge patch (RFC 7386) -------------------------------------------------------------

def merge_patch(doc, patch):
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = copy.deepcopy(doc) if isinstance(doc, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge_patch(out.get(key), value)
    return out


# --- strategic merge patch -------------------------------------------------------------------

# Lists merged item by item, keyed by field; the key depends only on the list's field name.
MERGE_KEYS = {
    "containers": "name", "initContainers": "name", "ephemeralContainers": "name",
    "volumes": "name", "env": "name", "volumeMounts": "mountPath",
    "imagePullSecrets": "name", "conditions": "type", "ownerReferences": "uid",
    "hostAliases": "ip", "topologySpreadConstraints": "topologyKey",
    "containerStatuses": "name", "initContainerStatuses": "name",
}
# Lists of scalars whose patches are unions.
MERGE_SCALAR_LISTS = {"finalizers"}


def _port_key(items):
    return "containerPort" if any(isinstance(i, dict) and "containerPort" in i for i in items) \
        else "port"


def _merge_key(field, items):
    if field == "ports":
        return _port_key(items)
    return MERGE_KEYS.get(field)


def _strip_directives(value):
    if isinstance(value, dict):
        return {k: _strip_directives(v) for k, v in value.items() if not k.startswith("$")}
    if isinstance(value, list):
        return [_strip_directives(v) for v in value]
    return value


def _strategic_list(field, old, patch):
    if field in MERGE_SCALAR_LISTS:
        out = list(old)
        out.extend(v for v in patch if v not in out)
        return out
    key = _merge_key(field, list(old) + list(patch))
    if not key or not all(isinstance(i, dict) for i in list(old) + list(patch)):
        return _strip_directives(patch)
    if any(i.get("$patch") == "replace" for i in patch):
        return [_strip_directives(i) for i in patch if i.get("$patch") != "replace"]
    out = copy.deepcopy(list(old))
    for item in patch:
        idx = next((n for n, o in enumerate(out) if o.get(key) == item.get(key)), None)
        if item.get("$patch") == "delete":
            if idx is not None:
                out.pop(idx)
        elif idx is None:
            out.append(_strip_directives(item))
        else:
            out[idx] = strategic_merge(out[idx], item)
    return out


def _order(items, order, key):
    if not key or not isinstance(order, list):
        return items
    rank = {(o.get(key) if isinstance(o, dict) else o): n for n, o in enumerate(order)}
    return sorted(items, key=lambda i: rank.get(i.get(key) if isinstance(i, dict) else i,
                                                len(rank)))


def strategic_merge(doc, patch):
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    if patch.get("$patch") == "replace":
        return _strip_directives(patch)
    if patch.get("$patch") == "delete":
        return None
    out = copy.deepcopy(doc) if isinstance(doc, dict) else {}
    retain = patch.get("$retainKeys")
    orders = {}
    for key, value in patch.items():
        if key.startswith("$setElementOrder/"):
            orders[key.split("/", 1)[1]] = value
        elif key.startswith("$deleteFromPrimitiveList/"):
            field = key.split("/", 1)[1]
            if isinstance(out.get(field), list) and isinstance(value, list):
                out[field] = [v for v in out[field] if v not in value]
        elif key.startswith("$"):
            continue
        elif value is None:
            out.pop(key, None)
        elif isinstance(value, list) and isinstance(out.get(key), list):
            out[key] = _strategic_list(key, out[key], value)
        elif isinstance(value, dict):
            merged = strategic_merge(out.get(key), value)
            if merged is None:
                out.pop(key, None)
            else:
                out[key] = merged
        else:
            out[key] = _strip_directives(value)
    for field, order in orders.items():
        if isinstance(out.get(field), list):
            out[field] = _order(out[field], order, _merge_key(field, out[field]))
    if isinstance(retain, list):
        out = {k: v for k, v in out.items() if k in retain}
    return out


# --- server-side apply -----------------------------------------------------------------------

# Identity fields are never removed because a later apply leaves them out.
_KEPT = {("apiVersion",), ("kind",), ("metadata",)}
_KEPT_METADATA = {"labels", "annotations", "finalizers", "ownerReferences"}


def applied_paths(config, prefix=()):
    """The leaf paths an applied configuration sets; lists count as single leaves."""
    paths = set()
    if isinstance(config, dict) and config:
        for key, value in config.items():
            path = prefix + (key,)
            if path[:1] == ("metadata",) and len(path) == 2 and key not in _KEPT_METADATA:
                continue
            if path in _KEPT:
                if key == "metadata":
                    paths |= applied_paths(value, path)
                continue
            if isinstance(value, dict) and value:
                paths |= applied_paths(value, path)
            else:
                paths.add(path)
    return paths


def _drop(doc, path):
    cur = doc
    for key in path[:-1]:
        if not isinstance(cur, dict) or key not in cur:
            return
        cur = cur[key]
    if isinstance(cur, dict):
        cur.pop(path[-1], None)


def server_side_apply(doc, config, previous_paths):
    """Merges `config` into `doc` and drops what the same manager applied last time but not now.

    Returns the new document and the paths to remember for the manager."""
    now = applied_paths(config)
    out = copy.deepcopy(doc) if isinstance(doc, dict) else {}
    for path in sorted(previous_paths or (), key=len, reverse=True):
        if path not in now and not any(p[:len(path)] == path for p in now):
            _drop(out, path)
    return merge_patch(out, config), now
