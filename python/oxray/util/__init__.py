"""Ray's `ray.util` names that oxray provides."""

from oxray.util.placement_group import (
    get_current_placement_group,
    get_placement_group,
    placement_group,
    placement_group_table,
    remove_placement_group,
)

__all__ = ["get_current_placement_group", "get_placement_group", "placement_group", "placement_group_table", "remove_placement_group"]
