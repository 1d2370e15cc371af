"""A bare RayCluster annotated `ray.io/enable-serve-service=true` gets `<cluster>-serve-svc`,
as a RayService does: once Serve runs on it (deployed through the head's Serve API, as
`serve deploy` does), the Service leads to the Serve port of the pods whose proxy is up."""

import json
import urllib.request

from tests.k8s.fakekube.client import wait_until
from tests.k8s.test_operator import (  # noqa: F401 (fixtures)
    APPS_DIR, CLUSTERS, PODS, apply, cluster_manifest, free_port, operator, status, token,
)


def test_an_annotated_raycluster_gets_a_serve_service(operator, kube, kubectl):
    dashboard, serve_port = free_port(), free_port()
    manifest = cluster_manifest("served", workers=0, dashboard_port=dashboard)
    manifest["metadata"]["annotations"] = {"ray.io/enable-serve-service": "true"}
    manifest["spec"]["headGroupSpec"]["rayStartParams"]["num-cpus"] = "2"
    apply(kubectl, manifest)
    wait_until(lambda: status(kube, CLUSTERS, "served").get("state") == "ready", timeout=90,
               what="the cluster to be ready")
    ip = status(kube, CLUSTERS, "served")["head"]["podIP"]
    config = {"http_options": {"host": "0.0.0.0", "port": serve_port},
              "applications": [{"name": "fruit", "route_prefix": "/fruit", "import_path": "fruit:build",
                                "args": {"name": "mango"},
                                "runtime_env": {"env_vars": {"PYTHONPATH": str(APPS_DIR)}},
                                "deployments": [{"name": "Fruit", "user_config": {"price": 3}}]}]}
    request = urllib.request.Request(f"http://{ip}:{dashboard}/api/serve/applications/", method="PUT",
                                     data=json.dumps(config).encode(),
                                     headers={"Authorization": f"Bearer {token(kube, 'served')}",
                                              "Content-Type": "application/json"})
    urllib.request.urlopen(request, timeout=30).close()

    def served():
        svc = kube.get_or_none("/api/v1/namespaces/default/services/served-serve-svc")
        [head] = kube.list(PODS, labelSelector="ray.io/cluster=served,ray.io/node-type=head")["items"]
        return svc and head["metadata"]["labels"].get("ray.io/serve") == "true" and svc

    svc = wait_until(served, timeout=120, what="the Serve Service and the head pod serving")
    assert svc["spec"]["selector"] == {"ray.io/cluster": "served", "ray.io/serve": "true"}
    assert svc["spec"]["ports"][0]["port"] == serve_port
    assert svc["metadata"]["ownerReferences"][0]["kind"] == "RayCluster"

    def fruit():
        with urllib.request.urlopen(f"http://{ip}:{serve_port}/fruit", timeout=10) as r:
            return json.load(r)["fruit"]
    # The proxy is up before the application is.
    assert wait_until(fruit, timeout=120, what="the application to answer") == "mango"
    kubectl("delete", "raycluster", "served", "--wait=false")
    wait_until(lambda: kube.get_or_none("/api/v1/namespaces/default/services/served-serve-svc") is None,
               timeout=60, what="the Serve Service to go with its cluster")
