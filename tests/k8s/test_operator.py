"""`oxray operator` end to end: KubeRay-shaped resources applied with kubectl to the fake API
server become real oxray clusters, run by the process kubelet; jobs run to the end; pods
killed by Kubernetes are replaced; bad resources become conditions and events."""

import base64
import json
import os
import signal
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

from tests.k8s.conftest import REPO
from tests.k8s.fakekube.client import wait_until

OXRAY = os.environ.get("OXRAY_BIN") or str(REPO / "target" / "debug" / "oxray")
CLUSTERS = "/apis/oxray.io/v1/namespaces/default/rayclusters"
JOBS = "/apis/oxray.io/v1/namespaces/default/rayjobs"
PODS = "/api/v1/namespaces/default/pods"

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the process kubelet needs root (mount namespaces)")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_operator(log_path):
    """The operator as users run it, installing its own CRDs; ready once /healthz answers."""
    port = free_port()
    log = open(log_path, "a")
    proc = subprocess.Popen([OXRAY, "operator", "--install-crds", "--health-addr", f"127.0.0.1:{port}"],
                            stdout=log, stderr=subprocess.STDOUT, env=dict(os.environ, OXRAY_LOG="info"))
    log.close()
    url = f"http://127.0.0.1:{port}"

    def healthy():
        with urllib.request.urlopen(f"{url}/healthz", timeout=1) as r:
            return r.status == 200

    wait_until(healthy, timeout=30, what="the operator's /healthz")
    return proc


def stop_operator(proc):
    proc.send_signal(signal.SIGTERM)
    try:
        return proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise


@pytest.fixture
def operator(kubeconfig, kubelet, k8s_tmp):
    state = {"proc": start_operator(k8s_tmp / "operator.log"), "log": k8s_tmp / "operator.log"}
    yield state
    stop_operator(state["proc"])


def cluster_manifest(name, workers=2, gcs_port=None, dashboard_port=None, extra_head_params=None):
    """A RayCluster as KubeRay's sample writes it, with the apiVersion and image changed. Ports
    are free ones: the fake kubelet's pods share this machine's ports."""
    params = {"dashboard-host": "0.0.0.0", "num-cpus": "1", "dashboard-agent-listen-port": "52365",
              "port": str(gcs_port or free_port()), "dashboard-port": str(dashboard_port or free_port())}
    params.update(extra_head_params or {})
    container = {"image": "docker.io/oxray/oxray:0.1.0",
                 "resources": {"limits": {"cpu": "1", "memory": "1Gi"}, "requests": {"cpu": "500m", "memory": "1Gi"}}}
    return {
        "apiVersion": "oxray.io/v1",
        "kind": "RayCluster",
        "metadata": {"name": name},
        "spec": {
            "rayVersion": "2.60.0",
            "headGroupSpec": {
                "rayStartParams": params,
                "template": {"spec": {"terminationGracePeriodSeconds": 2,
                                      "containers": [dict(container, name="ray-head")]}},
            },
            "workerGroupSpecs": [{
                "groupName": "workergroup",
                "replicas": workers, "minReplicas": 0, "maxReplicas": 5,
                "rayStartParams": {"num-cpus": "1"},
                "template": {"spec": {"terminationGracePeriodSeconds": 2,
                                      "containers": [dict(container, name="ray-worker")]}},
            }],
        },
    }


def apply(kubectl, manifest):
    return kubectl("apply", "-f", "-", input=json.dumps(manifest))


def status(kube, path, name):
    return kube.get(f"{path}/{name}").get("status") or {}


def token(kube, cluster):
    secret = kube.get(f"/api/v1/namespaces/default/secrets/{cluster}-token")
    if "data" in secret:
        return base64.b64decode(secret["data"]["token"]).decode()
    return secret["stringData"]["token"]


def head_nodes(kube, name, dashboard_port):
    """The alive nodes by name, as the cluster's head reports them."""
    ip = status(kube, CLUSTERS, name)["head"]["podIP"]
    request = urllib.request.Request(f"http://{ip}:{dashboard_port}/api/cluster_status",
                                     headers={"Authorization": f"Bearer {token(kube, name)}"})
    with urllib.request.urlopen(request, timeout=5) as r:
        body = json.load(r)
    return sorted(n["node_name"] for n in body["data"]["cluster_status"]["alive"])


def live_pods(kube, cluster, node_type=None):
    selector = f"ray.io/cluster={cluster}" + (f",ray.io/node-type={node_type}" if node_type else "")
    pods = kube.list(PODS, labelSelector=selector)["items"]
    return sorted(p["metadata"]["name"] for p in pods if not p["metadata"].get("deletionTimestamp"))


def ready(kube, name, workers):
    s = status(kube, CLUSTERS, name)
    return s.get("state") == "ready" and s.get("readyWorkerReplicas") == workers and s


def test_a_raycluster_becomes_an_oxray_cluster_that_heals_and_scales(operator, kube, kubectl):
    dashboard = free_port()
    apply(kubectl, cluster_manifest("raycluster-oxray", workers=2, dashboard_port=dashboard))
    s = wait_until(lambda: ready(kube, "raycluster-oxray", 2), timeout=90, what="the cluster to be ready")
    assert s["desiredWorkerReplicas"] == 2 and s["desiredCPU"] == "1500m" and s["desiredMemory"] == "3Gi"
    assert {c["type"]: c["status"] for c in s["conditions"]}["RayClusterProvisioned"] == "True"
    assert s["head"]["serviceName"] == "raycluster-oxray-head-svc"

    # Every pod is a node of one real cluster, named after its pod.
    pods = live_pods(kube, "raycluster-oxray")
    wait_until(lambda: head_nodes(kube, "raycluster-oxray", dashboard) == pods, timeout=30,
               what="the head to list every pod as a node")
    service = kube.get("/api/v1/namespaces/default/services/raycluster-oxray-head-svc")
    assert service["spec"]["clusterIP"] == "None"
    assert {p["name"] for p in service["spec"]["ports"]} >= {"gcs-server", "dashboard", "metrics"}
    table = kubectl("get", "rayclusters").stdout
    assert "raycluster-oxray" in table and "ready" in table, table

    # A worker pod deleted by Kubernetes is replaced, and the new one joins.
    victim = live_pods(kube, "raycluster-oxray", "worker")[0]
    kubectl("delete", "pod", victim, "--wait=false")
    wait_until(lambda: victim not in live_pods(kube, "raycluster-oxray")
               and len(live_pods(kube, "raycluster-oxray", "worker")) == 2
               and ready(kube, "raycluster-oxray", 2), timeout=90, what="a replacement worker")
    pods = live_pods(kube, "raycluster-oxray")
    wait_until(lambda: set(pods) <= set(head_nodes(kube, "raycluster-oxray", dashboard)), timeout=60,
               what="the replacement to join")

    # Scaling down removes an idle worker; the cluster stays ready.
    kubectl("patch", "raycluster", "raycluster-oxray", "--type=json",
            "-p", '[{"op": "replace", "path": "/spec/workerGroupSpecs/0/replicas", "value": 1}]')
    wait_until(lambda: len(live_pods(kube, "raycluster-oxray", "worker")) == 1
               and ready(kube, "raycluster-oxray", 1), timeout=60, what="scale-down to one worker")

    # Deleting the resource deletes what it made.
    kubectl("delete", "raycluster", "raycluster-oxray", "--wait=false")
    try:
        wait_until(lambda: not kube.list(PODS, labelSelector="ray.io/cluster=raycluster-oxray")["items"],
                   timeout=60, what="the pods to go with their cluster")
    except TimeoutError:
        for p in kube.list(PODS, labelSelector="ray.io/cluster=raycluster-oxray")["items"]:
            print("LEFT", p["metadata"], p.get("status", {}).get("phase"))
        print(Path(operator["log"]).read_text()[-5000:])
        raise
    assert kube.get_or_none("/api/v1/namespaces/default/services/raycluster-oxray-head-svc") is None
    assert operator["proc"].poll() is None


def test_a_rayjob_runs_to_success_and_its_cluster_is_deleted(operator, kube, kubectl, kubelet):
    cluster = cluster_manifest("unused", workers=0)["spec"]
    job = {
        "apiVersion": "oxray.io/v1",
        "kind": "RayJob",
        "metadata": {"name": "rayjob-sample"},
        "spec": {
            "entrypoint": "python -c \"import os; print('job says', os.environ['GREETING'])\"",
            "runtimeEnvYAML": "env_vars:\n  GREETING: hello\n",
            "shutdownAfterJobFinishes": True,
            "ttlSecondsAfterFinished": 0,
            "rayClusterSpec": cluster,
        },
    }
    apply(kubectl, job)
    s = wait_until(lambda: (st := status(kube, JOBS, "rayjob-sample")).get("jobDeploymentStatus") in ("Complete", "Failed")
                   and st, timeout=120, what="the RayJob to finish")
    assert (s["jobStatus"], s["jobDeploymentStatus"], s["succeeded"]) == ("SUCCEEDED", "Complete", 1), s
    assert s["jobId"].startswith("rayjob-sample-") and s["rayClusterName"].startswith("rayjob-sample-")
    assert s["dashboardURL"].startswith(f"{s['rayClusterName']}-head-svc.default.svc.cluster.local:")
    # With shutdownAfterJobFinishes and no TTL, the cluster and its pods go.
    wait_until(lambda: kube.get_or_none(f"{CLUSTERS}/{s['rayClusterName']}") is None, timeout=30,
               what="the job's cluster to be deleted")
    wait_until(lambda: not kube.list(PODS, labelSelector=f"ray.io/cluster={s['rayClusterName']}")["items"],
               timeout=60, what="the job's pods to go")
    table = kubectl("get", "rayjobs").stdout
    assert "SUCCEEDED" in table and "Complete" in table, table
    # Deleting the RayJob is not held up by its finalizer once the job is done.
    kubectl("delete", "rayjob", "rayjob-sample", "--timeout=30s")
    assert kube.get_or_none(f"{JOBS}/rayjob-sample") is None


def test_bad_resources_are_refused_or_reported_never_crash_the_operator(operator, kube, kubectl):
    bad = cluster_manifest("bad-replicas")
    bad["spec"]["workerGroupSpecs"][0]["replicas"] = -1
    done = kubectl("apply", "-f", "-", input=json.dumps(bad), check=False)
    assert done.returncode != 0 and "replicas" in done.stderr, done.stderr
    bad = cluster_manifest("bad-type")
    bad["spec"]["headGroupSpec"]["serviceType"] = "Bogus"
    done = kubectl("apply", "-f", "-", input=json.dumps(bad), check=False)
    assert done.returncode != 0 and "serviceType" in done.stderr, done.stderr

    # Valid for the schema, wrong for oxray: a condition and a warning event say what.
    typo = cluster_manifest("typo", extra_head_params={"num-cpu": "2"})
    apply(kubectl, typo)
    s = wait_until(lambda: status(kube, CLUSTERS, "typo").get("conditions") and status(kube, CLUSTERS, "typo"),
                   timeout=30, what="the typo cluster's status")
    failure = {c["type"]: c for c in s["conditions"]}["ReplicaFailure"]
    assert failure["status"] == "True" and "num-cpu" in failure["message"], failure
    assert live_pods(kube, "typo") == []
    events = kube.list("/apis/events.k8s.io/v1/namespaces/default/events")["items"]
    assert any(e.get("reason") == "InvalidSpec" and "num-cpu" in e.get("note", "") for e in events), events
    # Redis is refused the same way: the head keeps its own state.
    redis = cluster_manifest("with-redis")
    redis["spec"]["gcsFaultToleranceOptions"] = {"redisAddress": "redis:6379"}
    apply(kubectl, redis)
    wait_until(lambda: "Redis" in str(status(kube, CLUSTERS, "with-redis").get("reason")), timeout=30,
               what="the Redis cluster's reason")
    assert operator["proc"].poll() is None
    assert "panicked" not in Path(operator["log"]).read_text()


def test_a_head_on_a_claim_keeps_its_jobs_across_a_pod_restart(operator, kube, kubectl):
    dashboard = free_port()
    manifest = cluster_manifest("durable", workers=1, dashboard_port=dashboard)
    manifest["spec"]["gcsFaultToleranceOptions"] = {"storage": {"size": "1Gi"}}
    apply(kubectl, manifest)
    wait_until(lambda: ready(kube, "durable", 1), timeout=90, what="the cluster to be ready")
    claim = kube.get("/api/v1/namespaces/default/persistentvolumeclaims/durable-head-storage")
    assert claim["spec"]["resources"]["requests"]["storage"] == "1Gi"

    def api(method, path, body=None):
        ip = status(kube, CLUSTERS, "durable")["head"]["podIP"]
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(f"http://{ip}:{dashboard}{path}", data=data, method=method,
                                         headers={"Authorization": f"Bearer {token(kube, 'durable')}",
                                                  "Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=5) as r:
            return json.load(r)

    api("POST", "/api/jobs/", {"entrypoint": "python -c \"print('kept')\"", "submission_id": "kept-job"})
    wait_until(lambda: api("GET", "/api/jobs/kept-job")["status"] == "SUCCEEDED", timeout=60, what="the job")

    old_ip = status(kube, CLUSTERS, "durable")["head"]["podIP"]
    kubectl("delete", "pod", "durable-head", "--wait=false")
    wait_until(lambda: status(kube, CLUSTERS, "durable").get("head", {}).get("podIP") not in (None, old_ip)
               and ready(kube, "durable", 1), timeout=90, what="a new head pod")
    # The new head read the same database: the job is there, and the worker joined it again.
    wait_until(lambda: api("GET", "/api/jobs/kept-job")["status"] == "SUCCEEDED", timeout=30,
               what="the job on the new head")
    worker = live_pods(kube, "durable", "worker")[0]
    wait_until(lambda: worker in head_nodes(kube, "durable", dashboard), timeout=60, what="the worker to rejoin")


def test_the_cluster_chart_installs_a_working_cluster(operator, kube, kubectl):
    helm = REPO / ".tools/helm4/helm"
    if not helm.exists():
        pytest.fail("helm is cached by `make tools` (make test-k8s runs it)")
    gcs, dashboard = free_port(), free_port()
    rendered = subprocess.run(
        [str(helm), "template", "raycluster", str(REPO / "deploy/helm/oxray-cluster"),
         "--set", f"head.rayStartParams.port={gcs}", "--set", f"head.rayStartParams.dashboard-port={dashboard}",
         "--set", "head.resources.limits.memory=1Gi", "--set", "head.resources.requests.memory=1Gi"],
        capture_output=True, text=True, check=True).stdout
    kubectl("apply", "-f", "-", input=rendered)
    wait_until(lambda: ready(kube, "raycluster-oxray", 1), timeout=90, what="the chart's cluster to be ready")
    wait_until(lambda: len(head_nodes(kube, "raycluster-oxray", dashboard)) == 2, timeout=30,
               what="both nodes in the head's view")


def test_a_restarted_operator_changes_nothing_that_is_right(operator, kube, kubectl):
    dashboard = free_port()
    apply(kubectl, cluster_manifest("steady", workers=1, dashboard_port=dashboard))
    wait_until(lambda: ready(kube, "steady", 1), timeout=90, what="the cluster to be ready")
    pods = {p["metadata"]["name"]: p["metadata"]["uid"] for p in kube.list(PODS, labelSelector="ray.io/cluster=steady")["items"]}
    before = kube.get(f"{CLUSTERS}/steady")
    assert stop_operator(operator["proc"]) == 0
    operator["proc"] = start_operator(operator["log"])
    # Every object replayed to the new process: the pods, the service, the status stay.
    time.sleep(3)
    after = {p["metadata"]["name"]: p["metadata"]["uid"] for p in kube.list(PODS, labelSelector="ray.io/cluster=steady")["items"]}
    assert after == pods
    assert kube.get(f"{CLUSTERS}/steady")["status"] == before["status"]
    assert len(head_nodes(kube, "steady", dashboard)) == 2


SERVICES = "/apis/oxray.io/v1/namespaces/default/rayservices"
APPS_DIR = Path(__file__).resolve().parent / "apps"


def serve_config(serve_port, price):
    return (f"http_options: {{host: 0.0.0.0, port: {serve_port}}}\n"
            "applications:\n"
            "  - name: fruit\n"
            "    route_prefix: /fruit\n"
            "    import_path: fruit:build\n"
            "    args: {name: mango}\n"
            f"    runtime_env: {{env_vars: {{PYTHONPATH: {APPS_DIR}}}}}\n"
            "    deployments:\n"
            "      - name: Fruit\n"
            f"        user_config: {{price: {price}}}\n")


def serving(operator, kube, kubectl, service):
    """Applies a RayService; its status once it serves (the operator's log when it does not)."""
    apply(kubectl, service)
    name = service["metadata"]["name"]
    try:
        return wait_until(lambda: (st := status(kube, SERVICES, name)).get("serviceStatus") == "Running" and st,
                          timeout=180, what="the RayService to serve")
    except TimeoutError:
        pytest.fail(f"the RayService did not serve: {status(kube, SERVICES, name)}\n"
                    f"operator log: {operator['log'].read_text()[-3000:]}")


def test_a_rayservice_serves_its_config_and_applies_changes_in_place(operator, kube, kubectl):
    serve_port = free_port()
    cluster = cluster_manifest("unused", workers=0)["spec"]
    cluster["headGroupSpec"]["rayStartParams"]["num-cpus"] = "2"
    service = {"apiVersion": "oxray.io/v1", "kind": "RayService", "metadata": {"name": "fruit"},
               "spec": {"serveConfigV2": serve_config(serve_port, 3), "rayClusterConfig": cluster}}
    s = serving(operator, kube, kubectl, service)
    apps = s["activeServiceStatus"]["applicationStatuses"]
    assert apps["fruit"]["status"] == "RUNNING", s
    assert apps["fruit"]["serveDeploymentStatuses"]["Fruit"]["status"] == "HEALTHY", s
    assert s["numServeEndpoints"] == 1 and s["conditions"][0]["reason"] == "NonZeroServeEndpoints"
    svc = kube.get("/api/v1/namespaces/default/services/fruit-serve-svc")
    assert svc["spec"]["ports"][0]["port"] == serve_port
    # The cluster is the service's own, under a name of KubeRay's shape.
    cluster_name = s["activeServiceStatus"]["rayClusterName"]
    assert cluster_name.startswith("fruit-raycluster-") and "pendingServiceStatus" not in s, s
    # The Serve Service leads to the pods whose proxy is up, labelled as KubeRay labels them.
    assert svc["spec"]["selector"] == {"ray.io/cluster": cluster_name, "ray.io/serve": "true"}
    head_svc = kube.get("/api/v1/namespaces/default/services/fruit-head-svc")
    assert head_svc["spec"]["selector"] == {"ray.io/cluster": cluster_name, "ray.io/node-type": "head"}
    [head_pod] = kube.list(PODS, labelSelector=f"ray.io/cluster={cluster_name},ray.io/node-type=head")["items"]
    assert head_pod["metadata"]["labels"]["ray.io/serve"] == "true"
    ip = status(kube, CLUSTERS, cluster_name)["head"]["podIP"]

    def fruit():
        with urllib.request.urlopen(f"http://{ip}:{serve_port}/fruit", timeout=5) as r:
            return json.load(r)
    first = fruit()
    assert (first["fruit"], first["price"]) == ("mango", 3)

    # A new price is a user_config change: applied in place, the same replica serves it.
    service["spec"]["serveConfigV2"] = serve_config(serve_port, 5)
    apply(kubectl, service)
    wait_until(lambda: fruit()["price"] == 5, timeout=60, what="the new price")
    assert fruit()["pid"] == first["pid"]

    # The head pod left out of the Serve Service: no endpoint is left, and it says so.
    service["spec"]["excludeHeadPodFromServeSvc"] = True
    apply(kubectl, service)
    out = wait_until(lambda: (st := status(kube, SERVICES, "fruit"))["numServeEndpoints"] == 0 and st, timeout=30,
                     what="the head pod to leave the Serve Service")
    assert out["conditions"][0]["reason"] == "ZeroServeEndpoints"
    assert kube.get(f"/api/v1/namespaces/default/pods/{head_pod['metadata']['name']}")["metadata"]["labels"][
        "ray.io/serve"] == "false"
    service["spec"]["excludeHeadPodFromServeSvc"] = False
    apply(kubectl, service)
    wait_until(lambda: status(kube, SERVICES, "fruit")["numServeEndpoints"] == 1, timeout=30,
               what="the head pod to serve again")

    # A config the head refuses is reported, and the running app keeps serving.
    service["spec"]["serveConfigV2"] = serve_config(serve_port, 5).replace("import_path: fruit:build",
                                                                           "import_path: a:b:c")
    apply(kubectl, service)
    bad = wait_until(lambda: (st := status(kube, SERVICES, "fruit"))["conditions"][0]["reason"] == "InvalidServeConfig"
                     and st, timeout=30, what="the refusal to be reported")
    assert "at most one colon" in bad["conditions"][0]["message"]
    assert fruit()["price"] == 5
    kubectl("delete", "rayservice", "fruit", "--timeout=60s")
    wait_until(lambda: kube.get_or_none(f"{CLUSTERS}/{cluster_name}") is None, timeout=60,
               what="the service's cluster to be deleted")
