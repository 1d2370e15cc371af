"""oxray's internals. `state` loads on first use, so that `ray._private.state.<name>` works
after a bare `import ray`, as it does with Ray (whose `import ray` loads it)."""


def __getattr__(name):
    if name == "state":
        import importlib

        return importlib.import_module("oxray._private.state")
    raise AttributeError(f"module 'oxray._private' has no attribute {name!r}")
