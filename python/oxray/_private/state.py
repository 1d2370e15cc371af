"""`ray._private.state` as libraries use it (vLLM's `available_resources_per_node`, Ray Data's
`actors()`, `state.node_table()`): the cluster's nodes, resources, actors and jobs, in the
shapes Ray's module gives them. Connects on first use, as oxray's top-level calls do."""

import json
from typing import Any, Dict, List, Optional

from oxray._private import worker

ACTOR_STATES = ("DEPENDENCIES_UNREADY", "PENDING_CREATION", "ALIVE", "RESTARTING", "DEAD")
_ENDED = ("STOPPED", "SUCCEEDED", "FAILED")


def _alive_nodes() -> List[Dict[str, Any]]:
    return [n for n in json.loads(worker.client().nodes_json()) if n["state"] == "ALIVE"]


def _state_rows(kind: str, **params) -> List[Dict[str, Any]]:
    """Every row of one of the head's state lists, with all its columns."""
    from oxray.util.state.api import StateApiClient

    worker.client()  # this module's calls read the cluster this process is (now) connected to
    query = {"limit": 10_000, "detail": True, "timeout": 30}
    for key, value in params.items():
        query.setdefault("filter_keys", []).append(key)
        query.setdefault("filter_predicates", []).append("=")
        query.setdefault("filter_values", []).append(value)
    return StateApiClient()._request(f"/api/v0/{kind}", query, 30)["result"]


class GlobalState:
    """The methods of Ray's `ray._private.state.state` that libraries call."""

    def node_table(self) -> List[Dict[str, Any]]:
        return worker.nodes()

    def cluster_resources(self) -> Dict[str, float]:
        return worker.cluster_resources()

    def available_resources(self) -> Dict[str, float]:
        return worker.available_resources()

    def total_resources_per_node(self) -> Dict[str, Dict[str, float]]:
        """Node id (hex) to its resources, for the nodes alive; as in Ray, a resource a node
        has none of is left out."""
        return {n["node_id"]: {k: v for k, v in n["resources_total"].items() if v > 0} for n in _alive_nodes()}

    def available_resources_per_node(self) -> Dict[str, Dict[str, float]]:
        """Node id (hex) to what is free on it now, for the nodes alive; a resource all in
        use is left out, as in Ray."""
        return {n["node_id"]: {k: v for k, v in n["resources_available"].items() if v > 0} for n in _alive_nodes()}

    def _live_node_ids(self) -> set:
        return set(self.total_resources_per_node())

    def actor_table(self, actor_id: Optional[str], job_id=None, actor_state_name: Optional[str] = None):
        """One actor's record by hex id ({} if unknown), or every actor's by id, optionally of
        one job (its hex id or JobID) and in one state."""
        if actor_state_name is not None and actor_state_name not in ACTOR_STATES:
            raise ValueError(f'"{actor_state_name}" is not a valid actor state name, it must be one of the '
                             f"following: {', '.join(ACTOR_STATES)}")
        node_ips = {n["NodeID"]: n["NodeManagerAddress"] for n in worker.nodes()}
        if actor_id is not None:
            rows = _state_rows("actors", actor_id=actor_id)
            return _actor_record(rows[0], node_ips) if rows else {}
        filters = {}
        if job_id is not None:
            filters["job_id"] = job_id if isinstance(job_id, str) else job_id.hex()
        if actor_state_name is not None:
            filters["state"] = actor_state_name
        return {row["actor_id"]: _actor_record(row, node_ips) for row in _state_rows("actors", **filters)}

    def job_table(self) -> List[Dict[str, Any]]:
        """The drivers' jobs (a submitted job's once its driver connected), in Ray's shape."""
        out = []
        for row in _state_rows("jobs"):
            if not row.get("job_id"):
                continue
            driver = row.get("driver_info") or {}
            out.append({
                "JobID": row["job_id"],
                "DriverIPAddress": driver.get("node_ip_address", ""),
                "DriverPid": int(driver.get("pid") or 0),
                "Timestamp": row.get("end_time") or row.get("start_time") or 0,
                "StartTime": row.get("start_time") or 0,
                "EndTime": row.get("end_time") or 0,
                "IsDead": row.get("status") in _ENDED,
                "Entrypoint": row.get("entrypoint") or "",
            })
        return out

    def placement_group_table(self, placement_group_id=None):
        """One group's entry (by PlacementGroupID or hex id), or every group's by id."""
        from oxray.util.placement_group import PlacementGroup, PlacementGroupID, placement_group_table

        if placement_group_id is None:
            return placement_group_table()
        hex_id = placement_group_id if isinstance(placement_group_id, str) else placement_group_id.hex()
        return placement_group_table(PlacementGroup(PlacementGroupID(hex_id)))


def _actor_record(row: Dict[str, Any], node_ips: Dict[str, str]) -> Dict[str, Any]:
    node = row.get("node_id") or ""
    # Ray keeps the actor's worker port and its owner's address; oxray's state rows have
    # neither, so they read as unknown (0 and empty), as Ray shows them for an unplaced actor.
    return {
        "ActorID": row["actor_id"],
        "ActorClassName": row.get("class_name") or "",
        "IsDetached": bool(row.get("is_detached")),
        "Name": row.get("name") or "",
        "JobID": row.get("job_id") or "",
        "Address": {"IPAddress": node_ips.get(node, ""), "Port": 0, "NodeID": node},
        "OwnerAddress": {"IPAddress": "", "Port": 0, "NodeID": ""},
        "State": row.get("state") or "",
        "NumRestarts": row.get("num_restarts") or 0,
        "Timestamp": row.get("end_time_ms") or row.get("start_time_ms") or 0,
        "StartTime": row.get("start_time_ms") or 0,
        "EndTime": row.get("end_time_ms") or 0,
        "DeathCause": row.get("death_cause"),
        "Pid": row.get("pid") or 0,
    }


state = GlobalState()


def nodes() -> List[Dict[str, Any]]:
    return state.node_table()


def cluster_resources() -> Dict[str, float]:
    return state.cluster_resources()


def available_resources() -> Dict[str, float]:
    return state.available_resources()


def available_resources_per_node() -> Dict[str, Dict[str, float]]:
    return state.available_resources_per_node()


def total_resources_per_node() -> Dict[str, Dict[str, float]]:
    return state.total_resources_per_node()


def actors(actor_id: Optional[str] = None, job_id=None, actor_state_name: Optional[str] = None):
    return state.actor_table(actor_id=actor_id, job_id=job_id, actor_state_name=actor_state_name)


def jobs() -> List[Dict[str, Any]]:
    return state.job_table()


def current_node_id() -> str:
    """This node's resource name (`node:<ip>`), as Ray's."""
    from oxray.util.node_ip import get_node_ip_address

    return f"node:{get_node_ip_address()}"


def node_ids() -> List[str]:
    """Every alive node's resource name (`node:<ip>`)."""
    return [name for resources in state.total_resources_per_node().values() for name in resources
            if name.startswith("node:") and name != "node:__internal_head__"]
