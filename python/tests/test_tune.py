"""oxray.tune end to end on a real 2-CPU cluster: grid and random search, ASHA stopping
bad trials early, errors, retries from checkpoints, class trainables, and trial workers
reused across trials."""

import json
import os
import tempfile
import time
from pathlib import Path

import pytest

from oxray import tune
from oxray.tune import Checkpoint, FailureConfig, RunConfig, TuneConfig, Tuner
from oxray.tune.schedulers import ASHAScheduler

from conftest import Cluster, driver_of


@pytest.fixture(scope="module")
def tune_cluster(tmp_path_factory):
    cluster = Cluster(tmp_path_factory.mktemp("tune"))
    try:
        cluster.start()
        # The workers import this module's trainables by name, as a job's would.
        with driver_of(cluster, runtime_env={"env_vars": {"PYTHONPATH": str(Path(__file__).parent)}}):
            yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def storage(tmp_path):
    return str(tmp_path / "results")


def quadratic(config):
    for step in range(3):
        tune.report({"loss": (config["x"] - 3) ** 2 + config["noise"] / (step + 1), "step": step})


def test_grid_and_random_search(tune_cluster, storage):
    grid = Tuner(quadratic, param_space={"x": tune.grid_search([1, 2, 3, 4]), "noise": tune.uniform(0, 0.1)},
                 tune_config=TuneConfig(metric="loss", mode="min", num_samples=2),
                 run_config=RunConfig(name="grid", storage_path=storage, verbose=0)).fit()
    assert len(grid) == 8 and grid.num_errors == 0 and grid.num_terminated == 8
    best = grid.get_best_result()
    assert best.config["x"] == 3 and best.metrics["training_iteration"] == 3
    assert sorted(r.config["x"] for r in grid) == [1, 1, 2, 2, 3, 3, 4, 4]
    trial_dir = Path(best.path)
    assert trial_dir.parent == Path(storage, "grid")
    assert trial_dir.name.startswith("quadratic_") and "x=3_" in trial_dir.name
    for name in ("params.json", "params.pkl", "result.json", "progress.csv"):
        assert (trial_dir / name).exists(), name
    assert len((trial_dir / "result.json").read_text().splitlines()) == 3
    assert (trial_dir / "progress.csv").read_text().splitlines()[0].startswith("loss,step,")
    assert Tuner.can_restore(os.path.join(storage, "grid"))
    with pytest.raises(tune.TuneError, match="accuracy"):
        grid.get_best_result(metric="accuracy", mode="max")
    pandas = pytest.importorskip("pandas")
    frame = grid.get_dataframe()
    assert isinstance(frame, pandas.DataFrame) and len(frame) == 8 and "config/x" in frame.columns


def test_the_driver_prints_a_table_of_trials_and_each_end(tune_cluster, storage, capsys):
    Tuner(quadratic, param_space={"x": tune.grid_search([1, 3]), "noise": 0.0},
          tune_config=TuneConfig(metric="loss", mode="min"),
          run_config=RunConfig(name="printed", storage_path=storage)).fit()
    out = capsys.readouterr().out
    assert out.startswith(f"View detailed results here: {os.path.join(storage, 'printed')}\n")
    assert out.count("completed after 3 iterations") == 2
    final = out[out.rindex("Trial status:"):].splitlines()
    assert final[0] == "Trial status: 2 TERMINATED"
    assert final[2].startswith("Logical resource usage: 0.0/") and final[2].endswith(" GPUs")
    assert final[3].startswith("Current best trial: ") and "with loss=0 and params={'x': 3}" in final[3]
    assert final[5].split()[:7] == ["|", "Trial", "name", "status", "x", "iter", "total"]
    assert final[5].split()[-3:] == ["loss", "step", "|"]
    rows = [line.split() for line in final[7:9]]
    assert sorted(r[3] for r in rows) == ["1", "3"] and {r[2] for r in rows} == {"TERMINATED"}


def climbing(config):
    for i in range(1, 9):
        tune.report({"score": config["q"] * i})


def test_asha_stops_bad_trials_early(tune_cluster, storage):
    scheduler = ASHAScheduler(grace_period=2, reduction_factor=2, max_t=8)
    grid = Tuner(climbing, param_space={"q": tune.grid_search([8, 7, 6, 5, 4, 3, 2, 1])},
                 tune_config=TuneConfig(metric="score", mode="max", scheduler=scheduler, max_concurrent_trials=1),
                 run_config=RunConfig(name="asha", storage_path=storage, verbose=0)).fit()
    iterations = sorted(r.metrics["training_iteration"] for r in grid)
    # Best first, one at a time: every later trial is below its rungs' cutoffs.
    assert iterations[-1] == 8 and iterations.count(2) >= 4, iterations
    assert grid.get_best_result().config["q"] == 8


def flaky(config):
    if config["fail"]:
        raise ValueError("bad config")
    tune.report({"ok": 1})


def test_a_raising_trial_is_in_errors(tune_cluster, storage):
    grid = Tuner(flaky, param_space={"fail": tune.grid_search([False, True])},
                 run_config=RunConfig(name="errors", storage_path=storage, verbose=0)).fit()
    assert grid.num_errors == 1 and grid.num_terminated == 1
    assert "bad config" in str(grid.errors[0])
    failed = [r for r in grid if r.error is not None][0]
    assert (Path(failed.path) / "error.txt").exists()


def crash_once(config):
    start = 0
    checkpoint = tune.get_checkpoint()
    if checkpoint:
        with checkpoint.as_directory() as d:
            start = int(Path(d, "step").read_text()) + 1
    for step in range(start, 4):
        with tempfile.TemporaryDirectory() as d:
            Path(d, "step").write_text(str(step))
            tune.report({"step": step, "start": start}, checkpoint=Checkpoint.from_directory(d))
        marker = Path(config["marker"])
        if step == 1 and not marker.exists():
            marker.write_text("crashed")
            os._exit(1)  # the worker process dies, not only the function


def test_crashed_trial_retried_from_checkpoint(tune_cluster, storage, tmp_path):
    grid = Tuner(crash_once, param_space={"marker": str(tmp_path / "marker")},
                 run_config=RunConfig(name="retry", storage_path=storage, verbose=0,
                                      failure_config=FailureConfig(max_failures=1))).fit()
    result = grid[0]
    assert result.error is None, result.error
    assert result.metrics["step"] == 3 and result.metrics["start"] == 2
    assert result.metrics["training_iteration"] == 4
    assert sorted(p.name for p in Path(result.path).glob("checkpoint_*")) == [f"checkpoint_00000{i}" for i in range(4)]


class Counter(tune.Trainable):
    def setup(self, config):
        self.total = 0
        self.inc = config["inc"]

    def step(self):
        self.total += self.inc
        return {"total": self.total, "done": self.iteration >= 4}

    def save_checkpoint(self, checkpoint_dir):
        return {"total": self.total}

    def load_checkpoint(self, checkpoint):
        self.total = checkpoint["total"]


def test_class_trainable(tune_cluster, storage):
    grid = Tuner(Counter, param_space={"inc": tune.grid_search([1, 2])},
                 tune_config=TuneConfig(metric="total", mode="max"),
                 run_config=RunConfig(name="class", storage_path=storage, verbose=0, stop={"training_iteration": 3},
                                      checkpoint_config=tune.CheckpointConfig(checkpoint_frequency=2))).fit()
    best = grid.get_best_result()
    assert best.config["inc"] == 2 and best.metrics["total"] == 6 and best.metrics["training_iteration"] == 3
    assert best.checkpoint is not None and best.checkpoint.path.endswith("checkpoint_000000")


def pid_of(config):
    tune.report({"i": config["i"]})


def test_workers_are_reused_across_trials(tune_cluster, storage):
    grid = Tuner(pid_of, param_space={"i": tune.grid_search(list(range(12)))},
                 run_config=RunConfig(name="reuse", storage_path=storage, verbose=0)).fit()
    pids = {r.metrics["pid"] for r in grid}
    assert len(grid) == 12 and grid.num_errors == 0
    assert len(pids) <= 2, pids  # two CPUs: two pooled workers ran all twelve trials


def fails_until_marker(config):
    checkpoint = tune.get_checkpoint()
    start = 0
    if checkpoint:
        with checkpoint.as_directory() as d:
            start = int(Path(d, "step").read_text()) + 1
    for step in range(start, 3):
        with tempfile.TemporaryDirectory() as d:
            Path(d, "step").write_text(str(step))
            tune.report({"step": step, "start": start}, checkpoint=Checkpoint.from_directory(d))
        if config["id"] == 1 and step == 0 and not Path(config["marker"]).exists():
            raise RuntimeError("interrupted")


def test_restore_resumes_errored_trials_from_checkpoints(tune_cluster, storage, tmp_path):
    space = {"id": tune.grid_search([0, 1]), "marker": str(tmp_path / "marker")}
    first = Tuner(fails_until_marker, param_space=space,
                  run_config=RunConfig(name="restore", storage_path=storage, verbose=0)).fit()
    assert first.num_errors == 1
    Path(tmp_path / "marker").write_text("go on")
    path = os.path.join(storage, "restore")
    restored = Tuner.restore(path, fails_until_marker, resume_errored=True).fit()
    assert len(restored) == 2 and restored.num_errors == 0
    by_id = {r.config["id"]: r for r in restored}
    assert by_id[1].metrics["start"] == 1 and by_id[1].metrics["training_iteration"] == 3
    assert by_id[0].metrics["step"] == 2


def test_storage_through_a_pyarrow_filesystem(tune_cluster, tmp_path):
    """The path of an s3:// storage: a pyarrow filesystem (here a local subtree standing
    for a bucket). Workers write checkpoints straight to it, the driver uploads its files
    from a staging copy it removes at the end, and a restore reads everything back."""
    fs = pytest.importorskip("pyarrow.fs")
    from oxray.tune._experiment import STAGING

    bucket = tmp_path / "bucket"
    bucket.mkdir()
    remote = fs.SubTreeFileSystem(str(bucket), fs.LocalFileSystem())
    space = {"id": tune.grid_search([0, 1]), "marker": str(tmp_path / "marker")}
    run = RunConfig(name="remote", storage_path="results", storage_filesystem=remote, verbose=0,
                    checkpoint_config=tune.CheckpointConfig(num_to_keep=2))
    first = Tuner(fails_until_marker, param_space=space, run_config=run).fit()
    assert first.num_errors == 1 and first.experiment_path == "results/remote"
    ok = next(r for r in first if r.error is None)
    assert ok.filesystem is remote and ok.path.startswith("results/remote/fails_until_marker_")
    trial_dir = bucket / ok.path
    assert sorted(p.name for p in trial_dir.glob("checkpoint_*")) == ["checkpoint_000001", "checkpoint_000002"]
    assert len((trial_dir / "result.json").read_text().splitlines()) == 3
    assert (bucket / "results" / "remote" / "tuner.pkl").exists()
    assert list((bucket / "results" / "remote").glob("experiment_state-*.json"))
    with ok.checkpoint.as_directory() as d:
        assert Path(d, "step").read_text() == "2"
    again = tune.Result.from_path(ok.path, storage_filesystem=remote)
    assert again.metrics["step"] == 2 and again.path == ok.path and again.checkpoint.path == ok.checkpoint.path
    staging = Path(tempfile.gettempdir(), STAGING)
    assert not list(staging.glob("remote-*")), "the staging copies are removed"
    assert not staging.exists() or any(staging.iterdir()), "and their parent, once empty"

    Path(tmp_path / "marker").write_text("go on")
    assert Tuner.can_restore("results/remote", storage_filesystem=remote)
    restored = Tuner.restore("results/remote", fails_until_marker, resume_errored=True,
                             storage_filesystem=remote).fit()
    by_id = {r.config["id"]: r for r in restored}
    assert restored.num_errors == 0 and by_id[1].metrics["start"] == 1, "resumed from its checkpoint in storage"
    assert by_id[1].metrics["training_iteration"] == 3 and by_id[0].metrics["step"] == 2


def scored(config):
    tune.report({"score": -((config["x"] - 0.3) ** 2)})


class StopAfterThree(tune.Stopper):
    def __init__(self):
        self.results = 0

    def __call__(self, trial_id, result):
        self.results += 1
        return False

    def stop_all(self):
        return self.results >= 3


def test_restore_gives_the_searcher_back_what_it_learnt(tune_cluster, storage):
    pytest.importorskip("optuna")
    from oxray.tune.search.optuna import OptunaSearch

    config = TuneConfig(metric="score", mode="max", num_samples=6, max_concurrent_trials=1,
                        search_alg=OptunaSearch(seed=0))
    first = Tuner(scored, param_space={"x": tune.uniform(0, 1)}, tune_config=config,
                  run_config=RunConfig(name="optuna-restore", storage_path=storage, verbose=0,
                                       stop=StopAfterThree())).fit()
    assert len(first) == 3, "the run was stopped after three trials"
    path = os.path.join(storage, "optuna-restore")
    assert len(list(Path(path).glob("searcher-state-*.pkl"))) == 1
    tuner = Tuner.restore(path, scored)
    grid = tuner.fit()
    assert len(grid) == 6 and grid.num_errors == 0
    # The study the restored searcher asks has the first run's three trials and the three new ones.
    study = tuner.tune_config.search_alg.study
    assert [t.state.name for t in study.trials] == ["COMPLETE"] * 6
    assert sorted(t.params["x"] for t in study.trials) == sorted(r.config["x"] for r in grid)


def with_data(config, data=None):
    tune.report({"total": sum(data) * config["k"], "ctx": tune.get_context().get_trial_id()})


def test_with_parameters_and_resources(tune_cluster, storage):
    trainable = tune.with_resources(tune.with_parameters(with_data, data=list(range(100))), {"cpu": 1})
    grid = Tuner(trainable, param_space={"k": tune.grid_search([1, 2])},
                 tune_config=TuneConfig(metric="total", mode="max"),
                 run_config=RunConfig(name="params", storage_path=storage, verbose=0)).fit()
    best = grid.get_best_result()
    assert best.metrics["total"] == 9900 and best.metrics["ctx"] == best.metrics["trial_id"]


def in_its_group(config):
    import oxray
    from oxray.util import get_current_placement_group

    @oxray.remote(num_cpus=1)
    def child():
        return oxray.get_runtime_context().get_placement_group_id()

    began = time.time()
    group = get_current_placement_group()
    children = oxray.get([child.remote() for _ in range(2)])
    time.sleep(0.5)
    bundles = tune.get_context().get_trial_resources().bundles
    tune.report({"own_group": group is not None and children == [group.id.hex()] * 2, "bundles": len(bundles),
                 "began": began, "ended": time.time()})


def test_a_trial_of_several_bundles_runs_its_tasks_in_its_own_group(tune_cluster, storage):
    """A PlacementGroupFactory's bundles are the trial's: its tasks run in its group, and
    two trials that each need both CPUs of the cluster run one after the other."""
    trainable = tune.with_resources(in_its_group, tune.PlacementGroupFactory([{"CPU": 1}, {"CPU": 1}]))
    grid = Tuner(trainable, param_space={"k": tune.grid_search([1, 2])},
                 run_config=RunConfig(name="bundles", storage_path=storage, verbose=0)).fit()
    assert grid.num_errors == 0, [r.error for r in grid]
    first, second = sorted((r.metrics for r in grid), key=lambda m: m["began"])
    assert first["own_group"] and second["own_group"] and first["bundles"] == 2
    assert second["began"] >= first["ended"], "the second trial waited for the first one's CPUs"
    from oxray.util import placement_group_table

    assert all(g["state"] == "REMOVED" for g in placement_group_table().values()), "groups end with their run"


def train_style(config):
    from oxray import train

    for i in range(2):
        train.report({"loss": config["x"] - i})


def test_train_report_inside_a_trial(tune_cluster, storage):
    grid = Tuner(train_style, param_space={"x": tune.grid_search([1, 5])},
                 tune_config=TuneConfig(metric="loss", mode="min"),
                 run_config=RunConfig(name="train_report", storage_path=storage, verbose=0)).fit()
    assert grid.get_best_result().metrics["loss"] == 0 and grid.num_errors == 0


def _read_step(default=0):
    checkpoint = tune.get_checkpoint()
    if not checkpoint:
        return default, None
    with checkpoint.as_directory() as d:
        return int(Path(d, "step").read_text()) + 1, Path(d, "owner").read_text()


def _report_with_checkpoint(step, metrics):
    with tempfile.TemporaryDirectory() as d:
        Path(d, "step").write_text(str(step))
        Path(d, "owner").write_text(tune.get_context().get_trial_id())
        tune.report(metrics, checkpoint=Checkpoint.from_directory(d))


def stepping(config):
    start, _ = _read_step()
    for step in range(start, 9):
        _report_with_checkpoint(step, {"score": config["q"] * (step + 1), "start": start, "pid_now": os.getpid()})


def test_hyperband_pauses_and_resumes_trials_from_checkpoints(tune_cluster, storage):
    from oxray.tune.schedulers import HyperBandScheduler

    scheduler = HyperBandScheduler(max_t=9, reduction_factor=3)
    grid = Tuner(stepping, param_space={"q": tune.grid_search([1, 2, 3])},
                 tune_config=TuneConfig(metric="score", mode="max", scheduler=scheduler, max_concurrent_trials=2),
                 run_config=RunConfig(name="hyperband", storage_path=storage, verbose=0)).fit()
    assert grid.num_errors == 0 and grid.num_terminated == 3
    by_q = {r.config["q"]: r for r in grid}
    # Three trials in a 9-trial bracket: all go past milestone 1, one past 3, and it runs to max_t.
    assert {q: r.metrics["training_iteration"] for q, r in by_q.items()} == {1: 3, 2: 3, 3: 9}
    # Each paused at milestone 1 (its worker freed) and went on later from its checkpoint.
    assert all(r.metrics["start"] >= 1 for r in grid), [r.metrics["start"] for r in grid]
    lines = (Path(by_q[3].path) / "result.json").read_text().splitlines()
    assert len(lines) == 9  # one line per iteration: nothing was run twice


def climbing_by_lr(config):
    start, owner = _read_step()
    value = 0.0
    checkpoint = tune.get_checkpoint()
    if checkpoint:
        with checkpoint.as_directory() as d:
            value = float(Path(d, "value").read_text())
    for step in range(start, 8):
        value += config["lr"]
        with tempfile.TemporaryDirectory() as d:
            Path(d, "step").write_text(str(step))
            Path(d, "value").write_text(str(value))
            Path(d, "owner").write_text(tune.get_context().get_trial_id())
            tune.report({"value": value, "from": owner or "", "lr": config["lr"], "at": time.time()},
                        checkpoint=Checkpoint.from_directory(d))
        time.sleep(0.05)  # both trials interleave their reports


def test_pbt_exploits_a_bad_trial_onto_a_good_checkpoint(tune_cluster, storage):
    from oxray.tune.schedulers import PopulationBasedTraining

    pbt = PopulationBasedTraining(time_attr="training_iteration", perturbation_interval=2, quantile_fraction=0.5,
                                  hyperparam_mutations={"lr": [1.0, 2.0]}, seed=0)
    grid = Tuner(climbing_by_lr, param_space={"lr": tune.grid_search([1.0, -1.0])},
                 tune_config=TuneConfig(metric="value", mode="max", scheduler=pbt, max_concurrent_trials=2),
                 run_config=RunConfig(name="pbt", storage_path=storage, verbose=0)).fit()
    assert grid.num_errors == 0
    good, bad = sorted(grid, key=lambda r: r.metrics["trial_id"])  # made in grid order: lr 1.0, then -1.0
    # The bad trial took the good one's checkpoint and a config from the mutations, and went on from there.
    assert bad.metrics["from"] == good.metrics["trial_id"], bad.metrics
    assert bad.config["lr"] in (1.0, 2.0) and bad.metrics["value"] > 0
    assert bad.metrics["training_iteration"] == 8


def test_synchronous_pbt_runs_the_population_in_step(tune_cluster, storage):
    from oxray.tune.schedulers import PopulationBasedTraining

    pbt = PopulationBasedTraining(time_attr="training_iteration", perturbation_interval=2, quantile_fraction=0.5,
                                  hyperparam_mutations={"lr": [1.0, 2.0]}, synch=True, seed=0)
    # One trial at a time: each waits at the sync point for the other, giving back its worker.
    grid = Tuner(climbing_by_lr, param_space={"lr": tune.grid_search([1.0, -1.0])},
                 tune_config=TuneConfig(metric="value", mode="max", scheduler=pbt, max_concurrent_trials=1),
                 run_config=RunConfig(name="pbt-synch", storage_path=storage, verbose=0)).fit()
    assert grid.num_errors == 0
    good, bad = sorted(grid, key=lambda r: r.metrics["trial_id"])
    results = {r.metrics["trial_id"]: [json.loads(line) for line in Path(r.path, "result.json").read_text().splitlines()]
               for r in grid}
    assert [len(rs) for rs in results.values()] == [8, 8]
    # In step: with one worker for both, every result up to a sync point comes before any after it.
    at = {(trial_id, r["training_iteration"]): r["at"] for trial_id, rs in results.items() for r in rs}
    for point in (2, 4, 6):
        before = max(t for (_, it), t in at.items() if it <= point)
        after = min(t for (_, it), t in at.items() if it > point)
        assert before < after, f"a trial went past iteration {point} before the other reached it"
    # At the first sync point the bad trial took the good one's checkpoint.
    third = next(r for r in results[bad.metrics["trial_id"]] if r["training_iteration"] == 3)
    assert third["from"] == good.metrics["trial_id"] and third["value"] > 0


def linear_regression_per_worker(config):
    import torch

    from oxray import train
    from oxray.train.torch import prepare_model

    torch.manual_seed(0)
    x = torch.linspace(-1, 1, 64).unsqueeze(1)
    y = 3 * x + 1
    model = prepare_model(torch.nn.Linear(1, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=config["lr"])
    for _ in range(config["epochs"]):
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        train.report({"loss": loss.item(), "rank": train.get_context().get_world_rank()})


def train_driver(config):
    from oxray.train import RunConfig as TrainRunConfig, ScalingConfig
    from oxray.train.torch import TorchTrainer
    from oxray.tune.integration.ray_train import TuneReportCallback

    trial_id = tune.get_context().get_trial_id()
    TorchTrainer(linear_regression_per_worker, train_loop_config={"lr": config["lr"], "epochs": 3},
                 scaling_config=ScalingConfig(num_workers=2, resources_per_worker={"CPU": 0.5}),
                 run_config=TrainRunConfig(name=f"train-trial_id={trial_id}", storage_path=config["storage"],
                                           callbacks=[TuneReportCallback()],
                                           # Train workers started from a trial's worker get their
                                           # own env: they find this module only when told where.
                                           worker_runtime_env={"env_vars": {"PYTHONPATH": config["path"]}})).fit()


def test_tune_over_torch_trainer(tune_cluster, storage):
    pytest.importorskip("torch")
    # Each trial is a 0-CPU driver of a 2-worker gloo group (half a CPU a worker), so both
    # trials' groups fit the 2-CPU cluster at once.
    driver = tune.with_resources(train_driver, {"cpu": 0})
    grid = Tuner(driver, param_space={"lr": tune.grid_search([0.01, 0.3]), "storage": storage + "_train",
                                                  "path": str(Path(__file__).parent)},
                 tune_config=TuneConfig(metric="loss", mode="min", max_concurrent_trials=2),
                 run_config=RunConfig(name="tune_train", storage_path=storage, verbose=0)).fit()
    assert grid.num_errors == 0, grid.errors
    assert all(r.metrics["training_iteration"] == 3 and r.metrics["rank"] == 0 for r in grid)
    assert all("checkpoint_path" in r.metrics for r in grid)
    assert grid.get_best_result().config["lr"] == 0.3
    for result in grid:  # each trial ran its own Train run, named after the trial
        assert Path(storage + "_train", f"train-trial_id={result.metrics['trial_id']}").is_dir()
