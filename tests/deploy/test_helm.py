"""The Helm charts under deploy/helm, rendered with `helm template` and checked on the parsed
YAML: names, the operator's contract (args, RBAC, security), how values reach the RayCluster,
and that bad values are refused. Each test runs once with Helm 4 and once with Helm 3, the
binaries that `make tools` caches in .tools/.

Run: make test-deploy, or .venv/bin/python -m pytest tests/deploy -q after make tools.
OXRAY_TOOLS_DIR points at another cache, OXRAY_CRD_FILE at another CRD file.
"""

import json
import os
import re
import subprocess
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
CHARTS = REPO / "deploy" / "helm"
CI_VALUES = CHARTS / "ci"
TOOLS = Path(os.environ.get("OXRAY_TOOLS_DIR", REPO / ".tools"))
CRD_FILE = Path(os.environ.get("OXRAY_CRD_FILE", CHARTS / "oxray-operator" / "crds" / "oxray-crds.yaml"))
HELMS = {"helm4": TOOLS / "helm4" / "helm", "helm3": TOOLS / "helm3" / "helm"}
# The release each chart is installed as in the README.
RELEASES = {
    "oxray-operator": ("oxray-operator", "oxray-system"),
    "oxray-cluster": ("raycluster", "default"),
}


class Helm:
    def __init__(self, binary: Path):
        self.binary = binary

    def run(self, chart, *args, release=None, namespace=None):
        default_release, default_namespace = RELEASES[chart]
        cmd = [
            str(self.binary),
            "template",
            release or default_release,
            str(CHARTS / chart),
            "--namespace",
            namespace or default_namespace,
            *args,
        ]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=60)

    def render(self, chart, *args, **kwargs):
        """The chart's documents, each a dict; fails the test when helm refuses."""
        done = self.run(chart, *args, **kwargs)
        assert done.returncode == 0, f"helm template {chart} {args} failed:\n{done.stderr}"
        return [doc for doc in yaml.safe_load_all(done.stdout) if doc]

    def refuse(self, chart, *args, **kwargs):
        """helm's error message; fails the test when helm renders."""
        done = self.run(chart, *args, **kwargs)
        assert done.returncode != 0, f"helm template {chart} {args} rendered:\n{done.stdout}"
        return done.stderr


@pytest.fixture(scope="session", params=sorted(HELMS))
def helm(request):
    binary = HELMS[request.param]
    if not os.access(binary, os.X_OK):
        pytest.fail(f"{binary} is missing: run make tools")
    return Helm(binary)


def by_kind(docs, kind):
    return [d for d in docs if d["kind"] == kind]


def one(docs, kind):
    found = by_kind(docs, kind)
    assert len(found) == 1, f"want one {kind}, got {[d['metadata']['name'] for d in found]}"
    return found[0]




CHART_LABELS = (
    "helm.sh/chart",
    "app.kubernetes.io/name",
    "app.kubernetes.io/instance",
    "app.kubernetes.io/version",
    "app.kubernetes.io/managed-by",
)


def values_files(chart):
    return sorted(CI_VALUES.glob(f"{chart}-*.yaml"))


def chart_meta(chart):
    return yaml.safe_load((CHARTS / chart / "Chart.yaml").read_text())


def workspace_version():
    text = (REPO / "Cargo.toml").read_text()
    section = text.split("[workspace.package]", 1)[1]
    return re.search(r'^version\s*=\s*"([^"]+)"', section, re.M).group(1)


def head_container(cluster):
    return cluster["spec"]["headGroupSpec"]["template"]["spec"]["containers"][0]


def worker_groups(cluster):
    return {g["groupName"]: g for g in cluster["spec"].get("workerGroupSpecs", [])}


def container_args(docs):
    return one(docs, "Deployment")["spec"]["template"]["spec"]["containers"][0]["args"]


# --- both charts ---------------------------------------------------------------------------


@pytest.mark.parametrize("chart", ["oxray-operator", "oxray-cluster"])
def test_chart_versions_follow_the_workspace(chart):
    meta = chart_meta(chart)
    assert meta["apiVersion"] == "v2"
    assert meta["name"] == chart
    assert meta["version"] == meta["appVersion"] == workspace_version()


@pytest.mark.parametrize(
    "chart,values",
    [(c, v) for c in ("oxray-operator", "oxray-cluster") for v in [None, *values_files(c)]],
    ids=lambda v: v.name if hasattr(v, "name") else v,
)
def test_every_document_has_the_chart_labels(helm, chart, values):
    docs = helm.render(chart, *(["-f", str(values)] if values else []))
    assert docs
    version = chart_meta(chart)["version"]
    for doc in docs:
        labels = doc["metadata"].get("labels", {})
        missing = [k for k in CHART_LABELS if k not in labels]
        assert not missing, f"{doc['kind']} {doc['metadata']['name']} lacks {missing}"
        assert labels["helm.sh/chart"] == f"{chart}-{version}"
        assert labels["app.kubernetes.io/managed-by"] == "Helm"


# --- oxray-cluster -------------------------------------------------------------------------


def test_cluster_is_one_raycluster_named_like_kuberays(helm):
    docs = helm.render("oxray-cluster")
    assert [d["kind"] for d in docs] == ["RayCluster"]
    cluster = docs[0]
    assert cluster["apiVersion"] == "oxray.io/v1"
    assert cluster["metadata"]["name"] == "raycluster-oxray"


def test_cluster_names_follow_the_overrides(helm):
    name = lambda docs: docs[0]["metadata"]["name"]  # noqa: E731
    assert name(helm.render("oxray-cluster", release="oxray")) == "oxray"
    assert name(helm.render("oxray-cluster", "--set", "nameOverride=")) == "raycluster-oxray-cluster"
    assert name(helm.render("oxray-cluster", "--set", "fullnameOverride=analytics")) == "analytics"
    # Room for the operator's "-head-svc" within a Service name's 63 characters.
    long = helm.render("oxray-cluster", "--set", "fullnameOverride=" + "a" * 80)
    assert len(name(long) + "-head-svc") <= 63


def test_head_pod_template(helm):
    cluster = one(helm.render("oxray-cluster"), "RayCluster")
    head = cluster["spec"]["headGroupSpec"]
    assert head["serviceType"] == "ClusterIP"
    assert head["rayStartParams"] == {}
    container = head_container(cluster)
    assert container["name"] == "ray-head"
    assert container["image"] == "docker.io/oxray/oxray:" + chart_meta("oxray-cluster")["appVersion"]
    assert container["imagePullPolicy"] == "IfNotPresent"
    assert "command" not in container and "args" not in container
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"gcs-server": 6379, "dashboard": 8265, "client": 10001, "serve": 8000}
    limits = {"cpu": "1", "memory": "2Gi"}
    assert container["resources"] == {"limits": limits, "requests": limits}
    assert "gcsFaultToleranceOptions" not in cluster["spec"]
    assert "enableInTreeAutoscaling" not in cluster["spec"]


def test_worker_group_defaults(helm):
    cluster = one(helm.render("oxray-cluster"), "RayCluster")
    groups = worker_groups(cluster)
    assert list(groups) == ["workergroup"]
    group = groups["workergroup"]
    assert (group["replicas"], group["minReplicas"], group["maxReplicas"]) == (1, 1, 5)
    containers = group["template"]["spec"]["containers"]
    assert containers[0]["name"] == "ray-worker"
    assert "command" not in containers[0] and "args" not in containers[0]


@pytest.mark.parametrize(
    "args,want",
    [
        ([], "ClusterIP"),
        (["--set", "service.type=NodePort"], "NodePort"),
        (["--set", "service.type=LoadBalancer"], "LoadBalancer"),
        (["--set", "service.type=NodePort", "--set", "head.serviceType=LoadBalancer"], "LoadBalancer"),
    ],
)
def test_service_type_passes_through(helm, args, want):
    cluster = one(helm.render("oxray-cluster", *args), "RayCluster")
    assert cluster["spec"]["headGroupSpec"]["serviceType"] == want


def test_persistence_becomes_gcs_fault_tolerance_storage(helm):
    cluster = one(
        helm.render(
            "oxray-cluster",
            "--set", "head.persistence.enabled=true",
            "--set", "head.persistence.size=5Gi",
            "--set", "head.persistence.storageClassName=fast",
            "--set", "head.persistence.deletionPolicy=Retain",
        ),
        "RayCluster",
    )
    assert cluster["spec"]["gcsFaultToleranceOptions"] == {
        "storage": {
            "size": "5Gi",
            "storageClassName": "fast",
            "accessModes": ["ReadWriteOnce"],
            "deletionPolicy": "Retain",
        }
    }


def test_persistence_on_an_existing_claim(helm):
    cluster = one(
        helm.render(
            "oxray-cluster",
            "--set", "head.persistence.enabled=true",
            "--set", "head.persistence.existingClaim=head-db",
        ),
        "RayCluster",
    )
    assert cluster["spec"]["gcsFaultToleranceOptions"] == {"storage": {"claimName": "head-db"}}


def test_autoscaling(helm):
    cluster = one(
        helm.render(
            "oxray-cluster",
            "--set", "head.enableInTreeAutoscaling=true",
            "--set", "head.autoscalerOptions.idleTimeoutSeconds=90",
        ),
        "RayCluster",
    )
    assert cluster["spec"]["enableInTreeAutoscaling"] is True
    assert cluster["spec"]["autoscalerOptions"] == {"idleTimeoutSeconds": 90}


def test_disabled_worker_groups_vanish(helm):
    # values.yaml ships an additional group that is disabled.
    assert list(worker_groups(one(helm.render("oxray-cluster"), "RayCluster"))) == ["workergroup"]
    enabled = one(
        helm.render("oxray-cluster", "--set", "additionalWorkerGroups.small-group.disabled=false"),
        "RayCluster",
    )
    assert list(worker_groups(enabled)) == ["workergroup", "small-group"]
    small = worker_groups(enabled)["small-group"]
    assert (small["replicas"], small["minReplicas"], small["maxReplicas"]) == (0, 0, 3)
    assert small["template"]["spec"]["containers"][0]["name"] == "ray-worker"

    head_only = one(helm.render("oxray-cluster", "--set", "worker.disabled=true"), "RayCluster")
    assert "workerGroupSpecs" not in head_only["spec"]


def test_full_values_file(helm):
    cluster = one(helm.render("oxray-cluster", "-f", str(CI_VALUES / "oxray-cluster-full.yaml")), "RayCluster")
    spec = cluster["spec"]
    assert spec["headGroupSpec"]["serviceType"] == "NodePort"
    assert spec["gcsFaultToleranceOptions"]["storage"]["size"] == "5Gi"
    assert spec["enableInTreeAutoscaling"] is True
    assert spec["autoscalerOptions"]["upscalingMode"] == "Conservative"
    # Numbers in values files become the strings the CRD wants.
    assert spec["headGroupSpec"]["rayStartParams"] == {"num-cpus": "0", "dashboard-host": "0.0.0.0"}
    groups = worker_groups(cluster)
    assert list(groups) == ["workergroup", "gpu"]
    assert groups["workergroup"]["idleTimeoutSeconds"] == 300
    gpu = groups["gpu"]["template"]["spec"]
    assert gpu["containers"][0]["image"] == "docker.io/oxray/oxray:0.1.0-cuda"
    assert gpu["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == 1
    # The oxray container stays first with sidecars, and common env comes before the group's.
    head_pod = spec["headGroupSpec"]["template"]["spec"]
    assert [c["name"] for c in head_pod["containers"]] == ["ray-head", "log-shipper"]
    assert [e["name"] for e in head_pod["containers"][0]["env"]] == ["TZ", "HEAD_ONLY"]
    assert head_pod["imagePullSecrets"] == [{"name": "registry-credentials"}]
    assert cluster["metadata"]["labels"]["team"] == "research"
    assert spec["headGroupSpec"]["template"]["metadata"]["labels"]["role"] == "head"


def test_ray_start_params_are_strings(helm):
    cluster = one(
        helm.render(
            "oxray-cluster",
            "--set", "head.rayStartParams.num-cpus=0",
            "--set", "worker.rayStartParams.num-gpus=2",
            "--set", "worker.rayStartParams.block=true",
        ),
        "RayCluster",
    )
    assert cluster["spec"]["headGroupSpec"]["rayStartParams"] == {"num-cpus": "0"}
    assert worker_groups(cluster)["workergroup"]["rayStartParams"] == {"num-gpus": "2", "block": "true"}


@pytest.mark.parametrize(
    "args,message",
    [
        (["--set", "service.type=Bogus"], "service"),
        (["--set", "head.serviceType=Bogus"], "serviceType"),
        (["--set", "worker.replicas=-1"], "replicas"),
        (["--set", "worker.maxReplicas=-3"], "maxReplicas"),
        (["--set", "additionalWorkerGroups.gpu.replicas=-1"], "replicas"),
        (["--set", "additionalWorkerGroups.GPU.replicas=1"], "GPU"),
        (["--set", "worker.groupName=Worker_Group"], "groupName"),
        (["--set", "head.persistence.size=lots"], "size"),
        (["--set", "head.persistence.deletionPolicy=Sometimes"], "deletionPolicy"),
        (["--set", "head.autoscalerOptions.upscalingMode=Wild"], "upscalingMode"),
        (["--set", "head.resorces.limits.cpu=1"], "resorces"),
        (["--set", "worker.minReplicas=6"], "minReplicas (6) is above maxReplicas (5)"),
        (["--set", "worker.groupName=gpu", "--set", "additionalWorkerGroups.gpu.replicas=1"], "given twice"),
        (["--set", "head.sidecarContainers[0].name=ray-head"], "sidecarContainers"),
    ],
)
def test_cluster_refuses_bad_values(helm, args, message):
    assert message in helm.refuse("oxray-cluster", *args)


def test_crd_schema_refuses_what_the_values_schema_refuses(helm, tmp_path):
    """Second line of defence: a RayCluster rendered past the values schema still fails the
    CRD's own schema, as the API server would refuse it."""
    if not CRD_FILE.exists():
        pytest.skip(f"{CRD_FILE} is generated by `oxray operator crd`")
    python, check = TOOLS / "venv/bin/python", TOOLS / "venv/bin/check-jsonschema"
    schema = tmp_path / "raycluster.schema.json"
    subprocess.run(
        [python, CHARTS / "ci/manifests.py", "schema", CRD_FILE, "RayCluster", schema], check=True
    )
    good = one(helm.render("oxray-cluster"), "RayCluster")
    (tmp_path / "good.json").write_text(json.dumps(good))
    bad = one(
        helm.render(
            "oxray-cluster",
            "--skip-schema-validation",
            "--set", "service.type=Bogus",
            "--set", "worker.replicas=-1",
        ),
        "RayCluster",
    )
    (tmp_path / "bad.json").write_text(json.dumps(bad))
    ok = subprocess.run([check, "--schemafile", schema, tmp_path / "good.json"], capture_output=True, text=True)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    refused = subprocess.run([check, "--schemafile", schema, tmp_path / "bad.json"], capture_output=True, text=True)
    assert refused.returncode != 0
    assert "Bogus" in refused.stdout and "-1" in refused.stdout


# --- oxray-operator ------------------------------------------------------------------------


def test_operator_objects(helm):
    docs = helm.render("oxray-operator")
    kinds = sorted(d["kind"] for d in docs)
    assert kinds == sorted(["ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Deployment", "Service"])
    for doc in docs:
        if doc["kind"] not in ("ClusterRole", "ClusterRoleBinding"):
            assert doc["metadata"]["namespace"] == "oxray-system"


def test_operator_container(helm):
    deployment = one(helm.render("oxray-operator"), "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert container["image"] == "docker.io/oxray/oxray:" + chart_meta("oxray-operator")["appVersion"]
    assert container["command"] == ["oxray", "operator"]
    assert container["args"] == ["--health-addr", "0.0.0.0:8080", "--leader-elect"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["RUST_LOG"] == env["OXRAY_LOG"] == "info"
    # The lease goes in the operator's own namespace, which it learns from POD_NAMESPACE.
    namespace = next(e for e in container["env"] if e["name"] == "POD_NAMESPACE")
    assert namespace["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.namespace"}}
    assert container["ports"] == [{"name": "http", "containerPort": 8080, "protocol": "TCP"}]
    for probe in ("livenessProbe", "readinessProbe"):
        assert container[probe]["httpGet"] == {"path": "/healthz", "port": "http"}
    assert container["resources"] == {"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"memory": "512Mi"}}
    assert pod["serviceAccountName"] == "oxray-operator"
    assert deployment["spec"]["replicas"] == 1
    # The selector picks the pods, and the labels it uses never change across upgrades.
    selector = deployment["spec"]["selector"]["matchLabels"]
    assert set(selector) == {"app.kubernetes.io/name", "app.kubernetes.io/instance"}
    assert selector.items() <= deployment["spec"]["template"]["metadata"]["labels"].items()


def test_operator_security_context(helm):
    pod = one(helm.render("oxray-operator"), "Deployment")["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] == 1000
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    sc = pod["containers"][0]["securityContext"]
    assert sc["runAsNonRoot"] is True and sc["runAsUser"] == 1000
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"] == {"drop": ["ALL"]}
    assert sc["seccompProfile"] == {"type": "RuntimeDefault"}


@pytest.mark.parametrize(
    "args,want",
    [
        ([], ["--health-addr", "0.0.0.0:8080", "--leader-elect"]),
        (["--set", "leaderElectionEnabled=false"], ["--health-addr", "0.0.0.0:8080"]),
        (["--set", "leaderElectionEnabled=false", "--set", "replicas=2"], ["--health-addr", "0.0.0.0:8080", "--leader-elect"]),
        (
            ["--set", "watchNamespace={team-a,team-b}"],
            ["--namespace", "team-a", "--namespace", "team-b", "--health-addr", "0.0.0.0:8080", "--leader-elect"],
        ),
        (
            ["--set", "singleNamespaceInstall=true", "--set", "leaderElectionEnabled=false"],
            ["--namespace", "oxray-system", "--health-addr", "0.0.0.0:8080"],
        ),
        (
            ["--set", "clusterDomain=corp.example", "--set", "leaderElectionEnabled=false"],
            ["--health-addr", "0.0.0.0:8080", "--cluster-domain", "corp.example"],
        ),
    ],
)
def test_operator_args(helm, args, want):
    assert container_args(helm.render("oxray-operator", *args)) == want


def test_operator_log_level_and_image(helm):
    docs = helm.render(
        "oxray-operator",
        "--set", "logLevel=debug",
        "--set", "image.repository=registry.example.com/oxray",
        "--set", "image.tag=dev",
    )
    container = one(docs, "Deployment")["spec"]["template"]["spec"]["containers"][0]
    assert {"name": "RUST_LOG", "value": "debug"} in container["env"]
    assert {"name": "OXRAY_LOG", "value": "debug"} in container["env"]
    assert container["image"] == "registry.example.com/oxray:dev"


def rules_of(role):
    return {
        (group, resource): set(rule["verbs"])
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
    }


def test_operator_rbac_covers_the_contract(helm):
    docs = helm.render("oxray-operator")
    rules = rules_of(one(docs, "ClusterRole"))
    crud = {"get", "list", "watch", "create", "update", "patch", "delete"}
    for plural in ("rayclusters", "rayjobs", "rayservices"):
        assert rules[("oxray.io", plural)] == crud
        assert rules[("oxray.io", plural + "/status")] == {"get", "update", "patch"}
        assert rules[("oxray.io", plural + "/finalizers")] == {"update"}
    for resource in ("pods", "services", "secrets", "serviceaccounts", "persistentvolumeclaims"):
        assert rules[("", resource)] == crud
    assert rules[("", "events")] == {"create", "patch"}
    assert rules[("events.k8s.io", "events")] == {"create", "patch"}
    assert rules[("coordination.k8s.io", "leases")] == {"get", "list", "watch", "create", "update", "patch"}
    binding = one(docs, "ClusterRoleBinding")
    assert binding["roleRef"]["name"] == one(docs, "ClusterRole")["metadata"]["name"]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "oxray-operator", "namespace": "oxray-system"}]


def test_single_namespace_install_yields_roles(helm):
    docs = helm.render("oxray-operator", "-f", str(CI_VALUES / "oxray-operator-single-namespace.yaml"))
    assert not by_kind(docs, "ClusterRole") and not by_kind(docs, "ClusterRoleBinding")
    roles = {(r["metadata"]["namespace"], r["metadata"]["name"]): r for r in by_kind(docs, "Role")}
    # The operator's own namespace is not watched: it gets the leader election's Lease rights.
    assert set(roles) == {
        ("team-a", "oxray-operator"),
        ("team-b", "oxray-operator"),
        ("oxray-system", "oxray-operator-leader-election"),
    }
    cluster_rules = rules_of(one(helm.render("oxray-operator"), "ClusterRole"))
    assert rules_of(roles[("team-a", "oxray-operator")]) == cluster_rules
    assert rules_of(roles[("team-b", "oxray-operator")]) == cluster_rules
    assert list(rules_of(roles[("oxray-system", "oxray-operator-leader-election")])) == [
        ("coordination.k8s.io", "leases")
    ]
    bindings = {(b["metadata"]["namespace"], b["metadata"]["name"]): b for b in by_kind(docs, "RoleBinding")}
    assert set(bindings) == set(roles)
    for key, binding in bindings.items():
        assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": key[1]}
    for binding in by_kind(docs, "RoleBinding"):
        assert binding["subjects"][0]["namespace"] == "oxray-system"
    assert container_args(docs)[:4] == ["--namespace", "team-a", "--namespace", "team-b"]
    # replicas: 2 needs leader election whatever leaderElectionEnabled says.
    assert "--leader-elect" in container_args(docs)


def test_single_namespace_install_defaults_to_the_release_namespace(helm):
    docs = helm.render("oxray-operator", "--set", "singleNamespaceInstall=true")
    assert [(r["metadata"]["namespace"], r["metadata"]["name"]) for r in by_kind(docs, "Role")] == [
        ("oxray-system", "oxray-operator")
    ]
    assert not by_kind(docs, "ClusterRole")


def test_rbac_can_be_left_to_an_admin(helm):
    docs = helm.render("oxray-operator", "--set", "rbacEnable=false")
    assert not [d for d in docs if d["kind"] in ("ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding")]
    docs = helm.render(
        "oxray-operator", "--set", "singleNamespaceInstall=true", "--set", "crNamespacedRbacEnable=false"
    )
    assert [r["metadata"]["name"] for r in by_kind(docs, "Role")] == ["oxray-operator-leader-election"]


def test_operator_service(helm):
    docs = helm.render("oxray-operator")
    service = one(docs, "Service")
    assert service["spec"]["type"] == "ClusterIP"
    assert service["spec"]["ports"] == [{"name": "http", "port": 8080, "targetPort": "http", "protocol": "TCP"}]
    pod_labels = one(docs, "Deployment")["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= pod_labels.items()


def test_service_monitor_only_when_enabled(helm):
    assert not by_kind(helm.render("oxray-operator"), "ServiceMonitor")
    docs = helm.render("oxray-operator", "-f", str(CI_VALUES / "oxray-operator-monitoring.yaml"))
    monitor = one(docs, "ServiceMonitor")
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    assert monitor["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    assert monitor["spec"]["endpoints"][0]["port"] == "http"
    assert monitor["spec"]["endpoints"][0]["path"] == "/metrics"
    assert monitor["spec"]["selector"]["matchLabels"].items() <= one(docs, "Service")["metadata"]["labels"].items()
    # An existing ServiceAccount is used, not created.
    assert not by_kind(docs, "ServiceAccount")
    assert one(docs, "Deployment")["spec"]["template"]["spec"]["serviceAccountName"] == "oxray-operator-sa"


@pytest.mark.parametrize(
    "args,message",
    [
        (["--set", "service.type=Bogus"], "type"),
        (["--set", "replicas=-1"], "replicas"),
        (["--set", "watchNamespace={Team_A}"], "watchNamespace"),
        (["--set", "image.pullPolicy=Sometimes"], "pullPolicy"),
        (["--set", "leaderElection=true"], "leaderElection"),
        (["--set", "clusterDomain=Corp_Example"], "clusterDomain"),
    ],
)
def test_operator_refuses_bad_values(helm, args, message):
    assert message in helm.refuse("oxray-operator", *args)


def test_crds_match_the_rbac(helm):
    """The generated CRDs are the ones the operator's RBAC names, with status subresources."""
    if not CRD_FILE.exists():
        pytest.skip(f"{CRD_FILE} is generated by `oxray operator crd`")
    crds = [d for d in yaml.safe_load_all(CRD_FILE.read_text()) if d]
    found = {}
    for crd in crds:
        assert crd["kind"] == "CustomResourceDefinition"
        spec = crd["spec"]
        assert spec["group"] == "oxray.io" and spec["scope"] == "Namespaced"
        v1 = [v for v in spec["versions"] if v["name"] == "v1"]
        assert v1 and v1[0]["served"] and v1[0]["storage"]
        assert "status" in v1[0].get("subresources", {})
        found[spec["names"]["kind"]] = spec["names"]["plural"]
    assert found == {"RayCluster": "rayclusters", "RayJob": "rayjobs", "RayService": "rayservices"}
    rules = rules_of(one(helm.render("oxray-operator"), "ClusterRole"))
    assert {r for g, r in rules if g == "oxray.io" and "/" not in r} == set(found.values())
    # helm installs what is in crds/ with the chart.
    rendered = by_kind(helm.render("oxray-operator", "--include-crds"), "CustomResourceDefinition")
    assert len(rendered) == len(crds)
