"""The pure decisions of oxray.train: configs, ranks, retention, snapshot, storage."""

import json
import math
import os
import shutil
import time

import pytest

from oxray.train import CheckpointConfig, FailureConfig, RunConfig, ScalingConfig
from oxray.train._checkpoints import CheckpointManager, flatten
from oxray.train._ranks import assign_ranks, never_fits, shared_visible_devices, workers_that_fit
from oxray.train._result import Result
from oxray.train._storage import Storage
from oxray.train._trainer import _arguments


def test_scaling_config_defaults_and_errors():
    assert ScalingConfig().worker_resources() == {"CPU": 1.0}
    assert ScalingConfig(use_gpu=True).worker_resources() == {"GPU": 1.0}
    assert ScalingConfig(use_gpu=True, resources_per_worker={"CPU": 2}).worker_resources() == {"CPU": 2.0, "GPU": 1.0}
    assert ScalingConfig(resources_per_worker={"CPU": 1, "memory": 0}).worker_resources() == {"CPU": 1.0}
    assert ScalingConfig(num_workers=3).total_resources() == {"CPU": 3.0}
    elastic = ScalingConfig(num_workers=(1, 4))
    assert elastic.elastic and (elastic.min_workers, elastic.max_workers) == (1, 4)
    assert ScalingConfig(num_workers=0).local_mode
    with pytest.raises(ValueError, match="use_gpu=True"):
        ScalingConfig(resources_per_worker={"GPU": 1})
    with pytest.raises(ValueError, match="GPU=0"):
        ScalingConfig(use_gpu=True, resources_per_worker={"GPU": 0})
    for bad in (-1, (3, 2), (0, 2), "2", True):
        with pytest.raises(ValueError):
            ScalingConfig(num_workers=bad)
    with pytest.raises(ValueError, match="placement_strategy"):
        ScalingConfig(placement_strategy="NEAR")
    with pytest.raises(DeprecationWarning):
        ScalingConfig(trainer_resources={"CPU": 1})


def test_label_selectors_of_the_workers():
    assert ScalingConfig(num_workers=2).worker_selectors(2) is None
    assert ScalingConfig(num_workers=2, label_selector={"zone": "a"}).worker_selectors(2) == [{"zone": "a"}] * 2
    each = ScalingConfig(num_workers=(1, 3), label_selector=[{"zone": "a"}, {"zone": "b"}, {}])
    assert each.worker_selectors(2) == [{"zone": "a"}, {"zone": "b"}], "a smaller elastic group takes the first"
    with pytest.raises(ValueError, match="2 selectors for 3 workers"):
        ScalingConfig(num_workers=3, label_selector=[{}, {}])
    with pytest.raises(TypeError, match="label_selector"):
        ScalingConfig(label_selector="zone=a")
    with pytest.raises(TypeError, match="must be a string"):
        ScalingConfig(label_selector={"zone": 1})


def test_run_failure_checkpoint_configs():
    run = RunConfig(storage_path="/tmp/x")
    assert run.name.startswith("oxray_train_run-") and run.failure_config.max_failures == 0
    assert RunConfig().storage_path.endswith("oxray_results")
    with pytest.raises(ValueError):
        RunConfig(name="a/b")
    with pytest.raises(ValueError):
        FailureConfig(max_failures=-2)
    with pytest.raises(ValueError):
        CheckpointConfig(num_to_keep=0)
    with pytest.raises(ValueError):
        CheckpointConfig(checkpoint_score_order="up")
    with pytest.raises(DeprecationWarning):
        CheckpointConfig(checkpoint_frequency=1)
    with pytest.raises(DeprecationWarning):
        RunConfig(stop={"loss": 0})


def test_training_function_arguments():
    assert _arguments(lambda: 0, None) == ()
    assert _arguments(lambda: 0, {"a": 1}) == ()
    assert _arguments(lambda config: 0, None) == ({},)
    assert _arguments(lambda config: 0, {"a": 1}) == ({"a": 1},)
    assert _arguments(lambda config=None: 0, {"a": 1}) == ({"a": 1},)
    with pytest.raises(ValueError, match="at most one argument"):
        _arguments(lambda a, b: 0, None)


def test_ranks_group_by_node_and_sort_by_gpu():
    workers = [
        {"node_id": "B", "node_ip": "10.0.0.2", "gpu_ids": ["3"]},
        {"node_id": "A", "node_ip": "10.0.0.1", "gpu_ids": ["1"]},
        {"node_id": "B", "node_ip": "10.0.0.2", "gpu_ids": ["0"]},
        {"node_id": "A", "node_ip": "10.0.0.1", "gpu_ids": ["0"]},
    ]
    ranks = assign_ranks(workers)
    # Node B appears first; within it GPU 0 comes before GPU 3.
    assert [r["world_rank"] for r in ranks] == [1, 3, 0, 2]
    assert [r["local_rank"] for r in ranks] == [1, 1, 0, 0]
    assert [r["node_rank"] for r in ranks] == [0, 1, 0, 1]
    assert all(r["local_world_size"] == 2 for r in ranks)
    assert shared_visible_devices(workers) == ["0,3", "0,1", "0,3", "0,1"]
    cpu = assign_ranks([{"node_id": "A", "node_ip": "x", "gpu_ids": []}] * 2)
    assert [(r["world_rank"], r["local_rank"]) for r in cpu] == [(0, 0), (1, 1)]


def free(*nodes, labels=()):
    return [{"free": n, "labels": dict(labels[i]) if i < len(labels) else {}} for i, n in enumerate(nodes)]


def test_how_many_workers_fit():
    per = {"CPU": 1.0}
    assert workers_that_fit(per, free({"CPU": 2.0}, {"CPU": 1.5}, {}), cap=10) == 3
    assert workers_that_fit(per, free({"CPU": 2.0}, {"CPU": 2.0}), cap=3) == 3
    assert workers_that_fit({"CPU": 1.0, "GPU": 1.0}, free({"CPU": 4.0, "GPU": 1.0}), cap=4) == 1
    zones = free({"CPU": 2.0}, {"CPU": 2.0}, labels=[{"zone": "a"}, {"zone": "b"}])
    assert workers_that_fit(per, zones, cap=4, selectors=[{"zone": "b"}] * 4) == 2, "only zone b's CPUs count"
    assert workers_that_fit(per, zones, cap=4, selectors=[{"zone": "!c"}] * 4) == 4
    assert workers_that_fit(per, zones, cap=3, selectors=[{"zone": "a"}, {"zone": "c"}, {"zone": "b"}]) == 1, \
        "a group of n needs its first n selectors met"
    assert never_fits({"CPU": 4.0}, {"CPU": 3.0}) == ["CPU: needs 4, the cluster has 3"]
    assert never_fits({"CPU": 2.0}, {"CPU": 3.0}) == []


def test_retention_keeps_best_and_latest():
    manager = CheckpointManager(CheckpointConfig(num_to_keep=2, checkpoint_score_attribute="loss",
                                                 checkpoint_score_order="min"))
    dropped = []
    for i, loss in enumerate([0.9, 0.5, 0.7, 0.8]):
        dropped += manager.register(f"c{i}", {"loss": loss})
        manager.advance()
    # Best two by loss are c1 (0.5) and c2 (0.7); c3 is the latest, so it stays too.
    assert sorted(c["dir_name"] for c in manager.checkpoints) == ["c1", "c2", "c3"]
    assert dropped == ["c0"]
    assert manager.latest["dir_name"] == "c3"
    again = CheckpointManager.restore(manager.config, manager.snapshot())
    assert again.latest["dir_name"] == "c3" and again.report_index == 4
    assert [c["dir_name"] for c in again.checkpoints] == [c["dir_name"] for c in manager.checkpoints]


def test_retention_without_score_keeps_newest_and_nan_ranks_last():
    manager = CheckpointManager(CheckpointConfig(num_to_keep=1))
    assert manager.register("a", {}) == []
    manager.advance()
    assert manager.register("b", {}) == ["a"]
    scored = CheckpointManager(CheckpointConfig(num_to_keep=1, checkpoint_score_attribute="m/acc"))
    scored.register("x", {"m": {"acc": 0.5}})
    scored.advance()
    assert scored.register("y", {"m": {"acc": math.nan}}) == []  # the latest stays
    scored.advance()
    assert scored.register("z", {"m": {"acc": 0.1}}) == ["y"]
    with pytest.raises(ValueError, match="not a number"):
        scored.register("w", {"other": 1})
    assert flatten({"a": {"b": 1}, "c": 2}) == {"a/b": 1, "c": 2}


def _weights(tmp_path) -> str:
    src = tmp_path / "src"
    src.mkdir()
    (src / "model.txt").write_text("weights")
    return str(src)


def test_storage_and_result_from_path(tmp_path):
    storage = Storage(str(tmp_path), "run")
    storage.create()
    storage.check_reachable()
    storage.upload(_weights(tmp_path), "checkpoint_1")
    manager = CheckpointManager(CheckpointConfig())
    manager.register("checkpoint_1", {"loss": 1.0})
    manager.advance()
    storage.write_text("checkpoint_manager_snapshot.json", manager.snapshot())
    storage.append_line("result.json", json.dumps({"loss": 1.0}))
    storage.append_line("result.json", json.dumps({"loss": 0.5}))
    result = Result.from_path(str(tmp_path / "run"))
    assert result.metrics == {"loss": 0.5}
    assert result.checkpoint.path == str(tmp_path / "run" / "checkpoint_1")
    with result.checkpoint.as_directory() as d:
        assert open(os.path.join(d, "model.txt")).read() == "weights"
    assert result.get_best_checkpoint("loss", "min") == result.checkpoint
    with pytest.raises(FileNotFoundError):
        Result.from_path(str(tmp_path / "nothing"))
    elsewhere = Storage(str(tmp_path / "other"), "run")
    with pytest.raises(RuntimeError, match="all share"):
        elsewhere.check_reachable()


def test_storage_through_a_pyarrow_filesystem(tmp_path):
    """The URI path: every file operation goes through a pyarrow filesystem (here a local
    subtree, the way an s3:// bucket would be reached)."""
    fs = pytest.importorskip("pyarrow.fs")
    from oxray.train import Checkpoint

    remote = fs.SubTreeFileSystem(str(tmp_path / "bucket"), fs.LocalFileSystem())
    (tmp_path / "bucket").mkdir()
    storage = Storage("results", "run", remote)
    storage.create()
    storage.check_reachable()
    storage.upload(_weights(tmp_path), "checkpoint_1")
    storage.append_line("result.json", json.dumps({"loss": 1.0}))
    storage.append_line("result.json", json.dumps({"loss": 0.5}))
    assert storage.read_text("result.json").splitlines() == ['{"loss": 1.0}', '{"loss": 0.5}']
    assert (tmp_path / "bucket" / "results" / "run" / "checkpoint_1" / "model.txt").read_text() == "weights"
    checkpoint = Checkpoint(storage.path("checkpoint_1"), remote)
    with checkpoint.as_directory() as d:
        assert d != storage.path("checkpoint_1") and open(os.path.join(d, "model.txt")).read() == "weights"
    assert not os.path.exists(d), "a downloaded copy is removed afterwards"
    checkpoint.set_metadata({"epoch": 3})
    assert checkpoint.get_metadata() == {"epoch": 3}
    assert "checkpoint_1" in storage.listdir()
    storage.delete("checkpoint_1")
    assert not storage.exists("checkpoint_1")
    uri_fs, path = __import__("oxray.train._storage", fromlist=["resolve"]).resolve(f"file://{tmp_path}/x")
    assert uri_fs is None and path == f"{tmp_path}/x"


def test_upload_mode_decisions():
    from oxray.train import CheckpointUploadMode as Mode
    from oxray.train._session import child_name, committed_checkpoints, deletes_local, upload_mode

    assert upload_mode(Mode.ASYNC) is Mode.ASYNC and upload_mode("no_upload") is Mode.NO_UPLOAD
    with pytest.raises(ValueError, match="SYNC"):
        upload_mode("later")
    assert deletes_local(Mode.ASYNC, None) and not deletes_local(Mode.SYNC, None)
    assert deletes_local(Mode.SYNC, True) and not deletes_local(Mode.ASYNC, False)
    assert not deletes_local(Mode.NO_UPLOAD, True), "a checkpoint already in storage is never removed"
    assert child_name("/r/run/ckpt_1/", "/r/run") == "ckpt_1"
    assert child_name("/r/run/a/b", "/r/run") is None and child_name("/elsewhere/c", "/r/run") is None
    snapshot = json.dumps({"checkpoint_results": [{"dir_name": "a", "metrics": {}}], "current_report_index": 2})
    assert committed_checkpoints(None, 0) == [] and committed_checkpoints(None, 1) is None
    assert committed_checkpoints(snapshot, 2) == [{"dir_name": "a", "metrics": {}}]
    assert committed_checkpoints(snapshot, 3) is None, "this worker's third round is not committed yet"
    assert committed_checkpoints(snapshot[:10], 1) is None, "a snapshot caught half written"


def _local_run(tmp_path, fn, name="run", **checkpoint_config):
    """A run in local mode (num_workers=0): the function runs here, no cluster needed."""
    from oxray.train import DataConfig
    from oxray.train._controller import Controller
    from oxray.train._trainer import Backend

    run_config = RunConfig(name=name, storage_path=str(tmp_path / "results"),
                           checkpoint_config=CheckpointConfig(**checkpoint_config))
    return Controller("test", fn, (), ScalingConfig(num_workers=0), run_config, Backend(), None, DataConfig()).run()


def _write_checkpoint(tmp_path, step: int) -> str:
    d = tmp_path / f"local_{step}"
    d.mkdir()
    (d / "step.txt").write_text(str(step))
    return str(d)


def test_async_uploads_keep_report_order_and_remove_the_local_copy(tmp_path, monkeypatch):
    from oxray import train
    from oxray.train import _storage

    copy = _storage.copy_dir

    def slow_copy(*args):
        time.sleep(0.2)  # the training thread goes on meanwhile
        copy(*args)

    monkeypatch.setattr("oxray.train._session.copy_dir", slow_copy)
    seen = {}

    def fn():
        began = time.monotonic()
        for step in range(3):
            train.report({"step": step}, checkpoint=train.Checkpoint.from_directory(_write_checkpoint(tmp_path, step)),
                         checkpoint_upload_mode=train.CheckpointUploadMode.ASYNC)
        seen["report_s"] = time.monotonic() - began
        train.report({"step": 3})  # metrics only: committed after the uploads before it
        seen["all"] = train.get_all_reported_checkpoints()
        seen["latest"] = train.get_checkpoint()

    result = _local_run(tmp_path, fn, num_to_keep=2)
    assert seen["report_s"] < 0.3, "asynchronous reports do not wait for their uploads"
    assert [m["step"] for m in result._reports] == [0, 1, 2, 3], "committed in the order they were made"
    assert [(os.path.basename(r.checkpoint.path), r.metrics["step"]) for r in seen["all"]] == [
        (os.path.basename(c.path), m["step"]) for c, m in result.best_checkpoints]
    assert [r.metrics["step"] for r in seen["all"]] == [1, 2]
    assert seen["latest"] == result.checkpoint and result.checkpoint.get_metadata() == {}
    with result.checkpoint.as_directory() as d:
        assert open(os.path.join(d, "step.txt")).read() == "2"
    assert not any((tmp_path / f"local_{s}").exists() for s in range(3)), "ASYNC removes the local copies"


def test_no_upload_and_upload_fn_take_checkpoints_already_in_storage(tmp_path):
    from oxray import train

    def fn():
        storage = train.get_context().get_storage()
        assert storage.experiment_fs_path == storage.storage_fs_path + "/run"
        assert train.get_all_reported_checkpoints(train.CheckpointConsistencyMode.COMMITTED) == []
        mine = storage.path("written_by_me")
        os.makedirs(mine)
        train.report({"step": 0}, checkpoint=train.Checkpoint(mine),
                     checkpoint_upload_mode=train.CheckpointUploadMode.NO_UPLOAD)

        def upload(checkpoint, dir_name):
            target = storage.path("custom_" + dir_name)
            shutil.copytree(checkpoint.path, target)
            return train.Checkpoint(target)

        local = _write_checkpoint(tmp_path, 1)
        train.report({"step": 1}, checkpoint=train.Checkpoint.from_directory(local), checkpoint_dir_name="one",
                     checkpoint_upload_fn=upload, delete_local_checkpoint_after_upload=True)
        assert not os.path.exists(local)
        with pytest.raises(ValueError, match="not a directory of the run's storage"):
            train.report({"step": 2}, checkpoint=train.Checkpoint.from_directory(_write_checkpoint(tmp_path, 2)),
                         checkpoint_upload_mode="NO_UPLOAD")
        with pytest.raises(ValueError, match="validation"):
            train.report({"step": 2}, validation=True)
        return [os.path.basename(r.checkpoint.path) for r in train.get_all_reported_checkpoints(timeout_s=5)]

    result = _local_run(tmp_path, fn)
    assert result.return_value == ["written_by_me", "custom_one"]
    assert os.path.basename(result.checkpoint.path) == "custom_one"
    assert os.path.exists(os.path.join(result.checkpoint.path, "step.txt"))


def test_a_failed_async_upload_fails_the_run_and_commits_nothing_after_it(tmp_path, monkeypatch):
    from oxray import train
    from oxray.train import WorkerGroupError

    def broken_copy(*args):
        raise OSError("disk full")

    monkeypatch.setattr("oxray.train._session.copy_dir", broken_copy)

    def fn():
        train.report({"step": 0}, checkpoint=train.Checkpoint.from_directory(_write_checkpoint(tmp_path, 0)),
                     checkpoint_upload_mode=train.CheckpointUploadMode.ASYNC)
        train.report({"step": 1})

    with pytest.raises(WorkerGroupError, match="disk full"):
        _local_run(tmp_path, fn)
    assert not (tmp_path / "results" / "run" / "result.json").exists(), "neither report was committed"
    with pytest.raises(TimeoutError):  # outside a run there is nothing to wait for
        from oxray.train._session import Session, TrainContext

        Session(TrainContext(storage=Storage(str(tmp_path), "none")), None, lambda r: None, lambda v: v,
                reports_before=1).reported_checkpoints(timeout_s=0.1)


def test_user_callbacks_see_every_report_and_the_failure(tmp_path):
    from oxray import train

    class Tracker(train.UserCallback):
        def __init__(self):
            self.reports, self.failures = [], []

        def after_report(self, run_context, metrics, checkpoint):
            self.reports.append((metrics, checkpoint))

        def after_exception(self, run_context, worker_exceptions):
            self.failures.append(worker_exceptions)

    tracker = Tracker()

    def fn():
        train.report({"step": 0})
        raise KeyError("bad batch")

    from oxray.train import DataConfig, WorkerGroupError
    from oxray.train._controller import Controller
    from oxray.train._trainer import Backend

    run_config = RunConfig(name="tracked", storage_path=str(tmp_path), callbacks=[tracker, train.UserCallback()])
    with pytest.raises(WorkerGroupError):
        Controller("test", fn, (), ScalingConfig(num_workers=0), run_config, Backend(), None, DataConfig()).run()
    assert tracker.reports == [([{"step": 0}], None)]
    assert [list(f) for f in tracker.failures] == [[0]] and isinstance(tracker.failures[0][0], KeyError)


def test_what_train_v2_removed_raises():
    pytest.importorskip("torch")
    from oxray.train import torch as train_torch

    for removed in (train_torch.accelerate, train_torch.backward, train_torch.prepare_optimizer):
        with pytest.raises(DeprecationWarning, match="Train V2"):
            removed(None)
    with pytest.raises(ValueError, match="validation"):
        train_torch.TorchTrainer(lambda: None, validation_config=object())
