"""In-tree autoscaling end to end, on the fake API server with real oxray pods: tasks that
need what no node has wait, the operator adds worker pods of the group that has it (as many
as the waiting work needs, up to the group's max), the tasks run there, and once the new
nodes have been idle for the timeout the operator removes them."""

import json
import urllib.request

from tests.k8s.fakekube.client import wait_until
from tests.k8s.test_operator import (  # noqa: F401 (fixtures)
    CLUSTERS, PODS, apply, cluster_manifest, free_port, live_pods, operator, status, token,
)

DRIVER = """
import socket, oxray
oxray.init()

@oxray.remote(num_cpus=0, resources={"special": 1})
def where():
    import time
    time.sleep(2)
    return socket.gethostname()

print("ran on", sorted(oxray.get([where.remote() for _ in range(2)])))
"""


def head_api(kube, name, dashboard, path, body=None):
    ip = status(kube, CLUSTERS, name)["head"]["podIP"]
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(f"http://{ip}:{dashboard}{path}", data=data, method="POST" if data else "GET",
                                     headers={"Authorization": f"Bearer {token(kube, name)}",
                                              "Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=10) as r:
        return json.load(r)


def test_waiting_work_adds_worker_pods_that_go_once_idle(operator, kube, kubectl):
    try:
        scale_up_and_down(kube, kubectl)
    except (AssertionError, TimeoutError):
        print(open(operator["log"]).read()[-6000:])
        raise


def scale_up_and_down(kube, kubectl):
    dashboard = free_port()
    manifest = cluster_manifest("autoscaled", workers=0, dashboard_port=dashboard)
    manifest["spec"]["enableInTreeAutoscaling"] = True
    manifest["spec"]["autoscalerOptions"] = {"idleTimeoutSeconds": 4}
    group = manifest["spec"]["workerGroupSpecs"][0]
    group.update(groupName="special", replicas=0, minReplicas=0, maxReplicas=2, resources={"special": "1"})
    apply(kubectl, manifest)
    wait_until(lambda: status(kube, CLUSTERS, "autoscaled").get("state") == "ready", timeout=90,
               what="the cluster to be ready")
    assert live_pods(kube, "autoscaled", "worker") == []

    submitted = head_api(kube, "autoscaled", dashboard, "/api/jobs/",
                         {"entrypoint": f"python -c '{DRIVER}'"})
    job = submitted["submission_id"]

    def spec_replicas():
        return kube.get(f"{CLUSTERS}/autoscaled")["spec"]["workerGroupSpecs"][0].get("replicas")

    # Two tasks of one `special` each: two pods of the group (its max), none of another shape.
    wait_until(lambda: spec_replicas() == 2, timeout=60, what="the operator to ask for two special pods")
    wait_until(lambda: len(live_pods(kube, "autoscaled", "worker")) == 2, timeout=60, what="two worker pods")
    try:
        finished = wait_until(lambda: (j := head_api(kube, "autoscaled", dashboard, f"/api/jobs/{job}"))["status"]
                              in ("SUCCEEDED", "FAILED", "STOPPED") and j, timeout=120, what="the job to end")
    finally:
        logs = head_api(kube, "autoscaled", dashboard, f"/api/jobs/{job}/logs")["logs"]
    assert finished["status"] == "SUCCEEDED", (finished, logs)
    workers = live_pods(kube, "autoscaled", "worker")
    assert "ran on" in logs and any(w in logs for w in workers), (workers, logs)
    events = kube.list("/apis/events.k8s.io/v1/namespaces/default/events")["items"]
    assert any(e.get("reason") == "Autoscaled" and "special: 0 -> " in e.get("note", "") for e in events), events

    # Idle for the timeout, the pods go, and the group is back to its min.
    wait_until(lambda: live_pods(kube, "autoscaled", "worker") == [] and spec_replicas() == 0, timeout=60,
               what="the idle workers to be removed")
    kubectl("delete", "raycluster", "autoscaled", "--wait=false")
    wait_until(lambda: not kube.list(PODS, labelSelector="ray.io/cluster=autoscaled")["items"], timeout=60,
               what="the pods to go with their cluster")


def test_autoscaling_turned_on_and_off_reaches_a_live_head(operator, kube, kubectl):
    dashboard = free_port()
    manifest = cluster_manifest("toggled", workers=0, dashboard_port=dashboard)
    apply(kubectl, manifest)
    wait_until(lambda: status(kube, CLUSTERS, "toggled").get("state") == "ready", timeout=90,
               what="the cluster to be ready")
    [head] = live_pods(kube, "toggled", "head")

    def head_autoscaling():
        return head_api(kube, "toggled", dashboard, "/api/cluster_status")["data"]["autoscaling_enabled"]
    assert head_autoscaling() is False
    manifest["spec"]["enableInTreeAutoscaling"] = True
    apply(kubectl, manifest)
    wait_until(head_autoscaling, timeout=30, what="the head to autoscale")
    manifest["spec"]["enableInTreeAutoscaling"] = False
    apply(kubectl, manifest)
    wait_until(lambda: head_autoscaling() is False, timeout=60, what="the head to stop autoscaling")
    assert live_pods(kube, "toggled", "head") == [head], "the head pod is the same one"
    kubectl("delete", "raycluster", "toggled", "--wait=false")
