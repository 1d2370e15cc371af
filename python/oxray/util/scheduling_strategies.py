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
    """Placement groups are not available yet; using this strategy raises."""

    def __init__(self, placement_group, placement_group_bundle_index: int = -1,
                 placement_group_capture_child_tasks=None):
        self.placement_group = placement_group
        self.placement_group_bundle_index = placement_group_bundle_index


def native(strategy):
    """The (kind, node_id, soft) triple the core takes."""
    if strategy is None or strategy == "DEFAULT":
        return ("DEFAULT", "", False)
    if strategy == "SPREAD":
        return ("SPREAD", "", False)
    if isinstance(strategy, NodeAffinitySchedulingStrategy):
        return ("NODE", strategy.node_id, strategy.soft)
    if isinstance(strategy, PlacementGroupSchedulingStrategy):
        raise NotImplementedError("placement groups are not supported yet")
    raise ValueError(f"unknown scheduling_strategy {strategy!r}: use 'DEFAULT', 'SPREAD' or NodeAffinitySchedulingStrategy")
