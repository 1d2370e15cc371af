"""Ray's state SDK, `ray.util.state`, on a real cluster: lists with Ray's filters and
records, lookups by id, summaries and logs, the errors Ray's client raises, and how the
functions find the cluster (the driver's connection, this machine's cluster, a worker's)."""

import json
import os
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import pytest

import oxray
from conftest import OXRAY_BIN, driver_of
from netns import wait_for
from oxray.util import state
from oxray.util.state.common import ActorState, NodeState, TaskState
from oxray.util.state.exception import RayStateApiException


@oxray.remote
def square(x):
    return x * x


@oxray.remote
def fails():
    raise ValueError("the input was wrong")


@oxray.remote
def says(text):
    print(text, flush=True)
    return os.getpid()


@oxray.remote
def lists_from_a_worker():
    return [(a.class_name, a.state) for a in state.list_actors(filters=[("name", "=", "counter")])]


@oxray.remote
class Counter:
    def __init__(self):
        self.n = 0

    def incr(self):
        self.n += 1
        return self.n


def _ended(summary):
    counts = {name: group["state_counts"] for name, group in summary.items()}
    return counts.get("square") == {"FINISHED": 4} and counts.get("fails") == {"FAILED": 1} and \
        counts.get("says") == {"FINISHED": 1} and counts.get("Counter.incr") == {"FINISHED": 2}


@pytest.fixture(scope="module")
def workload(cluster):
    with driver_of(cluster):
        refs = [square.remote(i) for i in range(4)]
        assert oxray.get(refs) == [0, 1, 4, 9]
        with pytest.raises(Exception):
            oxray.get(fails.remote())
        printer_pid = oxray.get(says.remote("hello from the state sdk"))
        named = Counter.options(name="counter", namespace="sdk", num_cpus=0.5).remote()
        assert oxray.get(named.incr.remote()) == 1
        gone = Counter.remote()
        oxray.get(gone.incr.remote())
        oxray.kill(gone)
        group = oxray.util.placement_group([{"CPU": 0.5}])
        oxray.get(group.ready())
        held = oxray.put(b"x" * 1000)
        # Owners report to the head about once a second.
        wait_for("the workload's tasks", lambda: _ended(state.summarize_tasks()["cluster"]["summary"]))
        wait_for("the killed actor", lambda: state.list_actors(filters=[("state", "=", "DEAD")]))
        yield {"refs": refs, "named": named._actor_id, "gone": gone._actor_id, "group": group.id.hex(),
               "held": held, "printer_pid": printer_pid, "job_id": oxray.get_runtime_context().get_job_id()}
        oxray.util.remove_placement_group(group)


def test_lists_are_records_filtered_as_rays(workload):
    alive = state.list_actors(filters=[("state", "=", "ALIVE")])
    assert all(isinstance(a, ActorState) and a.state == "ALIVE" for a in alive)
    [named] = [a for a in alive if a.actor_id == workload["named"]]
    assert (named.class_name, named.name, named.ray_namespace, named["name"], named.get("pid")) == \
        ("Counter", "counter", "sdk", "counter", named.pid)
    assert named.required_resources is None, "a plain row has the plain columns only"
    assert workload["gone"] not in {a.actor_id for a in alive}
    dead = state.list_actors(filters=[("state", "!=", "alive"), ("class_name", "=", "Counter")], detail=True)
    assert [a.actor_id for a in dead] == [workload["gone"]]
    assert "killed" in dead[0].death_cause["actor_died_error_context"]["error_message"]
    finished = state.list_tasks(filters=[("name", "=", "square"), ("state", "=", "FINISHED")], detail=True)
    assert len(finished) == 4 and all(isinstance(t, TaskState) for t in finished)
    assert finished[0].required_resources == {"CPU": 1.0} and finished[0].asdict()["name"] == "square"
    [failed] = state.list_tasks(filters=[("name", "=", "fails")], detail=True)
    assert failed.error_type == "TASK_EXECUTION_EXCEPTION" and "the input was wrong" in failed.error_message
    [node] = state.list_nodes()
    assert isinstance(node, NodeState) and node.state == "ALIVE" and node.is_head_node
    assert node.resources_total["CPU"] == 2.0 and node.start_time_ms is None
    assert state.list_nodes(detail=True)[0].start_time_ms > 0
    [job] = state.list_jobs(filters=[("job_id", "=", workload["job_id"])])
    assert job.type == "DRIVER" and job.status == "RUNNING"
    [group] = state.list_placement_groups(filters=[("placement_group_id", "=", workload["group"])], detail=True)
    assert group.state == "CREATED" and group.bundles[0]["unit_resources"] == {"CPU": 0.5}
    workers = state.list_workers(filters=[("pid", "=", workload["printer_pid"])])
    assert len(workers) == 1 and workers[0].worker_type == "WORKER"
    assert any(o.object_id == workload["held"].hex() for o in state.list_objects(limit=1000))


def test_limit_and_explain(workload):
    assert len(state.list_tasks(limit=2)) == 2
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        state.list_tasks(limit=2, _explain=True)
    assert any("Limit last 2 entries" in str(w.message) for w in caught)
    with pytest.warns(UserWarning, match="multiple '=' filters"):
        assert state.list_actors(filters=[("state", "=", "ALIVE"), ("state", "=", "DEAD")]) == []


def test_lookups_by_id(workload):
    actor = state.get_actor(workload["named"])
    assert actor.name == "counter" and actor.required_resources == {"CPU": 0.5} and actor.num_restarts == 0
    assert state.get_actor("00" * 16) is None
    by_ref = state.get_task(workload["refs"][2])
    assert isinstance(by_ref, TaskState) and by_ref.name == "square" and by_ref.state == "FINISHED"
    assert state.get_task(by_ref.task_id).events, "a lookup has the detail columns"
    node = state.list_nodes()[0]
    assert state.get_node(node.node_id).node_ip == node.node_ip
    assert state.get_placement_group(workload["group"]).state == "CREATED"
    worker = state.list_workers(filters=[("pid", "=", workload["printer_pid"])])[0]
    assert state.get_worker(worker.worker_id).pid == workload["printer_pid"]
    assert [o.object_id for o in state.get_objects(workload["held"].hex())] == [workload["held"].hex()]
    assert state.get_objects("ff" * 16) == []
    assert state.get_job("no-such-submission") is None


def test_summaries(workload):
    tasks = state.summarize_tasks()["cluster"]
    assert tasks["summary"]["square"]["state_counts"] == {"FINISHED": 4}
    assert tasks["summary"]["fails"]["state_counts"] == {"FAILED": 1} and tasks["summary_by"] == "func_name"
    actors = state.summarize_actors()["cluster"]
    assert actors["summary"]["Counter"]["state_counts"] == {"ALIVE": 1, "DEAD": 1}
    assert state.summarize_objects()["cluster"]["total_objects"] >= 1


def test_logs_by_node_and_by_worker(workload):
    node_id = state.list_nodes()[0].node_id
    files = state.list_logs(node_id=node_id)
    assert any(name.endswith(".out") for name in files["worker_out"])
    text = "".join(state.get_log(node_id=node_id, pid=workload["printer_pid"]))
    assert "hello from the state sdk" in text
    raw = b"".join(state.get_log(node_id=node_id, pid=workload["printer_pid"], encoding=None))
    assert b"hello from the state sdk" in raw
    with pytest.raises(ValueError, match="node ip and node id"):
        state.list_logs()


def test_what_is_not_supported_is_a_clear_error(workload):
    with pytest.raises(RayStateApiException, match="colour is not supported"):
        state.list_actors(filters=[("colour", "=", "red")])
    with pytest.raises(ValueError, match="Unsupported filter predicate >"):
        state.list_tasks(filters=[("attempt_number", ">", 0)])
    with pytest.raises(ValueError, match="incorrect input type"):
        state.list_tasks(filters=[("state", "FINISHED")])
    with pytest.raises(RayStateApiException, match="limit must be between 1 and 10000"):
        state.list_tasks(limit=20000)
    with pytest.raises(RayStateApiException, match="does not keep runtime envs"):
        state.list_runtime_envs()
    with pytest.raises(ValueError, match="Ray Client addresses"):
        state.list_nodes(address="ray://127.0.0.1:10001")
    with pytest.raises(RayStateApiException, match="Failed to connect"):
        state.list_nodes(address="http://127.0.0.1:9", timeout=5)


def test_a_worker_lists_through_its_own_connection(workload):
    assert oxray.get(lists_from_a_worker.remote()) == [("Counter", "ALIVE")]


def test_a_process_not_connected_finds_the_cluster(cluster, workload):
    """This machine's cluster, its dashboard URL, and its bootstrap address all reach the
    same head; listing does not connect the process (its own init still works)."""
    info = json.loads(Path(cluster.env["OXRAY_HOME"], "current_cluster.json").read_text())
    code = textwrap.dedent("""
        import sys
        import oxray
        from oxray.util import state
        counts = [len(state.list_nodes()), len(state.list_nodes(address=sys.argv[1])),
                  len(state.list_actors(address=sys.argv[2], filters=[("name", "=", "counter")]))]
        print(*counts, oxray.is_initialized())
    """)
    env = dict(cluster.env, OXRAY_BIN=OXRAY_BIN)
    out = subprocess.run([sys.executable, "-c", code, info["dashboard_url"], info["address"]], env=env,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["1", "1", "1", "False"]
