"""Placement groups, with the names of `ray.util.placement_group`: bundles of resources
reserved together on the cluster's nodes by a strategy (PACK, SPREAD, STRICT_PACK,
STRICT_SPREAD); tasks and actors then run inside a bundle through
`PlacementGroupSchedulingStrategy`. A group lives until it is removed or, unless it is
detached, until the process that created it shuts down."""

import json
from typing import Dict, List, Optional

from oxray._private import worker
from oxray.util._labels import check_selector

STRATEGIES = ("PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD")


class PlacementGroupID:
    __slots__ = ("_hex",)

    def __init__(self, hex_id: str):
        self._hex = hex_id

    def hex(self) -> str:
        return self._hex

    def __eq__(self, other):
        return isinstance(other, PlacementGroupID) and other._hex == self._hex

    def __hash__(self):
        return hash(self._hex)

    def __repr__(self):
        return f"PlacementGroupID({self._hex})"


class PlacementGroup:
    """A handle to a placement group; it can be passed to tasks and actors."""

    def __init__(self, id: PlacementGroupID, bundle_specs: Optional[List[Dict[str, float]]] = None):
        self.id = id
        self._bundles = bundle_specs

    @property
    def bundle_specs(self) -> List[Dict[str, float]]:
        if self._bundles is None:
            self._bundles = _table_entry(self.id.hex())["bundles"]
        return [dict(b) for b in self._bundles]

    @property
    def bundle_count(self) -> int:
        return len(self.bundle_specs)

    def ready(self):
        """An ObjectRef that is ready (with this group as its value) once every bundle is
        reserved."""
        from oxray._private import serialization

        client = worker.client()
        return worker.new_ref(client.placement_group_ready(self.id.hex(), serialization.dumps(self)))

    def wait(self, timeout_seconds: float = 30) -> bool:
        """Whether the group is ready within the timeout."""
        return worker.client().wait_placement_group(self.id.hex(), timeout_seconds)

    def __eq__(self, other):
        return isinstance(other, PlacementGroup) and other.id == self.id

    def __hash__(self):
        return hash(self.id)

    def __repr__(self):
        return f"PlacementGroup({self.id.hex()})"

    def __reduce__(self):
        return (PlacementGroup, (self.id, self._bundles))


def _check_bundles(bundles) -> List[Dict[str, float]]:
    if not isinstance(bundles, (list, tuple)) or not bundles:
        raise ValueError("The placement group `bundles` argument must be a non-empty list of dictionaries")
    checked = []
    for i, bundle in enumerate(bundles):
        if not isinstance(bundle, dict) or not bundle:
            raise ValueError(f"Bundles cannot be empty dictionaries: bundle {i} is {bundle!r}")
        for name, amount in bundle.items():
            if not isinstance(name, str) or isinstance(amount, bool) or not isinstance(amount, (int, float)):
                raise ValueError(f"bundle {i}: resource amounts must be numbers by name, got {name!r}: {amount!r}")
            if amount < 0:
                raise ValueError(f"bundle {i}: resource {name} cannot be negative ({amount})")
        if all(amount == 0 for amount in bundle.values()):
            raise ValueError(f"Bundle {i} asks for no resources; bundles cannot be all zero: {bundle!r}")
        checked.append({k: float(v) for k, v in bundle.items()})
    return checked


def _check_bundle_selectors(selectors, count: int) -> List[Dict[str, str]]:
    """Ray's `bundle_label_selector`: one selector per bundle, or none."""
    if selectors is None:
        return []
    if not isinstance(selectors, (list, tuple)):
        raise TypeError(f"bundle_label_selector must be a list of dicts, got {type(selectors).__name__}")
    if len(selectors) != count:
        raise ValueError(f"bundle_label_selector has {len(selectors)} entries for {count} bundles: "
                         "give one selector per bundle")
    return [dict(check_selector(s, f"bundle_label_selector[{i}]")) for i, s in enumerate(selectors)]


def placement_group(bundles: List[Dict[str, float]], strategy: str = "PACK", name: str = "",
                    lifetime: Optional[str] = None, _max_cpu_fraction_per_node: float = 1.0,
                    _soft_target_node_id: Optional[str] = None, bundle_label_selector=None) -> PlacementGroup:
    """Reserves `bundles` on the cluster. Returns at once; `ready()` or `wait()` tell when
    the reservation is made."""
    bundles = _check_bundles(bundles)
    if strategy not in STRATEGIES:
        raise ValueError(f"Invalid placement group strategy {strategy!r}: use one of {', '.join(STRATEGIES)}")
    if lifetime not in (None, "detached"):
        raise ValueError(f"Placement group `lifetime` must be None or 'detached', got {lifetime!r}")
    if not isinstance(name, str):
        raise TypeError(f"name must be a string, got {type(name).__name__}")
    selectors = _check_bundle_selectors(bundle_label_selector, len(bundles))
    client = worker.client()
    namespace = worker.namespace() or "default"
    pg_id = client.create_placement_group(bundles, strategy, name, namespace, lifetime == "detached", selectors)
    group = PlacementGroup(PlacementGroupID(pg_id), bundles)
    if lifetime != "detached":
        worker.own_placement_group(group)
    return group


def remove_placement_group(placement_group: PlacementGroup) -> None:
    """Frees the group's bundles; tasks and actors running in them are ended."""
    if not isinstance(placement_group, PlacementGroup):
        raise TypeError(f"remove_placement_group takes a PlacementGroup, got {type(placement_group).__name__}")
    worker.disown_placement_group(placement_group)
    worker.client().remove_placement_group(placement_group.id.hex())


def get_placement_group(placement_group_name: str) -> PlacementGroup:
    """A live group by name, in this process's namespace."""
    try:
        entry = json.loads(worker.client().placement_group_json("", placement_group_name,
                                                                worker.namespace() or "default"))
    except ValueError:
        raise ValueError(f"Failed to look up placement group with name: {placement_group_name}") from None
    return PlacementGroup(PlacementGroupID(entry["placement_group_id"]), entry["bundles"])


def get_current_placement_group() -> Optional[PlacementGroup]:
    """The placement group the current task or actor runs in; None in a driver or outside
    any group."""
    from oxray.runtime_context import _current

    current = _current["placement_group"]
    return PlacementGroup(PlacementGroupID(current[0])) if current else None


def _table_entry(pg_id: str) -> dict:
    return json.loads(worker.client().placement_group_json(pg_id, "", ""))


def _ray_shape(entry: dict) -> dict:
    """Bundles and their nodes keyed by bundle index, as Ray's table has them."""
    out = dict(entry)
    out["bundles"] = {i: dict(b) for i, b in enumerate(entry["bundles"])}
    out["bundles_to_node_id"] = {i: n for i, n in enumerate(entry["bundles_to_node_id"]) if n}
    return out


def placement_group_table(placement_group: Optional[PlacementGroup] = None) -> dict:
    """One group's entry, or every group's by id."""
    if placement_group is not None:
        return _ray_shape(_table_entry(placement_group.id.hex()))
    entries = json.loads(worker.client().placement_groups_json())
    return {e["placement_group_id"]: _ray_shape(e) for e in entries}
