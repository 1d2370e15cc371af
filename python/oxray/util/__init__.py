"""Ray's `ray.util` names that oxray provides. `oxray.util.queue` and `oxray.util.state` load
on first use: they bring asyncio and the HTTP client, which a process that never uses them
should not pay for."""

from oxray.util.actor_pool import ActorPool
from oxray.util.helpers import as_completed, map_unordered
from oxray.util.named_actors import list_named_actors
from oxray.util.node_ip import get_node_ip_address
from oxray.util.placement_group import (
    get_current_placement_group,
    get_placement_group,
    placement_group,
    placement_group_table,
    remove_placement_group,
)

__all__ = ["ActorPool", "as_completed", "get_current_placement_group", "get_node_ip_address", "get_placement_group",
           "list_named_actors", "map_unordered", "placement_group", "placement_group_table", "remove_placement_group"]


def __getattr__(name):
    if name in ("queue", "state"):
        import importlib

        return importlib.import_module(f"oxray.util.{name}")
    raise AttributeError(f"module 'oxray.util' has no attribute {name!r}")
