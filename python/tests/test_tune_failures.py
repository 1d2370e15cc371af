"""oxray.tune when things die, on a head with 1 CPU and two agents with 2 CPUs each: a node
lost under its trials, and the driver SIGKILLed mid-run then `Tuner.restore`d."""

import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

import oxray
from oxray import tune
from oxray.tune import Checkpoint, FailureConfig, RunConfig, TuneConfig, Tuner

from conftest import Cluster, agent_pid, driver_of

HERE = Path(__file__).parent


@pytest.fixture(scope="module")
def two_agents(tmp_path_factory):
    cluster = Cluster(tmp_path_factory.mktemp("tune-failures"))
    try:
        cluster.start_head_and_agents(("node-b", "node-c"))
        # The workers import this module's trainables by name, as a job's would.
        with driver_of(cluster, runtime_env={"env_vars": {"PYTHONPATH": str(HERE)}}):
            yield cluster
    finally:
        cluster.stop()


def steps_with_checkpoints(config):
    """`config["steps"]` steps of `config["step_s"]`, a checkpoint each; each start of the
    trial is noted in `config["log"]` with where it started from."""
    start = 0
    checkpoint = tune.get_checkpoint()
    if checkpoint:
        with checkpoint.as_directory() as d:
            start = int(Path(d, "step").read_text()) + 1
    node = oxray.get_runtime_context().get_node_id()
    with open(config["log"], "a") as log:
        log.write(json.dumps({"id": config["id"], "start": start, "node": node}) + "\n")
    for step in range(start, config["steps"]):
        time.sleep(config["step_s"])
        with tempfile.TemporaryDirectory() as d:
            Path(d, "step").write_text(str(step))
            tune.report({"step": step, "start": start, "node": node}, checkpoint=Checkpoint.from_directory(d))


def _starts(log):
    return [json.loads(line) for line in Path(log).read_text().splitlines()] if Path(log).exists() else []


def _wait_for(condition, what, timeout=60):
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def test_trials_on_a_lost_node_run_again_from_their_checkpoints(two_agents, tmp_path):
    """Each trial takes a whole agent (2 CPUs; the head has 1): SIGKILL one agent, and its
    trial runs again on the other node from its newest checkpoint once that node is free."""
    log = str(tmp_path / "starts")
    config = {"id": tune.grid_search([0, 1]), "steps": 8, "step_s": 0.3, "log": log}
    tuner = Tuner(tune.with_resources(steps_with_checkpoints, {"cpu": 2}), param_space=config,
                  run_config=RunConfig(name="node-lost", storage_path=str(tmp_path / "results"), verbose=0,
                                       failure_config=FailureConfig(max_failures=1)))
    outcome = {}
    thread = threading.Thread(target=lambda: outcome.update(grid=tuner.fit()), daemon=True)
    thread.start()
    _wait_for(lambda: len(_starts(log)) == 2, "both trials to start")
    victim = _starts(log)[0]
    time.sleep(1.0)  # a few checkpoints in
    name = next(n["NodeName"] for n in oxray.nodes() if n["NodeID"] == victim["node"])
    os.kill(agent_pid(two_agents, name), signal.SIGKILL)
    thread.join(120)
    assert not thread.is_alive(), "fit() did not end"
    grid = outcome["grid"]
    assert grid.num_errors == 0, grid.errors
    again = [s for s in _starts(log) if s["id"] == victim["id"]]
    assert len(again) == 2, again
    assert again[1]["node"] != victim["node"] and again[1]["start"] >= 1, "resumed elsewhere, from a checkpoint"
    by_id = {r.config["id"]: r for r in grid}
    assert by_id[victim["id"]].metrics["step"] == 7 and by_id[victim["id"]].metrics["start"] == again[1]["start"]


DRIVER = """
import sys
import oxray
from oxray import tune
from oxray.tune import RunConfig, TuneConfig, Tuner
import test_tune_failures as t

oxray.init(runtime_env={"env_vars": {"PYTHONPATH": sys.argv[3]}})
config = {"id": tune.grid_search(list(range(4))), "steps": 3, "step_s": 0.3, "log": sys.argv[1]}
Tuner(t.steps_with_checkpoints, param_space=config, tune_config=TuneConfig(max_concurrent_trials=1),
      run_config=RunConfig(name="killed", storage_path=sys.argv[2], verbose=0)).fit()
"""


def test_restore_after_the_driver_was_killed_finishes_only_what_had_not(two_agents, tmp_path):
    log, storage = str(tmp_path / "starts"), str(tmp_path / "results")
    env = dict(os.environ, PYTHONPATH=f"{HERE}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    driver = subprocess.Popen([sys.executable, "-c", DRIVER, log, storage, str(HERE)], env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        # Two trials done (one at a time), the third under way: then the driver dies.
        _wait_for(lambda: len(_starts(log)) >= 3 and _reported(storage, _starts(log)[2]["id"]),
                  "a third trial's report")
    finally:
        driver.kill()
        driver.wait()
    before = _starts(log)
    path = os.path.join(storage, "killed")
    grid = Tuner.restore(path, steps_with_checkpoints).fit()
    assert len(grid) == 4 and grid.num_errors == 0 and grid.num_terminated == 4
    restarted = _starts(log)[len(before):]
    ids = sorted(s["id"] for s in restarted)
    assert set(ids).isdisjoint({before[0]["id"], before[1]["id"]}), "a finished trial ran again"
    assert before[2]["id"] in ids, restarted
    third = next(s for s in restarted if s["id"] == before[2]["id"])
    assert third["start"] >= 1, "the interrupted trial goes on from its checkpoint"
    assert all(r.metrics["step"] == 2 for r in grid)


def _reported(storage, trial_id):
    """Whether the trial with this `id` has a result on storage yet."""
    for params in Path(storage, "killed").glob("*/params.json"):
        if json.loads(params.read_text())["id"] == trial_id:
            return (params.parent / "result.json").exists()
    return False
