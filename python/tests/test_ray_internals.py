"""Ray names libraries import beyond the core API, on a real two-node cluster: the
`accelerator_type` option (a head without GPUs, a node declaring an A100), vLLM's
`ray._private.state` per-node resources, `ray.types.ObjectRef`, and the same names under
`import ray`. The head lets work no node can hold wait (OXRAY_AUTOSCALING), as Ray does."""

import json
import os
import subprocess
import sys
import tempfile
import textwrap
import types
from pathlib import Path

import pytest

import oxray
import oxray._private.state as private_state
from conftest import OXRAY_BIN, Cluster, api, driver_of
from netns import wait_for
from oxray.util import state


@oxray.remote
def where():
    return oxray.get_runtime_context().get_node_id()


@oxray.remote(accelerator_type="A100", num_cpus=0.5)
class OnA100:
    def place(self):
        context = oxray.get_runtime_context()
        return context.get_node_id(), context.get_assigned_resources()

    def gpus(self):
        ids = oxray.get_runtime_context().get_accelerator_ids()
        return ids["GPU"], ids["NPU"], oxray.get_gpu_ids()


@pytest.fixture(scope="module")
def nodes():
    with tempfile.TemporaryDirectory(prefix="oxray-accel-") as tmp:
        c = Cluster(Path(tmp))
        c.env["OXRAY_AUTOSCALING"] = "1"
        c.start(1)
        try:
            address = json.loads(Path(c.env["OXRAY_HOME"], "current_cluster.json").read_text())["address"]
            c.oxray("start", "--address", address, "--num-cpus", "2", "--num-gpus", "1", "--resources",
                    '{"accelerator_type:A100": 1}', "--node-ip-address", "127.0.0.1", "--node-name", "a100")
            with driver_of(c):
                wait_for("two nodes", lambda: len(private_state.total_resources_per_node()) == 2)
                [a100] = state.list_nodes(filters=[("node_name", "=", "a100")])
                [head] = state.list_nodes(filters=[("is_head_node", "=", True)])
                yield {"cluster": c, "a100": a100.node_id, "head": head.node_id}
        finally:
            c.stop()


def test_accelerator_type_places_tasks_and_actors_on_that_model(nodes):
    on_a100 = where.options(accelerator_type="A100")
    assert set(oxray.get([on_a100.remote() for _ in range(4)])) == {nodes["a100"]}
    assert oxray.get(where.remote()) == nodes["head"], "without it, plain tasks stay on the driver's node"
    actor = OnA100.remote()
    node, held = oxray.get(actor.place.remote())
    assert node == nodes["a100"] and held == {"CPU": 0.5, "accelerator_type:A100": 0.001}
    oxray.kill(actor)
    # What the head was asked for, as Ray asks: a sliver of the model's resource.
    def requests():
        return [r.required_resources for r in state.list_tasks(filters=[("name", "=", "where")], detail=True)]
    wait_for("the request in the task's row", lambda: {"CPU": 1.0, "accelerator_type:A100": 0.001} in requests())


def test_work_asking_for_a_model_no_node_has_stays_pending(nodes):
    ref = where.options(accelerator_type="H100").remote()
    ready, _ = oxray.wait([ref], timeout=3)
    assert not ready
    task = wait_for("its row", lambda: state.get_task(ref))
    assert task.state == "PENDING_NODE_ASSIGNMENT"

    def pending():
        with api(nodes["cluster"], "/api/cluster_status") as response:
            waiting = json.loads(response.read())["data"]["cluster_status"].get("pending_resources", [])
        return [p["resources"] for p in waiting]
    wait_for("the demand", lambda: {"CPU": 1.0, "accelerator_type:H100": 0.001} in pending())
    oxray.cancel(ref)
    with pytest.raises(oxray.exceptions.TaskCancelledError):
        oxray.get(ref, timeout=30)


def test_accelerator_ids_and_gpu_ids_of_a_gpu_lease(nodes):
    actor = OnA100.options(num_gpus=1).remote()
    assert oxray.get(actor.gpus.remote()) == (["0"], [], [0])
    oxray.kill(actor)


def test_accelerator_type_is_checked_and_shared_with_train():
    with pytest.raises(TypeError, match="accelerator_type must be a string"):
        where.options(accelerator_type=100)
    with pytest.raises(ValueError, match="not be empty"):
        OnA100.options(accelerator_type="")
    from oxray.train import ScalingConfig

    assert ScalingConfig(accelerator_type="A100").worker_resources() == {"CPU": 1.0, "accelerator_type:A100": 0.001}


def test_resources_per_node_as_vllm_reads_them(nodes):
    totals = private_state.total_resources_per_node()
    assert set(totals) == {nodes["a100"], nodes["head"]}
    listed = {n.node_id: n.resources_total for n in state.list_nodes()}
    assert totals == {node: {k: v for k, v in r.items() if v > 0} for node, r in listed.items()}
    assert totals[nodes["a100"]]["accelerator_type:A100"] == 1.0 and "GPU" not in totals[nodes["head"]]
    assert private_state.cluster_resources() == oxray.cluster_resources()
    assert private_state.state.node_table() == oxray.nodes() == private_state.nodes()
    assert private_state.node_ids() == ["node:127.0.0.1", "node:127.0.0.1"]
    # A resource all in use is left out of a node's available ones, as in Ray.
    busy = OnA100.options(num_cpus=2).remote()
    oxray.get(busy.place.remote())
    wait_for("the a100 node busy", lambda: "CPU" not in private_state.available_resources_per_node()[nodes["a100"]])
    assert private_state.available_resources_per_node()[nodes["head"]]["CPU"] == 1.0
    oxray.kill(busy)
    wait_for("the a100 node free",
             lambda: private_state.available_resources_per_node()[nodes["a100"]].get("CPU") == 2.0)


def test_actors_and_jobs_tables(nodes):
    actor = OnA100.options(name="tabled").remote()
    oxray.get(actor.place.remote())
    table = wait_for("the actor", lambda: private_state.actors(actor_state_name="ALIVE").get(actor._actor_id))
    assert (table["ActorClassName"], table["Name"], table["State"]) == ("OnA100", "tabled", "ALIVE")
    assert table["Address"]["NodeID"] == nodes["a100"] and table["Pid"] > 0
    assert private_state.actors(actor._actor_id)["ActorID"] == actor._actor_id
    assert private_state.actors("00" * 16) == {}
    with pytest.raises(ValueError, match="not a valid actor state name"):
        private_state.actors(actor_state_name="SLEEPING")
    oxray.kill(actor)
    job = oxray.get_runtime_context().get_job_id()
    [mine] = [j for j in private_state.jobs() if j["JobID"] == job]
    assert mine["DriverPid"] == os.getpid() and not mine["IsDead"]


def test_ray_types_object_ref():
    from oxray.types import ObjectRef

    assert isinstance(ObjectRef[int], types.GenericAlias) and ObjectRef is oxray.ObjectRef


def test_the_names_under_import_ray(tmp_path):
    code = textwrap.dedent("""
        import oxray
        assert oxray.install_as_ray(shadow_installed_ray=True)
        import ray
        from ray.util.state import list_nodes
        from ray._private.state import available_resources_per_node
        from ray.types import ObjectRef

        ray.init(num_cpus=1)
        [node] = list_nodes()
        print(node.node_id in available_resources_per_node(), list(ray._private.state.total_resources_per_node())
              == [node.node_id], ObjectRef is ray.ObjectRef, ray.util.state.list_actors() == [])
        ray.shutdown()
    """)
    env = {k: v for k, v in os.environ.items() if not k.startswith("OXRAY_")}
    env.update(OXRAY_BIN=OXRAY_BIN, OXRAY_HOME=str(tmp_path / "home"), OXRAY_AS_RAY="force")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["True", "True", "True", "True"]


def test_data_and_serve_options_carry_accelerator_type(nodes):
    """Data's `ray_remote_args` and Serve's `ray_actor_options` reach the same request."""
    import oxray.data
    from oxray.remote_function import resource_request

    def node_of(row):  # defined here: a worker cannot import this test module
        return {**row, "node": oxray.get_runtime_context().get_node_id()}

    rows = oxray.data.range(4, override_num_blocks=2).map(node_of, accelerator_type="A100").take_all()
    assert {r["node"] for r in rows} == {nodes["a100"]}
    assert resource_request({"num_gpus": 1, "accelerator_type": "A100"}, default_cpus=1) == \
        {"CPU": 1.0, "GPU": 1.0, "accelerator_type:A100": 0.001}
