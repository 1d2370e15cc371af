"""The fake Kubernetes (tests/k8s/fakekube) through real clients: kubectl, raw HTTP, and pods
run by the process kubelet."""

import http.client
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml

from tests.k8s.fakekube.apiserver import FakeApiServer
from tests.k8s.fakekube.client import KubeClient, KubeError, resource_path, wait_until

REPO = Path(__file__).resolve().parents[2]

CRD_YAML = """
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.example.com
spec:
  group: example.com
  scope: Namespaced
  names: {plural: widgets, singular: widget, kind: Widget, shortNames: [wd]}
  versions:
  - name: v1
    served: true
    storage: true
    subresources: {status: {}}
    additionalPrinterColumns:
    - {name: Replicas, type: integer, jsonPath: .spec.replicas}
    - {name: State, type: string, jsonPath: .status.state}
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            required: [replicas]
            properties:
              replicas: {type: integer, minimum: 0}
              mode: {type: string, default: fast}
              template: {type: object, x-kubernetes-preserve-unknown-fields: true}
          status:
            type: object
            properties:
              state: {type: string}
              observed: {type: integer}
"""

WIDGET_CRD = yaml.safe_load(CRD_YAML)
WIDGETS = "/apis/example.com/v1/namespaces/default/widgets"
CONFIGMAPS = resource_path("v1", "configmaps", "default")
PODS = resource_path("v1", "pods", "default")


def widget(name, replicas=1, **meta):
    return {"apiVersion": "example.com/v1", "kind": "Widget",
            "metadata": dict(name=name, **meta), "spec": {"replicas": replicas}}


def collect(watch, into, stop_after=None):
    """Reads a watch in a thread; returns the thread."""
    def run():
        for ev in watch:
            into.append(ev)
            if stop_after and len(into) >= stop_after:
                return
    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


# --- kubectl ---------------------------------------------------------------------------------

def test_kubectl_crd_and_custom_resources(kubectl, k8s_tmp):
    crd = k8s_tmp / "crd.yaml"
    crd.write_text(CRD_YAML)
    assert "created" in kubectl("apply", "-f", str(crd)).stdout
    kubectl("wait", "--for=condition=Established", "crd/widgets.example.com", "--timeout=10s")

    cr = k8s_tmp / "w1.yaml"
    cr.write_text("apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: w1}\n"
                  "spec: {replicas: 2, template: {any: {thing: 1}}}\n")
    assert "widget.example.com/w1 created" in kubectl("apply", "-f", str(cr)).stdout
    table = kubectl("get", "widgets").stdout.splitlines()
    assert table[0].split()[:3] == ["NAME", "REPLICAS", "STATE"]
    assert table[1].split()[:2] == ["w1", "2"]
    cr.write_text(cr.read_text().replace("replicas: 2", "replicas: 3"))
    assert "configured" in kubectl("apply", "-f", str(cr)).stdout
    obj = json.loads(kubectl("get", "wd", "w1", "-o", "json").stdout)
    assert obj["spec"] == {"replicas": 3, "mode": "fast", "template": {"any": {"thing": 1}}}
    assert obj["metadata"]["generation"] == 2

    bad = k8s_tmp / "bad.yaml"
    bad.write_text(cr.read_text().replace("w1", "w2").replace("replicas: 3", "replicas: -1"))
    refused = kubectl("apply", "-f", str(bad), check=False)
    assert refused.returncode != 0
    assert "spec.replicas" in refused.stderr and "greater than or equal to 0" in refused.stderr
    unknown = k8s_tmp / "unknown.yaml"
    unknown.write_text(cr.read_text().replace("w1", "w3").replace("replicas: 3",
                                                                  "replicas: 3, colour: red"))
    refused = kubectl("apply", "-f", str(unknown), check=False)
    assert refused.returncode != 0 and 'unknown field "spec.colour"' in refused.stderr

    assert "deleted" in kubectl("delete", "-f", str(cr)).stdout
    assert "No resources found" in kubectl("get", "widgets").stderr


def test_kubectl_builtin_kinds_watch_and_wait(kubectl, k8s_tmp, apiserver):
    manifest = k8s_tmp / "app.yaml"
    manifest.write_text("""
apiVersion: v1
kind: Service
metadata: {name: web}
spec:
  selector: {app: web}
  ports: [{name: http, port: 80}]
---
apiVersion: v1
kind: ConfigMap
metadata: {name: settings, labels: {app: web}}
data: {level: "1"}
""")
    kubectl("apply", "-f", str(manifest))
    manifest.write_text(manifest.read_text().replace('level: "1"', 'level: "2"'))
    out = kubectl("apply", "-f", str(manifest)).stdout
    assert "service/web unchanged" in out and "configmap/settings configured" in out
    svc = json.loads(kubectl("get", "svc", "web", "-o", "json").stdout)
    assert svc["spec"]["clusterIP"].startswith("10.96.")
    assert svc["spec"]["ports"][0]["targetPort"] == 80

    watch = subprocess.Popen(["kubectl", "get", "configmaps", "-l", "app=web", "-w",
                              "--output-watch-events"], stdout=subprocess.PIPE, text=True)
    # A hung kubectl must fail the test, not hang it: reads see EOF once it is killed.
    deadline = threading.Timer(30, watch.kill)
    deadline.start()
    try:
        assert watch.stdout.readline().split()[:2] == ["EVENT", "NAME"]
        assert watch.stdout.readline().split()[:2] == ["ADDED", "settings"]
        kubectl("label", "configmap", "settings", "tier=gold")
        assert watch.stdout.readline().split()[:2] == ["MODIFIED", "settings"]
        waiter = subprocess.Popen(["kubectl", "wait", "--for=delete", "configmap/settings",
                                   "--timeout=20s"], stdout=subprocess.PIPE, text=True)
        requests = Path(apiserver.log_path)
        wait_until(lambda: any("fieldSelector=metadata.name%3Dsettings" in line
                               and "watch=true" in line
                               for line in requests.read_text().splitlines()),
                   20, what="kubectl wait's watch")
        kubectl("delete", "configmap", "settings")
        assert watch.stdout.readline().split()[:2] == ["DELETED", "settings"]
        assert waiter.wait(timeout=20) == 0
    finally:
        deadline.cancel()
        watch.kill()
        watch.wait()
    ns = k8s_tmp / "ns.yaml"
    ns.write_text("apiVersion: v1\nkind: Namespace\nmetadata: {name: team}\n")
    kubectl("apply", "-f", str(ns))
    assert "team" in kubectl("get", "namespaces").stdout


# --- raw HTTP --------------------------------------------------------------------------------

def test_watch_events_selectors_and_bookmarks(k8s_tmp):
    server = FakeApiServer(bookmark_interval=0.2).start()
    try:
        kube = KubeClient(server.url)
        first = kube.create(CONFIGMAPS, {"metadata": {"name": "a", "labels": {"tier": "x"}}})
        rv = first["metadata"]["resourceVersion"]
        events, all_events = [], []
        w = kube.watch(CONFIGMAPS, resourceVersion=rv, labelSelector="tier in (x, y)",
                       allowWatchBookmarks="true", timeoutSeconds=10)
        everything = kube.watch("/api/v1/configmaps", resourceVersion=rv)
        t1, t2 = collect(w, events), collect(everything, all_events, stop_after=4)
        kube.patch(CONFIGMAPS + "/a", {"data": {"k": "1"}})
        kube.patch(CONFIGMAPS + "/a", {"metadata": {"labels": {"tier": "z"}}})
        kube.create(CONFIGMAPS, {"metadata": {"name": "b", "labels": {"tier": "y"}}})
        kube.delete(CONFIGMAPS + "/b")
        wait_until(lambda: any(e["type"] == "BOOKMARK" for e in events) and len(
            [e for e in events if e["type"] != "BOOKMARK"]) >= 4, 5, what="watch events")
        w.close()
        everything.close()
        t1.join(5)
        t2.join(5)
        seen = [(e["type"], e["object"]["metadata"]["name"]) for e in events
                if e["type"] != "BOOKMARK"]
        # Leaving the selector reads as a deletion, as on the real server.
        assert seen == [("MODIFIED", "a"), ("DELETED", "a"), ("ADDED", "b"), ("DELETED", "b")]
        assert [e["type"] for e in all_events] == ["MODIFIED", "MODIFIED", "ADDED", "DELETED"]
        versions = [int(e["object"]["metadata"]["resourceVersion"]) for e in all_events]
        assert versions == sorted(versions) and versions[0] > int(rv)
        bookmark = next(e for e in events if e["type"] == "BOOKMARK")["object"]
        assert bookmark["kind"] == "ConfigMap" and bookmark["apiVersion"] == "v1"
        assert int(bookmark["metadata"]["resourceVersion"]) >= int(rv)

        # Without a resourceVersion a watch starts with the current objects.
        with kube.watch(CONFIGMAPS, timeoutSeconds=10) as w:
            first = next(iter(w))
        assert (first["type"], first["object"]["metadata"]["name"]) == ("ADDED", "a")
        # Streaming lists end their initial events with a marked bookmark.
        with kube.watch(CONFIGMAPS, sendInitialEvents="true", allowWatchBookmarks="true",
                        resourceVersionMatch="NotOlderThan", timeoutSeconds=10) as w:
            stream = iter(w)
            streamed = [next(stream), next(stream)]
        assert streamed[0]["type"] == "ADDED"
        assert streamed[1]["type"] == "BOOKMARK"
        assert streamed[1]["object"]["metadata"]["annotations"] == {
            "k8s.io/initial-events-end": "true"}
    finally:
        server.stop()


def test_too_old_resource_version_is_gone(apiserver, kube):
    old = kube.create(CONFIGMAPS, {"metadata": {"name": "a"}})["metadata"]["resourceVersion"]
    kube.patch(CONFIGMAPS + "/a", {"data": {"k": "v"}})
    apiserver.compact()
    with kube.watch(CONFIGMAPS, resourceVersion=old, timeoutSeconds=5) as w:
        events = list(w)
    assert len(events) == 1 and events[0]["type"] == "ERROR"
    assert events[0]["object"]["code"] == 410
    # The client relists and watches on from the list's version.
    listing = kube.list(CONFIGMAPS)
    events = []
    w = kube.watch(CONFIGMAPS, resourceVersion=listing["metadata"]["resourceVersion"],
                   timeoutSeconds=5)
    t = collect(w, events, stop_after=1)
    kube.patch(CONFIGMAPS + "/a", {"data": {"k": "w"}})
    t.join(5)
    w.close()
    assert events[0]["type"] == "MODIFIED"


def test_list_paging_and_selectors(kube):
    kube.create("/api/v1/namespaces", {"metadata": {"name": "other"}})
    for n in range(5):
        kube.create(CONFIGMAPS, {"metadata": {"name": f"cm{n}",
                                              "labels": {"n": str(n), "even": str(n % 2 == 0)}}})
    kube.create(resource_path("v1", "configmaps", "other"),
                {"metadata": {"name": "elsewhere", "labels": {"n": "0"}}})

    def names(path="/api/v1/namespaces/default/configmaps", **q):
        return [o["metadata"]["name"] for o in kube.list(path, **q)["items"]]

    assert names(labelSelector="n in (1,3)") == ["cm1", "cm3"]
    assert names(labelSelector="n notin (1,3),even!=True") == []
    assert names(labelSelector="even==True,n!=0") == ["cm2", "cm4"]
    assert names(labelSelector="!n") == []
    assert names(labelSelector="n") == [f"cm{n}" for n in range(5)]
    assert names(fieldSelector="metadata.name=cm3") == ["cm3"]
    assert names("/api/v1/configmaps", labelSelector="n=0") == ["cm0", "elsewhere"]
    assert names("/api/v1/configmaps", fieldSelector="metadata.namespace=other") == ["elsewhere"]
    pages, token = [], None
    while True:
        page = kube.list(CONFIGMAPS, limit=2, **({"continue": token} if token else {}))
        pages.append([o["metadata"]["name"] for o in page["items"]])
        token = page["metadata"].get("continue")
        if not token:
            break
    assert pages == [["cm0", "cm1"], ["cm2", "cm3"], ["cm4"]]
    kube.delete(CONFIGMAPS, labelSelector="even=True")
    assert names() == ["cm1", "cm3"]
    # kube-rs puts a stray '&' first in its query strings.
    code, body = kube.raw("GET", CONFIGMAPS + "?&limit=500")
    assert code == 200 and len(body["items"]) == 2
    code, body = kube.raw("GET", CONFIGMAPS + "?labelSelector=a%20in%20b")
    assert code == 400 and body["reason"] == "BadRequest"
    # Metadata-only lists, as kube-rs's metadata watchers ask for them.
    accept = {"Accept": "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"}
    code, body = kube.raw("GET", CONFIGMAPS, query={"labelSelector": "n=1"}, headers=accept)
    assert code == 200
    assert body["kind"] == "PartialObjectMetadataList"
    assert body["items"][0]["kind"] == "PartialObjectMetadata"
    assert body["items"][0]["metadata"]["name"] == "cm1"


def test_patch_kinds(kube):
    pod = {"metadata": {"name": "p"}, "spec": {"containers": [
        {"name": "a", "image": "x", "env": [{"name": "A", "value": "1"}]},
        {"name": "b", "image": "y"}]}}
    kube.create(PODS, pod)
    path = PODS + "/p"
    # Strategic merge: containers merge by name.
    out = kube.patch(path, {"spec": {"containers": [{"name": "b", "image": "z"}]}}, "strategic")
    assert [(c["name"], c["image"]) for c in out["spec"]["containers"]] == [("a", "x"),
                                                                            ("b", "z")]
    out = kube.patch(path, {"metadata": {"labels": {"k": "v", "gone": None}}}, "merge")
    assert out["metadata"]["labels"] == {"k": "v"}
    # JSON patch with the test-then-add/remove finalizer dance kube-rs does.
    out = kube.patch(path, [{"op": "test", "path": "/metadata/finalizers", "value": None},
                            {"op": "add", "path": "/metadata/finalizers", "value": ["x/f"]}],
                     "json")
    assert out["metadata"]["finalizers"] == ["x/f"]
    with pytest.raises(KubeError) as err:
        kube.patch(path, [{"op": "test", "path": "/metadata/finalizers", "value": None},
                          {"op": "add", "path": "/metadata/finalizers", "value": ["y/f"]}], "json")
    assert err.value.code == 422
    out = kube.patch(path, [{"op": "test", "path": "/metadata/finalizers/0", "value": "x/f"},
                            {"op": "remove", "path": "/metadata/finalizers/0"}], "json")
    assert "finalizers" not in out["metadata"]
    # Server-side apply: creates when absent, merges, and drops what the manager left out.
    cm = CONFIGMAPS + "/applied"
    created = kube.patch(cm, {"apiVersion": "v1", "kind": "ConfigMap",
                              "metadata": {"name": "applied"}, "data": {"a": "1", "b": "2"}},
                         "apply", fieldManager="tester")
    assert created["data"] == {"a": "1", "b": "2"}
    kube.patch(cm, {"data": {"c": "3"}}, "merge")
    out = kube.patch(cm, {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "applied"},
                          "data": {"a": "9"}}, "apply", fieldManager="tester", force="true")
    assert out["data"] == {"a": "9", "c": "3"}
    code, body = kube.raw("PATCH", cm, {"data": {}}, "application/apply-patch+yaml")
    assert code == 400 and "fieldManager" in body["message"]
    code, body = kube.raw("PATCH", cm, "data: {d: '4'}\n", "application/apply-patch+yaml",
                          query={"fieldManager": "yaml"})
    assert code == 200 and body["data"]["d"] == "4"
    code, body = kube.raw("PATCH", cm, {"data": {}}, "text/plain")
    assert code == 415


def test_status_subresource_generation_and_conflicts(kube):
    kube.create("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", WIDGET_CRD)
    created = kube.create(WIDGETS, dict(widget("w"), status={"state": "ignored"}))
    assert "status" not in created and created["metadata"]["generation"] == 1
    path = WIDGETS + "/w"
    out = kube.patch(path + "/status", {"status": {"state": "Ready"}, "spec": {"replicas": 7}},
                     "merge")
    assert out["status"] == {"state": "Ready"} and out["spec"]["replicas"] == 1
    assert out["metadata"]["generation"] == 1
    out = kube.patch(path, {"spec": {"replicas": 2}, "status": {"state": "Nope"}}, "merge")
    assert out["status"] == {"state": "Ready"} and out["metadata"]["generation"] == 2
    rv = out["metadata"]["resourceVersion"]
    # Writing the same thing again changes nothing, not even the resourceVersion.
    same = kube.patch(path + "/status", {"status": {"state": "Ready"}}, "merge")
    assert same["metadata"]["resourceVersion"] == rv
    # kube-rs writes status with server-side apply.
    applied = kube.patch(path + "/status", {"apiVersion": "example.com/v1", "kind": "Widget",
                                            "status": {"observed": 2}},
                         "apply", fieldManager="op", force="true")
    assert applied["status"] == {"state": "Ready", "observed": 2}
    replaced = kube.replace(path + "/status", dict(applied, status={"state": "Done"}))
    assert replaced["status"] == {"state": "Done"}
    stale = dict(applied, spec={"replicas": 5})
    with pytest.raises(KubeError) as err:
        kube.replace(path, stale)
    assert err.value.code == 409 and err.value.reason == "Conflict"
    fresh = kube.get(path)
    kept = kube.replace(path, dict(fresh, spec={"replicas": 5}, status={"state": "x"}))
    assert kept["spec"]["replicas"] == 5 and kept["status"] == {"state": "Done"}
    with pytest.raises(KubeError) as err:
        kube.patch(path, {"spec": {"replicas": -3}}, "merge")
    assert err.value.code == 422 and err.value.reason == "Invalid"
    assert err.value.status["details"]["causes"][0]["field"] == "spec.replicas"
    with pytest.raises(KubeError) as err:
        kube.patch(path, {"spec": {"replicas": 1}}, "strategic")
    assert err.value.code == 415


def test_finalizers_and_garbage_collection(kube):
    kube.create("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", WIDGET_CRD)
    owner = kube.create(WIDGETS, widget("owner", finalizers=["example.com/cleanup"]))
    ref = {"apiVersion": "example.com/v1", "kind": "Widget", "name": "owner",
           "uid": owner["metadata"]["uid"], "controller": True}
    child = kube.create(CONFIGMAPS, {"metadata": {"name": "child", "ownerReferences": [ref]}})
    child_ref = {"apiVersion": "v1", "kind": "ConfigMap", "name": "child",
                 "uid": child["metadata"]["uid"]}
    kube.create(CONFIGMAPS, {"metadata": {"name": "grandchild", "ownerReferences": [child_ref]}})
    kube.create(CONFIGMAPS, {"metadata": {"name": "bystander"}})

    pending = kube.delete(WIDGETS + "/owner")
    assert pending["metadata"]["deletionTimestamp"]
    assert kube.get_or_none(CONFIGMAPS + "/child") is not None
    kube.patch(WIDGETS + "/owner", [
        {"op": "test", "path": "/metadata/finalizers/0", "value": "example.com/cleanup"},
        {"op": "remove", "path": "/metadata/finalizers/0"}], "json")
    assert kube.get_or_none(WIDGETS + "/owner") is None
    assert kube.get_or_none(CONFIGMAPS + "/child") is None
    assert kube.get_or_none(CONFIGMAPS + "/grandchild") is None
    assert kube.get_or_none(CONFIGMAPS + "/bystander") is not None

    owner = kube.create(WIDGETS, widget("owner2"))
    ref = dict(ref, name="owner2", uid=owner["metadata"]["uid"])
    kube.create(CONFIGMAPS, {"metadata": {"name": "orphan", "ownerReferences": [ref]}})
    status = kube.delete(WIDGETS + "/owner2", propagationPolicy="Orphan")
    assert status["kind"] == "Status" and status["status"] == "Success"
    assert "ownerReferences" not in kube.get(CONFIGMAPS + "/orphan")["metadata"]

    owner = kube.create(WIDGETS, widget("owner3"))
    ref = dict(ref, name="owner3", uid=owner["metadata"]["uid"], blockOwnerDeletion=True)
    kube.create(CONFIGMAPS, {"metadata": {"name": "held", "finalizers": ["x/hold"],
                                          "ownerReferences": [ref]}})
    out = kube.delete(WIDGETS + "/owner3", {"propagationPolicy": "Foreground"})
    assert "foregroundDeletion" in out["metadata"]["finalizers"]
    assert kube.get(CONFIGMAPS + "/held")["metadata"]["deletionTimestamp"]
    kube.patch(CONFIGMAPS + "/held", {"metadata": {"finalizers": None}}, "merge")
    assert kube.get_or_none(WIDGETS + "/owner3") is None

    # Deleting a CRD deletes its objects.
    kube.create(WIDGETS, widget("last"))
    kube.delete("/apis/apiextensions.k8s.io/v1/customresourcedefinitions/widgets.example.com")
    code, _ = kube.raw("GET", WIDGETS)
    assert code == 404


def test_errors_are_status_objects(apiserver, kube):
    kube.create(CONFIGMAPS, {"metadata": {"name": "a"}})
    cases = [
        ("GET", CONFIGMAPS + "/missing", None, "application/json", 404, "NotFound"),
        ("POST", CONFIGMAPS, {"metadata": {"name": "a"}}, "application/json", 409,
         "AlreadyExists"),
        ("POST", CONFIGMAPS, b"{not json", "application/json", 400, "BadRequest"),
        ("POST", CONFIGMAPS, [1, 2], "application/json", 400, "BadRequest"),
        ("POST", CONFIGMAPS, {"metadata": {"name": "Bad_Name"}}, "application/json", 422,
         "Invalid"),
        ("POST", CONFIGMAPS, {"metadata": {}}, "application/json", 422, "Invalid"),
        ("POST", resource_path("v1", "configmaps", "nowhere"), {"metadata": {"name": "x"}},
         "application/json", 404, "NotFound"),
        ("PUT", CONFIGMAPS, {}, "application/json", 405, "MethodNotAllowed"),
        ("PATCH", CONFIGMAPS + "/a", b"[{\"op\": \"explode\", \"path\": \"/x\"}]",
         "application/json-patch+json", 422, "Invalid"),
        ("PATCH", CONFIGMAPS + "/a", b"{}", "application/json-patch+json", 400, "BadRequest"),
        ("GET", "/apis/nothing.io/v1/things", None, "application/json", 404, "NotFound"),
        ("GET", CONFIGMAPS + "?watch=true&resourceVersion=abc", None, "application/json", 400,
         "BadRequest"),
        ("DELETE", CONFIGMAPS + "/a", b"[]", "application/json", 400, "BadRequest"),
        ("POST", PODS, {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c"}]}},
         "application/json", 422, "Invalid"),
    ]
    for method, path, body, ctype, code, reason in cases:
        got, status = kube.raw(method, path, body, ctype)
        assert (got, status.get("kind"), status.get("reason")) == (code, "Status", reason), \
            (method, path, status)
        assert status["code"] == code
    code, _ = kube.raw("HEAD", CONFIGMAPS)
    assert code == 405
    # The connection and the server survive all of that.
    assert kube.get(CONFIGMAPS + "/a")["metadata"]["name"] == "a"
    assert kube.get("/version")["major"] == "1"


def test_keep_alive_and_concurrent_watch(apiserver, kube):
    w = kube.watch(CONFIGMAPS, timeoutSeconds=30)
    try:
        conn = http.client.HTTPConnection("127.0.0.1", apiserver.port, timeout=5)
        for n in range(20):
            conn.request("POST", CONFIGMAPS, json.dumps({"metadata": {"name": f"k{n}"}}),
                         {"Content-Type": "application/json"})
            resp = conn.getresponse()
            assert resp.status == 201
            resp.read()
        conn.request("GET", CONFIGMAPS)
        assert len(json.loads(conn.getresponse().read())["items"]) == 20
        conn.close()
    finally:
        w.close()


def test_namespace_deletion_and_discovery(kube, kubectl):
    kube.create("/api/v1/namespaces", {"metadata": {"name": "doomed"}})
    kube.create(resource_path("v1", "configmaps", "doomed"), {"metadata": {"name": "c"}})
    kube.delete("/api/v1/namespaces/doomed")
    assert kube.get_or_none("/api/v1/namespaces/doomed") is None
    assert kube.list(resource_path("v1", "configmaps", "doomed"))["items"] == []
    kube.create("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", WIDGET_CRD)
    groups = [g["name"] for g in kube.get("/apis")["groups"]]
    assert "example.com" in groups and "apps" in groups
    resources = {r["name"] for r in kube.get("/apis/example.com/v1")["resources"]}
    assert resources == {"widgets", "widgets/status"}
    out = kubectl("api-resources", "--api-group=example.com").stdout
    assert "widgets" in out and "Widget" in out
    # A cluster-scoped kind lives outside namespaces, and has no status subresource here.
    crd = yaml.safe_load(CRD_YAML.replace("widget", "gadget").replace("Widget", "Gadget")
                         .replace("wd]", "gd]").replace("Namespaced", "Cluster")
                         .replace("    subresources: {status: {}}\n", ""))
    kube.create("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd)
    created = kube.create("/apis/example.com/v1/gadgets", {
        "apiVersion": "example.com/v1", "kind": "Gadget", "metadata": {"name": "g"},
        "spec": {"replicas": 1}, "status": {"state": "kept"}})
    assert "namespace" not in created["metadata"] and created["status"] == {"state": "kept"}
    assert kube.get("/apis/example.com/v1/gadgets/g")["spec"]["mode"] == "fast"
    assert kube.raw("GET", "/apis/example.com/v1/namespaces/default/gadgets/g")[0] == 404
    assert kube.raw("GET", "/apis/example.com/v1/gadgets/g/status")[0] == 404


def test_apiserver_as_a_process(k8s_tmp):
    port_file = k8s_tmp / "port"
    proc = subprocess.Popen([sys.executable, "-m", "tests.k8s.fakekube.apiserver", "--port", "0",
                             "--port-file", str(port_file)], cwd=REPO,
                            stderr=subprocess.DEVNULL)
    try:
        port = wait_until(lambda: port_file.exists() and port_file.read_text(), 15,
                          what="port file")
        kube = KubeClient(f"http://127.0.0.1:{port}")
        assert [n["metadata"]["name"] for n in kube.list("/api/v1/namespaces")["items"]][:1] == \
            ["default"]
    finally:
        proc.terminate()
        assert proc.wait(timeout=10) == 0


# --- the process kubelet ---------------------------------------------------------------------

SERVER_CODE = """
import http.server, os
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = ('hello from ' + os.environ['HOSTNAME']).encode()
        self.send_response(200); self.send_header('Content-Length', str(len(body)))
        self.end_headers(); self.wfile.write(body)
    def log_message(self, *a): pass
http.server.HTTPServer((os.environ['POD_IP'], 47123), H).serve_forever()
"""

CLIENT_CODE = """
import os, time, urllib.request
with open('/tmp/token', 'w') as f:
    f.write(os.environ['TOKEN'])
print('token', os.environ['TOKEN'], 'greeting', os.environ['GREETING'], flush=True)
while True:
    try:
        url = 'http://backend.default.svc.cluster.local:47123/'
        print(urllib.request.urlopen(url, timeout=2).read().decode(), flush=True)
    except OSError as e:
        print('not yet', e, flush=True)
    time.sleep(0.2)
"""


def python_pod(name, code, labels=None, **spec):
    container = {"name": "main", "image": "python:3", "command": ["python3", "-c", code]}
    container.update(spec.pop("container", {}))
    return {"metadata": {"name": name, "labels": labels or {}},
            "spec": dict({"terminationGracePeriodSeconds": 2, "containers": [container]}, **spec)}


def pod_status(kube, name):
    return (kube.get(f"{PODS}/{name}").get("status") or {})


def is_ready(kube, name):
    return any(c["type"] == "Ready" and c["status"] == "True"
               for c in pod_status(kube, name).get("conditions") or [])


def restarts(kube, name):
    statuses = pod_status(kube, name).get("containerStatuses") or [{}]
    return statuses[0].get("restartCount", 0)


def alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as f:
        return f.read().split(")")[-1].split()[0] != "Z"


def test_pods_secrets_tmp_services_restart_and_delete(kube, kubelet, kubectl):
    kube.create(resource_path("v1", "secrets", "default"),
                {"metadata": {"name": "creds"}, "stringData": {"token": "s3cret"}})
    kube.create(resource_path("v1", "services", "default"), {
        "metadata": {"name": "backend"},
        "spec": {"clusterIP": "None", "selector": {"app": "backend"},
                 "ports": [{"port": 47123}]}})
    kube.create(PODS, python_pod("backend-0", SERVER_CODE, {"app": "backend"}, container={
        "ports": [{"name": "http", "containerPort": 47123}],
        "readinessProbe": {"httpGet": {"path": "/", "port": "http"}, "periodSeconds": 1},
        "livenessProbe": {"tcpSocket": {"port": 47123}, "initialDelaySeconds": 1,
                          "periodSeconds": 1}}))
    kube.create(PODS, python_pod("client", "$(CODE)", container={"env": [
        {"name": "CODE", "value": CLIENT_CODE},
        {"name": "GREETING", "value": "hi $(TOKEN)"},
        {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "creds", "key": "token"}}}]}))

    wait_until(lambda: "hello from backend-0" in kubelet.logs("default", "client"), 20,
               what="the client pod to reach the backend through its Service")
    log = kubelet.logs("default", "client")
    # $(TOKEN) is defined after GREETING, so it stays as written.
    assert "token s3cret greeting hi $(TOKEN)" in log
    st = pod_status(kube, "client")
    assert st["phase"] == "Running" and st["podIP"].startswith("127.1.")
    assert st["hostIP"] == "127.0.0.1" and st["startTime"]
    assert st["containerStatuses"][0]["state"]["running"]["startedAt"]
    assert st["podIP"] != pod_status(kube, "backend-0")["podIP"]
    assert {c["type"] for c in st["conditions"]} == {"PodScheduled", "Initialized",
                                                     "ContainersReady", "Ready"}
    assert kube.get(f"{PODS}/client")["spec"]["nodeName"] == "fake-node"
    assert "token s3cret" in kubectl("logs", "client").stdout
    row = kubectl("get", "pod", "backend-0").stdout.splitlines()[1].split()
    assert row[:4] == ["backend-0", "1/1", "Running", "0"]
    # The pod's /tmp is its own directory, not the host's.
    tmp = Path(kubelet.pod_dir("default", "client")) / "tmp" / "token"
    assert tmp.read_text() == "s3cret"
    assert not Path("/tmp/token").exists() or Path("/tmp/token").read_text() != "s3cret"

    pid = kubelet.pid("default", "client")
    os.kill(pid, signal.SIGKILL)
    wait_until(lambda: restarts(kube, "client") == 1 and kubelet.pid("default", "client"), 20,
               what="a restart after SIGKILL")
    new_pid = kubelet.pid("default", "client")
    assert new_pid != pid
    last = pod_status(kube, "client")["containerStatuses"][0]["lastState"]["terminated"]
    assert last["exitCode"] == 137

    kube.delete(f"{PODS}/client")
    wait_until(lambda: kube.get_or_none(f"{PODS}/client") is None, 20, what="pod removal")
    assert not alive(new_pid)


def test_graceful_deletion_kills_after_grace_period(kube, kubelet):
    code = ("import signal, time\nsignal.signal(signal.SIGTERM, lambda *a: print('term', "
            "flush=True))\nprint('up', flush=True)\nwhile True: time.sleep(0.1)\n")
    kube.create(PODS, python_pod("stubborn", code, terminationGracePeriodSeconds=1))
    wait_until(lambda: "up" in kubelet.logs("default", "stubborn"), 20, what="pod start")
    pid = kubelet.pid("default", "stubborn")
    start = time.monotonic()
    pending = kube.delete(f"{PODS}/stubborn")
    assert pending["metadata"]["deletionGracePeriodSeconds"] == 1
    wait_until(lambda: kube.get_or_none(f"{PODS}/stubborn") is None, 20, what="pod removal")
    assert time.monotonic() - start >= 0.9
    assert "term" in kubelet.logs("default", "stubborn")
    assert not alive(pid)


def test_restart_policies_init_containers_and_volumes(kube, kubelet):
    kube.create(resource_path("v1", "configmaps", "default"),
                {"metadata": {"name": "conf"}, "data": {"app.conf": "x=1"}})
    kube.create(resource_path("v1", "persistentvolumeclaims", "default"), {
        "metadata": {"name": "data"},
        "spec": {"accessModes": ["ReadWriteOnce"],
                 "resources": {"requests": {"storage": "1Gi"}}}})
    code = ("import os\n"
            "n = len(os.listdir('/data'))\n"
            "open(f'/data/run{n}', 'w').close()\n"
            "print('conf', open('/etc/app/app.conf').read(), 'init', open('/scratch/init').read(),"
            " 'runs', n + 1, 'shm', os.statvfs('/dev/shm').f_blocks * os.statvfs('/dev/shm')"
            ".f_frsize, flush=True)\n")
    spec = {
        "restartPolicy": "Never",
        "initContainers": [{"name": "setup", "image": "busybox", "command": [
            "sh", "-c", "echo ready > /scratch/init"],
            "volumeMounts": [{"name": "scratch", "mountPath": "/scratch"}]}],
        "volumes": [{"name": "conf", "configMap": {"name": "conf"}},
                    {"name": "scratch", "emptyDir": {}},
                    {"name": "shm", "emptyDir": {"medium": "Memory"}},
                    {"name": "data", "persistentVolumeClaim": {"claimName": "data"}}],
        "container": {"volumeMounts": [{"name": "conf", "mountPath": "/etc/app"},
                                       {"name": "scratch", "mountPath": "/scratch"},
                                       {"name": "data", "mountPath": "/data"},
                                       {"name": "shm", "mountPath": "/dev/shm"}],
                      "resources": {"limits": {"memory": "64Mi"}}}}
    for attempt in (1, 2):
        kube.create(PODS, python_pod("job", code, **json.loads(json.dumps(spec))))
        wait_until(lambda: pod_status(kube, "job").get("phase") == "Succeeded", 20,
                   what="the pod to succeed")
        log = kubelet.logs("default", "job")
        assert f"conf x=1 init ready\n runs {attempt} shm {64 * 2 ** 20}" in log, log
        kube.delete(f"{PODS}/job")
        wait_until(lambda: kube.get_or_none(f"{PODS}/job") is None, 10, what="pod removal")

    kube.create(PODS, python_pod("flaky", "import sys; print('run', flush=True); sys.exit(3)",
                                 restartPolicy="OnFailure"))
    wait_until(lambda: restarts(kube, "flaky") >= 2, 20, what="OnFailure restarts")
    kube.create(PODS, python_pod("fails", "raise SystemExit(4)", restartPolicy="Never"))
    wait_until(lambda: pod_status(kube, "fails").get("phase") == "Failed", 20, what="failure")
    state = pod_status(kube, "fails")["containerStatuses"][0]["state"]["terminated"]
    assert state["exitCode"] == 4 and state["reason"] == "Error"


def test_readiness_probe_gates_service_addresses(kube, kubelet):
    kube.create(resource_path("v1", "services", "default"), {
        "metadata": {"name": "gated"},
        "spec": {"selector": {"app": "gated"}, "ports": [{"port": 47123}]}})
    code = "import time\nwhile True: time.sleep(1)\n"
    probe = {"exec": {"command": ["test", "-e", "/tmp/ready"]}, "periodSeconds": 1,
             "failureThreshold": 1}
    kube.create(PODS, python_pod("gated-0", code, {"app": "gated"},
                                 container={"readinessProbe": probe}))
    kube.create(PODS, python_pod("watcher", code))
    wait_until(lambda: pod_status(kube, "gated-0").get("phase") == "Running", 20,
               what="pod start")
    hosts = Path(kubelet.pod_dir("default", "watcher")) / "hosts"
    wait_until(hosts.exists, 10, what="hosts file")
    assert "gated" not in hosts.read_text() and not is_ready(kube, "gated-0")
    inode = hosts.stat().st_ino
    (Path(kubelet.pod_dir("default", "gated-0")) / "tmp" / "ready").write_text("")
    wait_until(lambda: is_ready(kube, "gated-0"), 10, what="readiness")
    ip = pod_status(kube, "gated-0")["podIP"]
    wait_until(lambda: f"{ip}\tgated gated.default gated.default.svc "
               "gated.default.svc.cluster.local" in hosts.read_text(), 10,
               what="the Service in the hosts file")
    assert hosts.stat().st_ino == inode


def test_owner_deletion_stops_pods_and_stop_kills_everything(kube, apiserver, k8s_tmp):
    from tests.k8s.fakekube.kubelet import Kubelet
    path = os.pathsep.join([str(Path(sys.executable).parent), os.environ["PATH"]])
    kubelet = Kubelet(apiserver, root_dir=str(k8s_tmp / "own"), path=path).start()
    try:
        owner = kube.create(CONFIGMAPS, {"metadata": {"name": "owner"}})
        ref = {"apiVersion": "v1", "kind": "ConfigMap", "name": "owner",
               "uid": owner["metadata"]["uid"]}
        # A child process in its own session still belongs to the pod.
        code = ("import subprocess, time\np = subprocess.Popen(['sleep', '300'], "
                "start_new_session=True)\nprint('up', p.pid, flush=True)\ntime.sleep(300)\n")
        for name in ("owned", "survivor"):
            pod = python_pod(name, code)
            if name == "owned":
                pod["metadata"]["ownerReferences"] = [ref]
            kube.create(PODS, pod)
        wait_until(lambda: all("up" in kubelet.logs("default", n) for n in ("owned",
                                                                             "survivor")),
                   20, what="pods start")
        owned_pid = kubelet.pid("default", "owned")
        survivor_pid = kubelet.pid("default", "survivor")
        children = [int(kubelet.logs("default", n).split()[1]) for n in ("owned", "survivor")]
        kube.delete(CONFIGMAPS + "/owner")
        wait_until(lambda: kube.get_or_none(f"{PODS}/owned") is None, 20,
                   what="the owned pod to go")
        assert not alive(owned_pid) and not alive(children[0])
        assert alive(survivor_pid) and alive(children[1])
    finally:
        kubelet.stop()
    assert not alive(survivor_pid) and not alive(children[1])
