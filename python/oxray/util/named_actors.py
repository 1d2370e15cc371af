"""`list_named_actors`, as Ray's `ray.util.list_named_actors`."""

from typing import Dict, List, Union


def list_named_actors(all_namespaces: bool = False) -> Union[List[str], List[Dict[str, str]]]:
    """The names of the named actors in this driver's namespace; with `all_namespaces`,
    `{"name", "namespace"}` of every named actor of the cluster."""
    from oxray._private import worker

    namespace = "" if all_namespaces else (worker.namespace() or "default")
    found = worker.client().list_actors(namespace)
    if all_namespaces:
        return [{"name": name, "namespace": ns} for name, ns in found]
    return [name for name, _ in found]
