"""Where tasks and actors run, with the names of `ray.util.scheduling_strategies`. The
strategy "DEFAULT" prefers the caller's node; "SPREAD" takes the nodes that could hold the
work in turn."""


class NodeAffinitySchedulingStrategy:
    """Run on this node; with `soft=True`, elsewhere when it is gone."""

    def __init__(self, node_id: str, soft: bool, _spill_on_unavailable: bool = False, _fail_on_unavailable: bool = False):
        if not isinstance(node_id, str) or len(node_id) != 56:
            raise ValueError(f"node_id must be a node's 56-character hex id, got {node_id!r}")
        self.node_id = node_id
        self.soft = bool(soft)


class PlacementGroupSchedulingStrategy:
    """Run inside a bundle of the placement group: the one at the index, or any with room
    (-1). The work waits until the group is ready."""

    def __init__(self, placement_group, placement_group_bundle_index: int = -1,
                 placement_group_capture_child_tasks=None):
        self.placement_group = placement_group
        self.placement_group_bundle_index = placement_group_bundle_index
        self.placement_group_capture_child_tasks = placement_group_capture_child_tasks


def effective(strategy):
    """The strategy work runs with: with none given, inside a task or actor whose group
    captures child tasks, the same group (any bundle), as in Ray."""
    if strategy is None or strategy == "DEFAULT":
        from oxray.runtime_context import _current

        current = _current.get("placement_group")
        if current is not None and current[1] and strategy is None:
            from oxray.util.placement_group import PlacementGroup, PlacementGroupID

            return PlacementGroupSchedulingStrategy(PlacementGroup(PlacementGroupID(current[0])), -1, True)
    return strategy


def placement(strategy):
    """`(group id, capture child tasks)` for work that runs inside a group, else None."""
    if isinstance(strategy, PlacementGroupSchedulingStrategy):
        return (strategy.placement_group.id.hex(), bool(strategy.placement_group_capture_child_tasks))
    return None


def native(strategy):
    """The (kind, target, soft, bundle index) the core takes."""
    if strategy is None or strategy == "DEFAULT":
        return ("DEFAULT", "", False, -1)
    if strategy == "SPREAD":
        return ("SPREAD", "", False, -1)
    if isinstance(strategy, NodeAffinitySchedulingStrategy):
        return ("NODE", strategy.node_id, strategy.soft, -1)
    from oxray.util._labels import LabelStrategy

    if isinstance(strategy, LabelStrategy):
        import json

        return ("LABELS", json.dumps(strategy.selectors), False, -1)
    if isinstance(strategy, PlacementGroupSchedulingStrategy):
        from oxray.util.placement_group import PlacementGroup

        pg, index = strategy.placement_group, strategy.placement_group_bundle_index
        if not isinstance(pg, PlacementGroup):
            raise TypeError(f"PlacementGroupSchedulingStrategy needs a PlacementGroup, got {type(pg).__name__}")
        if not isinstance(index, int) or index < -1:
            raise ValueError(f"placement_group_bundle_index must be -1 or a bundle's index, got {index!r}")
        return ("PG", pg.id.hex(), False, index)
    raise ValueError(f"unknown scheduling_strategy {strategy!r}: use 'DEFAULT', 'SPREAD' or NodeAffinitySchedulingStrategy")
