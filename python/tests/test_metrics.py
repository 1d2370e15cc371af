"""Application metrics (`oxray.util.metrics`, as `ray.util.metrics`) from a driver and from
tasks, on the head's `/metrics`; and the node use the head exports and keeps for charts."""

import json
import time
import urllib.request

import pytest
from prometheus_client.openmetrics.parser import text_string_to_metric_families

import oxray
from conftest import driver_of
from oxray.util import metrics


def scrape(cluster):
    request = urllib.request.Request(f"{cluster.dashboard_url}/metrics",
                                     headers={"Authorization": f"Bearer {cluster.token}"})
    with urllib.request.urlopen(request, timeout=10) as response:
        return response.read().decode()


def families_when(cluster, ready, timeout=20):
    deadline = time.time() + timeout
    while True:
        families = {f.name: f for f in text_string_to_metric_families(scrape(cluster))}
        if ready(families) or time.time() > deadline:
            return families
        time.sleep(0.5)


@oxray.remote
def count_work(kind, n):
    done = metrics.Counter("app_items", description="Items handled", tag_keys=("kind",))
    took = metrics.Histogram("app_item_seconds", description="Time per item", boundaries=[0.01, 0.1, 1.0])
    for _ in range(n):
        done.inc(tags={"kind": kind})
        took.observe(0.05)
    return n


@pytest.fixture(scope="module")
def reported(cluster, tmp_path_factory):
    with driver_of(cluster):
        gauge = metrics.Gauge("app_queue_depth", description="Queue depth", tag_keys=("queue",))
        gauge.set_default_tags({"queue": "main"})
        gauge.set(7)
        assert oxray.get([count_work.remote("a", 3), count_work.remote("b", 2)]) == [3, 2]
        assert metrics.flush()
        yield


def test_application_metrics_of_drivers_and_tasks_reach_the_head(cluster, reported):
    families = families_when(cluster, lambda f: "ray_app_items" in f and "ray_app_item_seconds" in f)
    items = families["ray_app_items"]
    assert items.type == "counter" and items.documentation == "Items handled"
    by_kind = {}
    for sample in items.samples:
        by_kind[sample.labels["kind"]] = by_kind.get(sample.labels["kind"], 0) + sample.value
        assert sample.labels["node_id"] and int(sample.labels["pid"]) > 0
    assert by_kind == {"a": 3.0, "b": 2.0}
    counts = [s for s in families["ray_app_item_seconds"].samples if s.name == "ray_app_item_seconds_count"]
    assert sum(s.value for s in counts) == 5
    [depth] = families["ray_app_queue_depth"].samples
    assert depth.value == 7.0 and depth.labels["queue"] == "main"


def test_bad_metric_use_is_refused_as_ray_refuses_it():
    with pytest.raises(ValueError, match="Empty name"):
        metrics.Counter("")
    with pytest.raises(TypeError, match="tuple"):
        metrics.Counter("c1", tag_keys=["a"])
    counter = metrics.Counter("c2", tag_keys=("a",))
    with pytest.raises(ValueError, match="Missing value for tag key"):
        counter.inc()
    with pytest.raises(ValueError, match="Unrecognized tag keys"):
        counter.inc(tags={"a": "x", "b": "y"})
    with pytest.raises(ValueError, match=">0"):
        counter.inc(0)
    with pytest.raises(ValueError, match="positive"):
        metrics.Histogram("h1", boundaries=[0, 1])
    with pytest.raises(ValueError, match="already a counter"):
        metrics.Gauge("c2")


def test_node_use_is_exported_and_kept_over_time(cluster, reported):
    families = families_when(cluster, lambda f: "oxray_node_cpu_utilization" in f)
    [cpu] = families["oxray_node_cpu_utilization"].samples
    assert 0.0 <= cpu.value <= 1.0
    [total] = families["oxray_node_memory_total_bytes"].samples
    assert total.value > 0
    assert "oxray_object_store_used_bytes" in families and "oxray_node_workers_leased" in families
    request = urllib.request.Request(f"{cluster.dashboard_url}/api/ui/usage",
                                     headers={"Authorization": f"Bearer {cluster.token}"})
    with urllib.request.urlopen(request, timeout=10) as response:
        history = json.loads(response.read())
    assert history["step_ms"] == 5000
    [readings] = history["nodes"].values()
    assert readings and readings[0]["memory_total"] > 0 and "workers_leased" in readings[0]
