"""Pure decisions about a worker group: the ranks of its workers, the GPUs each sees, and
how many workers fit in the cluster now."""

import math
from typing import Dict, List, Optional, Sequence

from oxray.util._labels import matches


def assign_ranks(workers: Sequence[Dict]) -> List[Dict[str, int]]:
    """`workers`: per bundle, `{"node_id", "node_ip", "gpu_ids"}`. Returns, per bundle,
    `{"world_rank", "local_rank", "local_world_size", "node_rank"}`. Workers are grouped by
    node in order of first appearance, and sorted within a node by their lowest GPU id, so
    local rank k holds the k-th GPU of its node."""
    nodes: List[str] = []
    for w in workers:
        if w["node_id"] not in nodes:
            nodes.append(w["node_id"])

    def lowest_gpu(i):
        ids = [int(g) for g in workers[i]["gpu_ids"] if str(g).isdigit()]
        return min(ids) if ids else math.inf

    order = sorted(range(len(workers)), key=lambda i: (nodes.index(workers[i]["node_id"]), lowest_gpu(i), i))
    ips: List[str] = []
    for i in order:
        if workers[i]["node_ip"] not in ips:
            ips.append(workers[i]["node_ip"])
    ranks: List[Dict[str, int]] = [{} for _ in workers]
    seen_on_ip: Dict[str, int] = {}
    for world_rank, i in enumerate(order):
        ip = workers[i]["node_ip"]
        ranks[i] = {
            "world_rank": world_rank,
            "local_rank": seen_on_ip.get(ip, 0),
            "local_world_size": sum(1 for w in workers if w["node_ip"] == ip),
            "node_rank": ips.index(ip),
        }
        seen_on_ip[ip] = seen_on_ip.get(ip, 0) + 1
    return ranks


def shared_visible_devices(workers: Sequence[Dict]) -> List[str]:
    """Per worker, the CUDA_VISIBLE_DEVICES it gets: the sorted union of the GPU ids of the
    group's workers on its node, so NCCL can reach its peers on the node directly."""
    by_node: Dict[str, set] = {}
    for w in workers:
        by_node.setdefault(w["node_id"], set()).update(str(g) for g in w["gpu_ids"])
    return [",".join(sorted(by_node[w["node_id"]], key=lambda g: (not g.isdigit(), int(g) if g.isdigit() else g)))
            for w in workers]


def workers_that_fit(per_worker: Dict[str, float], nodes: Sequence[Dict], cap: int,
                     selectors: Optional[Sequence[Dict[str, str]]] = None) -> int:
    """How many whole workers the nodes' free resources hold, at most `cap`. `nodes`: per
    node, `{"free": resources, "labels": labels}`; worker i goes only to a node that
    `selectors[i]` matches, when selectors are given."""
    # Workers are alike: placing them one by one on the first node with room counts as many
    # as the nodes hold, and lets each have a selector of its own.
    free = [dict(node["free"]) for node in nodes]
    placed = 0
    for selector in (selectors if selectors is not None else [{}] * cap)[:cap]:
        spot = next((i for i, node in enumerate(nodes) if matches(selector, node.get("labels", {}))
                     and all(free[i].get(k, 0.0) + 1e-9 >= v for k, v in per_worker.items())), None)
        if spot is None:
            break
        for k, v in per_worker.items():
            free[spot][k] = free[spot].get(k, 0.0) - v
        placed += 1
    return placed


def never_fits(total: Dict[str, float], cluster_total: Dict[str, float]) -> List[str]:
    """The resources the whole cluster has too little of to ever hold `total`."""
    return [f"{k}: needs {v:g}, the cluster has {cluster_total.get(k, 0.0):g}"
            for k, v in sorted(total.items()) if cluster_total.get(k, 0.0) + 1e-9 < v]
