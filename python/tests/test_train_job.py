"""The users' FashionMNIST script (python/tests/seed_fashion_mnist/train.py), submitted with
`oxray job submit --working-dir` to a three-node cluster, on a small FashionMNIST-format
data set written here (no downloads)."""

import json
import re
import shutil
import struct
import sys
from pathlib import Path

import pytest

pytest.importorskip("torchvision")

from conftest import Cluster  # noqa: E402

SEED = Path(__file__).parent / "seed_fashion_mnist"


def _write_fashion_mnist(root: Path, train: int, test: int) -> None:
    """Images whose class shows in them (a bright band at a row set by the label), in the
    idx files torchvision's FashionMNIST reads."""
    import numpy as np

    raw = root / "FashionMNIST" / "raw"
    raw.mkdir(parents=True)
    rng = np.random.default_rng(0)
    for prefix, count in (("train", train), ("t10k", test)):
        labels = rng.integers(0, 10, count).astype(np.uint8)
        images = rng.integers(0, 60, (count, 28, 28)).astype(np.uint8)
        for i, label in enumerate(labels):
            images[i, 2 + 2 * label: 4 + 2 * label, :] = 255
        (raw / f"{prefix}-images-idx3-ubyte").write_bytes(struct.pack(">IIII", 2051, count, 28, 28) + images.tobytes())
        (raw / f"{prefix}-labels-idx1-ubyte").write_bytes(struct.pack(">II", 2049, count) + labels.tobytes())


@pytest.fixture(scope="module")
def three_nodes(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("seed")
    cluster = Cluster(tmp)
    home = tmp / "user-home"
    home.mkdir()
    # The job's `python` is this venv's, and `~` is a home of its own (data, results).
    cluster.env.update(HOME=str(home), PATH=f"{Path(sys.executable).parent}:{cluster.env['PATH']}")
    _write_fashion_mnist(home / "data", train=1024, test=256)
    cluster.start()
    address = json.loads(Path(cluster.env["OXRAY_HOME"], "current_cluster.json").read_text())["address"]
    for name in ("node-b", "node-c"):
        cluster.oxray("start", "--address", address, "--num-cpus", "2", "--node-ip-address", "127.0.0.1",
                      "--node-name", name)
    cluster.home = home
    yield cluster
    cluster.stop()


def test_the_fashion_mnist_script_trains_through_job_submit(three_nodes, tmp_path):
    workdir = tmp_path / "work"
    shutil.copytree(SEED, workdir)
    import subprocess

    from conftest import OXRAY_BIN

    done = subprocess.run([OXRAY_BIN, "job", "submit", "--address", three_nodes.dashboard_url, "--working-dir",
                           str(workdir), "--", "python", "train.py"], env=three_nodes.env, capture_output=True,
                          text=True, timeout=600)
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-4000:]
    assert "succeeded" in out, out[-4000:]
    assert "(TrainWorker pid=" in out, "what the workers print reaches the job's log with their name"
    reports = re.findall(r"report \d+: \{'loss': ([0-9.e-]+), 'accuracy': ([0-9.]+)\}", out)
    assert len(reports) == 10, out[-4000:]
    losses, accuracies = [float(r[0]) for r in reports], [float(r[1]) for r in reports]
    # The model learns: its test loss falls. Its accuracy may reach its plateau (on 128 test
    # images a rank sees) in the first epoch already, so it only has to stay there.
    assert losses[-1] < losses[0], reports
    assert accuracies[-1] >= max(0.6, accuracies[0]), reports
    assert "Training result: Result(" in out
    assert list((three_nodes.home / "oxray_results").iterdir()), "the run's directory under ~/oxray_results"
