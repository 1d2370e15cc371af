"""Custom resource schemas: pruning, defaulting and validation as the API server does them.

A CRD's `openAPIV3Schema` is structural: `properties` says which fields are known, and the
server drops the others (or refuses them under `fieldValidation=Strict`), drops nulls where
the schema is not `nullable`, fills `default`s, then validates. Validation is JSON Schema
draft 4 once the OpenAPI-only keywords are translated.
"""

import copy
import json
import logging

import jsonschema

log = logging.getLogger("fakekube.apiserver")

_ROOT_KEPT = ("apiVersion", "kind", "metadata")


def _field(path):
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def prepare(obj, schema):
    """Prunes, drops nulls and defaults `obj` in place; returns the unknown fields' paths."""
    unknown = []
    if isinstance(schema, dict):
        _walk(obj, schema, (), unknown)
    return unknown


def _walk(value, schema, path, unknown):
    if isinstance(value, dict):
        props = schema.get("properties") or {}
        addl = schema.get("additionalProperties")
        keep_unknown = (schema.get("x-kubernetes-preserve-unknown-fields") is True
                        or addl is True)
        embedded = schema.get("x-kubernetes-embedded-resource") is True
        for key, sub in props.items():
            if key not in value and isinstance(sub, dict) and "default" in sub:
                value[key] = copy.deepcopy(sub["default"])
        for key in list(value):
            sub = props.get(key)
            if sub is None and isinstance(addl, dict):
                sub = addl
            if sub is None:
                if keep_unknown or ((not path or embedded) and key in _ROOT_KEPT):
                    continue
                unknown.append(_field(path + (key,)))
                del value[key]
                continue
            if value[key] is None:
                if not sub.get("nullable"):
                    del value[key]
                continue
            _walk(value[key], sub, path + (key,), unknown)
    elif isinstance(value, list):
        items = schema.get("items")
        if isinstance(items, dict):
            for n, item in enumerate(value):
                if item is not None:
                    _walk(item, items, path + (n,), unknown)


def _translate(schema):
    """OpenAPI v3 schema -> JSON Schema draft 4."""
    if isinstance(schema, list):
        return [_translate(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {}
    for key, value in schema.items():
        if key.startswith("x-kubernetes-") or key in ("default", "example", "externalDocs",
                                                       "nullable", "format"):
            continue
        if key in ("properties", "patternProperties", "definitions"):
            out[key] = {k: _translate(v) for k, v in value.items()}
        elif key in ("items", "additionalProperties", "not", "allOf", "anyOf", "oneOf"):
            out[key] = _translate(value)
        elif key in ("exclusiveMinimum", "exclusiveMaximum") and not isinstance(value, bool):
            # The later drafts' numeric form, in draft 4's spelling.
            out["minimum" if key == "exclusiveMinimum" else "maximum"] = value
            out[key] = True
        else:
            out[key] = value
    if schema.get("x-kubernetes-int-or-string") and "anyOf" not in out and "type" not in out:
        out["anyOf"] = [{"type": "integer"}, {"type": "string"}]
    if schema.get("nullable"):
        wrapped = {k: v for k, v in out.items()}
        out = {"anyOf": [{"type": "null"}, wrapped]}
    return out


def compile_schema(schema):
    """A validator for the schema. Keywords draft 4 reads differently (exclusiveMinimum as a
    number, say) are not the client's fault: the schema is used as it is, not refused."""
    if not isinstance(schema, dict):
        return None
    return jsonschema.Draft4Validator(_translate(schema))


def _show(value):
    return json.dumps(value, separators=(",", ":"))[:200]


def _describe(err):
    path = tuple(err.absolute_path)
    field = _field(path) or "<root>"
    value, v = err.instance, err.validator_value
    kind = err.validator
    if kind == "required":
        missing = err.message.split("'")[1] if "'" in err.message else ""
        return _field(path + (missing,)), "Required value"
    if kind == "type":
        want = v if isinstance(v, str) else " or ".join(v)
        return field, f"Invalid value: {_show(value)}: {field} in body must be of type {want}"
    if kind in ("minimum", "maximum"):
        exclusive = err.schema.get("exclusiveMinimum" if kind == "minimum" else
                                   "exclusiveMaximum") is True
        than = ("greater than" if kind == "minimum" else "less than") + \
            ("" if exclusive else " or equal to")
        return field, f"Invalid value: {_show(value)}: {field} in body should be {than} {v}"
    if kind == "enum":
        allowed = ", ".join(_show(a) for a in v)
        return field, f"Unsupported value: {_show(value)}: supported values: {allowed}"
    if kind == "pattern":
        return field, f"Invalid value: {_show(value)}: {field} in body should match '{v}'"
    if kind == "minLength":
        return field, f"Invalid value: {_show(value)}: {field} in body should be at least " \
                      f"{v} chars long"
    if kind == "maxLength":
        return field, f"Too long: may not be more than {v} bytes"
    if kind == "minItems":
        return field, f"Invalid value: {len(value)}: {field} in body should have at least " \
                      f"{v} items"
    if kind == "maxItems":
        return field, f"Too many: {len(value)}: must have at most {v} items"
    return field, f"Invalid value: {_show(value)}: {err.message}"


def validate(validator, obj):
    """Returns [(field, message)] for every violation, most specific first."""
    if validator is None:
        return []
    try:
        errors = list(validator.iter_errors(obj))
    except Exception:  # noqa: BLE001 - a schema this validator cannot apply checks nothing
        log.exception("schema validation failed; accepting the object unchecked")
        return []
    errors.sort(key=lambda e: (-len(e.absolute_path), list(map(str, e.absolute_path))))
    causes, seen = [], set()
    for err in errors:
        # anyOf failures repeat their branches' errors; the branch errors say more.
        leaves = err.context if err.validator in ("anyOf", "oneOf") and err.context else [err]
        cause = _describe(leaves[0])
        if cause not in seen:
            seen.add(cause)
            causes.append(cause)
    return causes
