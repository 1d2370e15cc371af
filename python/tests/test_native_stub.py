"""`oxray/_native.pyi` says what the native module has: every function, class, method and
property, with its parameters in order and which have defaults. A change on either side
that the other does not follow fails here."""

import ast
import inspect
from pathlib import Path

import oxray._native as native

STUB = Path(native.__file__).with_name("_native.pyi")


def _params(node):
    """(name, has_default) of a stub function's parameters after `self`."""
    args = node.args.args
    defaults = [None] * (len(args) - len(node.args.defaults)) + node.args.defaults
    pairs = [(a.arg.rstrip("_"), d is not None) for a, d in zip(args, defaults)]
    return pairs[1:] if pairs and pairs[0][0] == "self" else pairs


def _real_params(obj):
    """(name, has_default) of a native callable's parameters, from its text signature."""
    text = obj.__text_signature__.replace("$self", "self").replace("$cls", "cls")
    # `class` is a keyword: rename it so the signature parses.
    fake = f"def f{text.replace('class,', 'class_,')}: pass"
    args = ast.parse(fake).body[0].args
    defaults = [None] * (len(args.args) - len(args.defaults)) + args.defaults
    pairs = [(a.arg.rstrip("_"), d is not None) for a, d in zip(args.args, defaults)]
    return [p for p in pairs if p[0] not in ("self", "cls")]


def _stub():
    tree = ast.parse(STUB.read_text())
    functions = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}
    classes = {n.name: {m.name: m for m in n.body if isinstance(m, ast.FunctionDef)}
               for n in tree.body if isinstance(n, ast.ClassDef)}
    return functions, classes


def _public(names):
    return {n for n in names if not n.startswith("__")}


def test_the_stub_names_everything_the_module_has():
    functions, classes = _stub()
    module = {n for n in _public(dir(native)) if callable(getattr(native, n))}
    assert module == set(functions) | set(classes)
    for name, methods in classes.items():
        real = _public(vars(getattr(native, name)))
        assert real == _public(methods), name


def test_parameters_match_in_order_and_defaults():
    functions, classes = _stub()
    for name, node in functions.items():
        assert _params(node) == _real_params(getattr(native, name)), name
    for cls, methods in classes.items():
        real_cls = getattr(native, cls)
        for name, node in methods.items():
            if name == "__init__":
                real = inspect.signature(real_cls)
                assert [p for p, _ in _params(node)] == list(real.parameters), cls
                continue
            attribute = inspect.getattr_static(real_cls, name)
            is_property = any(isinstance(d, ast.Name) and d.id == "property" for d in node.decorator_list)
            # A field read straight from the object (a Python object field) is a member.
            is_attribute = type(attribute).__name__ in ("getset_descriptor", "member_descriptor")
            assert is_property == is_attribute, f"{cls}.{name}"
            if not is_property:
                assert _params(node) == _real_params(attribute), f"{cls}.{name}"
