"""The state API: what Ray's `ray list/get/summary` and `oxray list/get/summary` show of the
tasks, actors and placement groups a driver made, from a real cluster."""

import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

import oxray
from conftest import OXRAY_BIN, Cluster, driver_of, state




def rows_when(cluster, path, ready, **params):
    """The rows once `ready(rows)` holds: owners report about once a second."""
    deadline = time.time() + 15
    while True:
        rows = state(cluster, path, detail="True", limit=10000, **params)["result"]
        if ready(rows) or time.time() > deadline:
            return rows
        time.sleep(0.2)


def cli(cluster, *args, check=True):
    result = subprocess.run([OXRAY_BIN, *args], env=cluster.env, capture_output=True, text=True, timeout=60)
    if check:
        assert result.returncode == 0, result.stderr
    return result


@oxray.remote
def square(x):
    return x * x


@oxray.remote
def fails():
    raise ValueError("the input was wrong")


@oxray.remote(max_retries=2)
def dies_once(marker):
    if not os.path.exists(marker):
        Path(marker).touch()
        os._exit(1)
    return "second try"


@oxray.remote
class Counter:
    def __init__(self):
        self.n = 0

    def incr(self):
        self.n += 1
        return self.n

    def pid(self):
        return os.getpid()


@pytest.fixture(scope="module")
def workload(cluster):
    with driver_of(cluster):
        assert oxray.get([square.remote(i) for i in range(4)]) == [0, 1, 4, 9]
        with pytest.raises(Exception):
            oxray.get(fails.remote())
        with tempfile.TemporaryDirectory() as tmp:
            retried = dies_once.remote(os.path.join(tmp, "marker"))
            assert oxray.get(retried) == "second try"
        named = Counter.options(name="counter", namespace="state", num_cpus=0.5).remote()
        assert oxray.get([named.incr.remote() for _ in range(3)]) == [1, 2, 3]
        actor_pid = oxray.get(named.pid.remote())
        gone = Counter.remote()
        oxray.get(gone.incr.remote())
        oxray.kill(gone)
        group = oxray.util.placement_group([{"CPU": 0.5}])
        oxray.get(group.ready())
        yield {"named": named._actor_id, "gone": gone._actor_id, "pid": actor_pid,
               "retried": retried.hex(), "group": group.id.hex()}
        oxray.util.remove_placement_group(group)


def test_tasks_show_their_states_attempts_places_and_errors(cluster, workload):
    rows = rows_when(cluster, "tasks", lambda rows: len(rows) >= 13)
    by_name = {}
    for row in rows:
        by_name.setdefault(row["name"], []).append(row)
    assert sorted(r["state"] for r in by_name["square"]) == ["FINISHED"] * 4
    square_row = by_name["square"][0]
    assert square_row["type"] == "NORMAL_TASK" and square_row["node_id"] and square_row["worker_pid"] > 0
    assert square_row["required_resources"] == {"CPU": 1.0}
    assert square_row["start_time_ms"] <= square_row["end_time_ms"]
    [failed] = by_name["fails"]
    assert failed["state"] == "FAILED" and failed["error_type"] == "TASK_EXECUTION_EXCEPTION"
    assert "ValueError: the input was wrong" in failed["error_message"]
    # The traceback starts at the user's function: the worker loop's frames are left out.
    assert "in fails" in failed["error_message"] and "worker_main" not in failed["error_message"]
    attempts = sorted((r["attempt_number"], r["state"], r["error_type"]) for r in by_name["dies_once"])
    assert attempts == [(0, "FAILED", "WORKER_DIED"), (1, "FINISHED", None)]
    assert {r["task_id"] for r in by_name["dies_once"]} == {workload["retried"]}
    calls = by_name["Counter.incr"]
    assert len(calls) == 4 and all(r["type"] == "ACTOR_TASK" for r in calls)
    assert any(r["actor_id"] == workload["named"] and r["worker_pid"] == workload["pid"] for r in calls)
    assert {r["type"] for r in by_name["Counter.__init__"]} == {"ACTOR_CREATION_TASK"}


def test_lists_filter_and_limit_as_rays(cluster, workload):
    rows_when(cluster, "tasks", lambda rows: len(rows) >= 13)
    failed = state(cluster, "tasks", filter_keys=["state"], filter_predicates=["="], filter_values=["failed"])
    assert {r["name"] for r in failed["result"]} == {"fails", "dies_once"}
    assert "events" not in failed["result"][0]  # plain rows: the main columns only
    limited = state(cluster, "tasks", limit=2)
    assert len(limited["result"]) == 2 and limited["num_filtered"] >= 13 and limited["total"] >= 13
    request = urllib.request.Request(
        f"{cluster.dashboard_url}/api/v0/tasks?filter_keys=colour&filter_predicates=%3D&filter_values=red",
        headers={"Authorization": f"Bearer {cluster.token}"})
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=10)
    assert refused.value.code == 400
    assert "not supported" in json.loads(refused.value.read())["msg"]


def test_actors_show_their_life_names_and_processes(cluster, workload):
    rows = rows_when(cluster, "actors", lambda rows: any(r["state"] == "DEAD" for r in rows))
    actors = {r["actor_id"]: r for r in rows}
    named, gone = actors[workload["named"]], actors[workload["gone"]]
    assert (named["state"], named["class_name"], named["name"], named["ray_namespace"]) == \
        ("ALIVE", "Counter", "counter", "state")
    assert named["pid"] == workload["pid"] and named["node_id"] and named["num_restarts"] == 0
    assert gone["state"] == "DEAD" and "killed" in gone["death_cause"]["actor_died_error_context"]["error_message"]
    assert gone["name"] == "" and gone["ray_namespace"]  # unnamed actors show where they were made


def test_placement_groups_and_summaries(cluster, workload):
    groups = state(cluster, "placement_groups", detail="True")["result"]
    [group] = [g for g in groups if g["placement_group_id"] == workload["group"]]
    assert group["state"] == "CREATED" and group["bundles"][0]["unit_resources"] == {"CPU": 0.5}
    rows_when(cluster, "tasks", lambda rows: len(rows) >= 13)
    summary = state(cluster, "tasks/summarize")["result"]["node_id_to_summary"]["cluster"]
    assert summary["summary"]["square"]["state_counts"] == {"FINISHED": 4}
    assert summary["total_actor_scheduled"] >= 2 and summary["summary_by"] == "func_name"
    actors = state(cluster, "actors/summarize")["result"]["node_id_to_summary"]["cluster"]
    assert actors["summary"]["Counter"]["state_counts"]["ALIVE"] >= 1


def test_the_cli_lists_gets_and_summarizes(cluster, workload):
    rows_when(cluster, "actors", lambda rows: any(r["state"] == "DEAD" for r in rows))
    table = cli(cluster, "list", "actors").stdout
    assert table.splitlines()[0].split()[:3] == ["ACTOR_ID", "CLASS_NAME", "STATE"]
    assert workload["named"] in table
    alive = json.loads(cli(cluster, "list", "actors", "-f", "state=alive", "--format", "json").stdout)
    assert workload["gone"] not in {r["actor_id"] for r in alive}
    got = json.loads(cli(cluster, "get", "actors", workload["named"], "--format", "json").stdout)
    assert got["name"] == "counter" and got["required_resources"] == {"CPU": 0.5}
    summary = json.loads(cli(cluster, "summary", "tasks", "--format", "json").stdout)
    assert summary["summary"]["fails"]["state_counts"] == {"FAILED": 1}
    assert "Counter" in cli(cluster, "summary", "actors").stdout
    bad = cli(cluster, "list", "tasks", "-f", "colour=red", check=False)
    assert bad.returncode != 0 and "not supported" in bad.stderr
    missing = cli(cluster, "get", "tasks", "00" * 16, check=False)
    assert missing.returncode != 0 and "no tasks with id" in missing.stderr


def test_the_timeline_is_a_chrome_trace_of_the_tasks(cluster, workload, tmp_path):
    rows_when(cluster, "tasks", lambda rows: len(rows) >= 13)
    out = tmp_path / "trace.json"
    assert "task events" in cli(cluster, "timeline", "-o", str(out)).stdout
    trace = json.loads(out.read_text())
    squares = [e for e in trace if e["name"] == "square"]
    assert len(squares) == 4 and all(e["ph"] == "X" and e["dur"] >= 0 for e in squares)
    assert squares[0]["args"]["state"] == "FINISHED" and squares[0]["tid"].startswith("worker ")


def test_the_head_keeps_only_the_newest_ended_tasks():
    with tempfile.TemporaryDirectory(prefix="oxray-py-") as tmp:
        small = Cluster(Path(tmp))
        small.start(2, "--max-ended-tasks", "50")
        try:
            # Another driver: this module's one holds the other cluster.
            script = ("import oxray\n@oxray.remote\ndef f(x):\n    return x\n"
                      "oxray.init()\nassert len(oxray.get([f.remote(i) for i in range(300)])) == 300\n")
            subprocess.run([sys.executable, "-c", script], env=small.env, check=True, timeout=120)
            rows_when(small, "tasks", lambda rows: len(rows) >= 50)
            listed = state(small, "tasks", limit=10000)
            assert len(listed["result"]) == 50
            assert "not shown" in listed["warnings"][0]
        finally:
            small.stop()
