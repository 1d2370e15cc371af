"""GPU ids on a node that declares two GPUs (none need be present): each lease holds its
own devices and its task or actor sees them as CUDA_VISIBLE_DEVICES, as in Ray; Train's
workers of a node share theirs."""

import os

import pytest

import oxray

from conftest import OXRAY_BIN


@pytest.fixture(scope="module")
def two_gpus(tmp_path_factory):
    names = ("OXRAY_ADDRESS", "OXRAY_AUTH_TOKEN", "OXRAY_HOME", "OXRAY_BIN")
    saved = {k: os.environ.pop(k) for k in names if k in os.environ}
    os.environ.update(OXRAY_BIN=OXRAY_BIN, OXRAY_HOME=str(tmp_path_factory.mktemp("gpu-home")))
    oxray.init(num_cpus=4, num_gpus=2)
    yield
    oxray.shutdown()
    for k in names:
        os.environ.pop(k, None)
    os.environ.update(saved)


@oxray.remote
class Holder:
    def visible(self):
        return os.environ.get("CUDA_VISIBLE_DEVICES"), oxray.get_gpu_ids()


def test_actors_hold_distinct_gpus_and_give_them_back(two_gpus):
    first, second = Holder.options(num_gpus=1).remote(), Holder.options(num_gpus=1).remote()
    seen = oxray.get([first.visible.remote(), second.visible.remote()])
    assert sorted(s[0] for s in seen) == ["0", "1"]
    assert sorted(s[1] for s in seen) == [[0], [1]]
    oxray.kill(first)
    oxray.kill(second)
    both = Holder.options(num_gpus=2).remote()
    assert oxray.get(both.visible.remote()) == ("0,1", [0, 1])
    oxray.kill(both)


def test_tasks_see_their_lease_and_nothing_without_one(two_gpus):
    @oxray.remote
    def visible():
        return os.environ.get("CUDA_VISIBLE_DEVICES", "")

    assert oxray.get(visible.options(num_gpus=1).remote()) in ("0", "1")
    assert oxray.get(visible.remote()) == ""
    halves = oxray.get([visible.options(num_gpus=0.5).remote() for _ in range(2)])
    assert halves[0] == halves[1] and halves[0] in ("0", "1")


def test_train_workers_of_a_node_share_their_gpus(two_gpus, tmp_path):
    pytest.importorskip("torch")
    from oxray import train
    from oxray.train import RunConfig, ScalingConfig
    from oxray.train.torch import TorchConfig, TorchTrainer

    def fn():
        train.report({"visible": os.environ["CUDA_VISIBLE_DEVICES"], "own": os.environ["OXRAY_TRAIN_GPU_IDS"],
                      "local_rank": train.get_context().get_local_rank()})

    seen = []

    class Keep:
        def after_report(self, run_context, metrics, checkpoint):
            seen.extend(metrics)

    # gloo: no GPU is really there to run NCCL on.
    TorchTrainer(fn, torch_config=TorchConfig(backend="gloo"),
                 scaling_config=ScalingConfig(num_workers=2, use_gpu=True),
                 run_config=RunConfig(storage_path=str(tmp_path), callbacks=[Keep()])).fit()
    assert [m["visible"] for m in seen] == ["0,1", "0,1"]
    assert [(m["local_rank"], m["own"]) for m in seen] == [(0, "0"), (1, "1")]
