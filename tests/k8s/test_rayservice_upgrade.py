"""A RayService whose `rayClusterConfig` changes is upgraded without downtime: a new cluster
is prepared while the old one serves, the Services move to it once Serve runs there, and the
old one is deleted after `rayClusterDeletionDelaySeconds`. With `upgradeStrategy: None`,
nothing moves. (The fake cluster has no Service proxy: the old cluster is asked at its own
address all along, and the new one at its own once the Service selects it.)"""

import json
import threading
import time
import urllib.request

import pytest

from tests.k8s.fakekube.client import wait_until
from tests.k8s.test_operator import (  # noqa: F401 (fixtures)
    CLUSTERS, SERVICES, apply, cluster_manifest, free_port, operator, serve_config, serving, status,
)

SERVE_SVC = "/api/v1/namespaces/default/services/fruit-serve-svc"
HEAD_SVC = "/api/v1/namespaces/default/services/fruit-head-svc"


def head_cluster_spec(season):
    """A one-pod cluster; each call has ports of its own, as two clusters of the process
    kubelet share this machine's ports."""
    spec = cluster_manifest("unused", workers=0)["spec"]
    spec["headGroupSpec"]["rayStartParams"]["num-cpus"] = "2"
    spec["headGroupSpec"]["template"]["spec"]["containers"][0]["env"] = [{"name": "SEASON", "value": season}]
    return spec


def fruit(ip, port):
    with urllib.request.urlopen(f"http://{ip}:{port}/fruit", timeout=5) as r:
        return json.load(r)


def conditions(st):
    return {c["type"]: c for c in st.get("conditions", [])}


def test_a_changed_cluster_config_moves_the_service_to_a_new_cluster_without_downtime(operator, kube, kubectl):
    old_port, new_port = free_port(), free_port()
    service = {"apiVersion": "oxray.io/v1", "kind": "RayService", "metadata": {"name": "fruit"},
               "spec": {"serveConfigV2": serve_config(old_port, 3), "rayClusterConfig": head_cluster_spec("spring"),
                        "rayClusterDeletionDelaySeconds": 3}}
    first = serving(operator, kube, kubectl, service)
    old = first["activeServiceStatus"]["rayClusterName"]
    old_ip = status(kube, CLUSTERS, old)["head"]["podIP"]
    assert fruit(old_ip, old_port)["price"] == 3

    # The old cluster is asked all along, from before the change until it is gone.
    answered, failed, stop = [], [], threading.Event()

    def ask_old():
        while not stop.is_set():
            try:
                fruit(old_ip, old_port)
                answered.append(time.monotonic())
            except Exception as e:  # noqa: BLE001 - any failure is a finding
                failed.append((time.monotonic(), repr(e)))
            time.sleep(0.2)
    asker = threading.Thread(target=ask_old, daemon=True)
    asker.start()
    try:
        service["spec"]["rayClusterConfig"] = head_cluster_spec("summer")
        service["spec"]["serveConfigV2"] = serve_config(new_port, 4)
        apply(kubectl, service)
        upgrading = wait_until(lambda: conditions(st := status(kube, SERVICES, "fruit"))["UpgradeInProgress"]["status"]
                               == "True" and st, timeout=30, what="a pending cluster")
        new = upgrading["pendingServiceStatus"]["rayClusterName"]
        assert new != old and new.startswith("fruit-raycluster-"), upgrading
        assert upgrading["activeServiceStatus"]["rayClusterName"] == old
        assert f"being prepared to replace {old}" in conditions(upgrading)["UpgradeInProgress"]["message"]
        new_cluster = kube.get(f"{CLUSTERS}/{new}")
        assert new_cluster["metadata"]["labels"]["ray.io/originated-from-cr-name"] == "fruit"
        assert new_cluster["metadata"]["annotations"]["ray.io/hash-without-replicas-and-workers-to-delete"]

        def moved():
            svc = kube.get(SERVE_SVC)
            return svc["spec"]["selector"]["ray.io/cluster"] == new and svc
        try:
            svc = wait_until(moved, timeout=180, interval=0.1, what="the Serve Service to move")
        except TimeoutError:
            pytest.fail(f"the Service did not move: {status(kube, SERVICES, 'fruit')}\n"
                        f"operator log: {operator['log'].read_text()[-3000:]}")
        moved_at = time.monotonic()
        assert kube.get_or_none(f"{CLUSTERS}/{old}") is not None, "the old cluster stays for its delay"
        # When the Service moves, Serve runs on the new cluster, on the new config's port.
        new_ip = status(kube, CLUSTERS, new)["head"]["podIP"]
        assert fruit(new_ip, new_port)["price"] == 4
        assert svc["spec"]["ports"][0]["port"] == new_port
        assert kube.get(HEAD_SVC)["spec"]["selector"]["ray.io/cluster"] == new
        done = wait_until(lambda: (st := status(kube, SERVICES, "fruit"))["activeServiceStatus"]["rayClusterName"] == new
                          and st, timeout=10, what="the status to name the new cluster")
        assert "pendingServiceStatus" not in done and done["serviceStatus"] == "Running", done
        assert conditions(done)["UpgradeInProgress"]["status"] == "False", done

        # The old cluster is deleted after its delay (3 s), not before.
        wait_until(lambda: kube.get_or_none(f"{CLUSTERS}/{old}") is None, timeout=60, interval=0.2,
                   what="the old cluster to be deleted")
        assert time.monotonic() - moved_at > 2, "deleted before its delay"
    finally:
        stop.set()
        asker.join()
    assert not [f for f in failed if f[0] < moved_at], failed[:3]
    assert max(answered) > moved_at - 1, "the old cluster served until the Service moved"
    events = kube.list("/apis/events.k8s.io/v1/namespaces/default/events")["items"]
    assert any(e.get("reason") == "Promoted" and f"{new} serves now, in place of {old}" in e.get("note", "")
               for e in events), [e.get("note") for e in events]

    # With upgrades off, a changed cluster config leaves the running cluster serving alone.
    service["spec"]["upgradeStrategy"] = {"type": "None"}
    service["spec"]["rayClusterConfig"] = head_cluster_spec("autumn")
    apply(kubectl, service)
    time.sleep(5)
    st = status(kube, SERVICES, "fruit")
    assert st["activeServiceStatus"]["rayClusterName"] == new and "pendingServiceStatus" not in st, st
    [running] = kube.list(CLUSTERS)["items"]
    assert running["metadata"]["name"] == new
    env = running["spec"]["headGroupSpec"]["template"]["spec"]["containers"][0]["env"]
    assert env == [{"name": "SEASON", "value": "summer"}], "the running cluster was not changed in place"
    kubectl("delete", "rayservice", "fruit", "--timeout=60s")
    wait_until(lambda: kube.get_or_none(f"{CLUSTERS}/{new}") is None, timeout=60,
               what="the service's cluster to be deleted")
