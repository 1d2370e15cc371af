"""oxray.data against a real cluster: a head with 4 CPUs and a 96 MiB object store, so a
pipeline of a few hundred megabytes must stream through it."""

import os
import signal
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from oxray import data
from oxray.data import ActorPoolStrategy

from conftest import Cluster, driver_of

pa = pytest.importorskip("pyarrow")
pd = pytest.importorskip("pandas")

STORE = 96 << 20


@pytest.fixture(scope="module")
def small_store(tmp_path_factory):
    cluster = Cluster(tmp_path_factory.mktemp("data"))
    try:
        cluster.oxray("start", "--head", "--port", "0", "--dashboard-port", "0", "--num-cpus", "4",
                      "--object-store-memory", str(STORE), "--node-ip-address", "127.0.0.1")
        with driver_of(cluster, runtime_env={"env_vars": {"PYTHONPATH": str(Path(__file__).parent)}}):
            yield cluster
    finally:
        cluster.stop()


# ---- create and transform ----------------------------------------------------------------

def test_range_counts_without_running_and_takes_in_order(small_store):
    ds = data.range(1000)
    assert ds.count() == 1000
    assert ds.take(3) == [{"id": 0}, {"id": 1}, {"id": 2}]
    assert ds.schema().names == ["id"] and str(ds.schema().types[0]) == "int64"
    assert ds.columns() == ["id"]
    assert [r["id"] for r in ds.iter_rows()] == list(range(1000))


def test_show_prints_rows(small_store, capsys):
    data.from_items([{"a": 1}, {"a": 2}]).show()
    assert capsys.readouterr().out.splitlines() == ["{'a': 1}", "{'a': 2}"]


def test_from_python_values(small_store):
    assert data.from_items([1, 2, 3]).take_all() == [{"item": 1}, {"item": 2}, {"item": 3}]
    assert data.from_items(range(3)).take_all() == [{"item": 0}, {"item": 1}, {"item": 2}]
    with pytest.raises(TypeError):
        data.from_items("abc")
    assert data.from_items([{"a": 1, "b": "x"}, {"a": 2, "b": "y"}]).to_pandas().to_dict("list") == \
        {"a": [1, 2], "b": ["x", "y"]}
    images = np.arange(2 * 3 * 4).reshape(2, 3, 4)
    batch = data.from_numpy(images).take_batch(2)
    assert batch["data"].shape == (2, 3, 4)
    assert data.from_pandas(pd.DataFrame({"x": [1, 2, 3]})).count() == 3
    assert data.from_arrow(pa.table({"x": [1, 2]})).take_batch(batch_format="pyarrow").num_rows == 2


def test_map_filter_flat_map_and_columns(small_store):
    ds = (data.range(100)
          .map(lambda r: {"id": r["id"], "sq": r["id"] ** 2})
          .filter(lambda r: r["id"] % 2 == 0)
          .flat_map(lambda r: [r, r])
          .add_column("neg", lambda df: -df["id"])
          .drop_columns(["sq"])
          .rename_columns({"neg": "minus"})
          .select_columns(["minus"]))
    rows = ds.take_all()
    assert len(rows) == 100 and rows[:4] == [{"minus": 0}, {"minus": 0}, {"minus": -2}, {"minus": -2}]


@pytest.mark.parametrize("fmt", ["numpy", "pandas", "pyarrow"])
def test_map_batches_in_each_format_and_batch_size(small_store, fmt):
    sizes = []

    def double(batch):
        if fmt == "numpy":
            assert isinstance(batch["id"], np.ndarray)
            return {"id": batch["id"] * 2}
        if fmt == "pandas":
            return batch.assign(id=batch["id"] * 2)
        return pa.table({"id": pa.compute.multiply(batch["id"], 2)})

    out = data.range(1000, override_num_blocks=10).map_batches(double, batch_size=64, batch_format=fmt)
    got = [b["id"] for b in out.iter_batches(batch_size=None)]
    assert np.concatenate(got).tolist() == [2 * i for i in range(1000)]
    del sizes


def test_map_batches_bundles_small_blocks_up_to_its_batch_size(small_store):
    seen = data.from_items(list(range(100)), override_num_blocks=50).map_batches(
        lambda b: {"n": np.array([len(b["item"])])}, batch_size=20)
    assert [r["n"] for r in seen.take_all()] == [20] * 5


def test_a_callable_class_runs_on_a_pool_of_that_size(small_store):
    class AddPid:
        def __init__(self, offset):
            self.offset = offset

        def __call__(self, batch):
            return {"id": batch["id"] + self.offset, "pid": np.full(len(batch["id"]), os.getpid())}

    ds = data.range(2000, override_num_blocks=20).map_batches(AddPid, fn_constructor_args=(5,), concurrency=2,
                                                              batch_size=100)
    frame = ds.to_pandas()
    assert sorted(frame["id"]) == [i + 5 for i in range(2000)]
    assert 1 <= frame["pid"].nunique() <= 2
    fixed = data.range(10).map_batches(AddPid, fn_constructor_args=(0,), compute=ActorPoolStrategy(size=1))
    assert fixed.count() == 10


def test_limit_union_repartition_and_shuffles(small_store):
    assert data.range(1000).limit(7).count() == 7
    assert [r["id"] for r in data.range(1000).map(lambda r: r).limit(5).take_all()] == [0, 1, 2, 3, 4]
    union = data.range(3).union(data.range(2))
    assert [r["id"] for r in union.take_all()] == [0, 1, 2, 0, 1]
    parts = data.range(100, override_num_blocks=3).repartition(7).materialize()
    assert parts.num_blocks() == 7 and parts.count() == 100
    shuffled = [r["id"] for r in data.range(200).random_shuffle(seed=3).take_all()]
    assert sorted(shuffled) == list(range(200)) and shuffled != list(range(200))
    blocks = [r["id"] for r in data.range(100, override_num_blocks=10).randomize_block_order(seed=1).take_all()]
    assert sorted(blocks) == list(range(100)) and blocks != list(range(100))


def test_splits(small_store):
    train, test = data.range(10).train_test_split(0.3)
    assert train.count() == 7 and [r["id"] for r in test.take_all()] == [7, 8, 9]
    shares = data.range(11).split(2, equal=True)
    assert [s.count() for s in shares] == [5, 5]
    assert [s.count() for s in data.range(11).split(2)] == [6, 5]


# ---- consume -------------------------------------------------------------------------------

def test_iter_batches_and_torch_batches(small_store):
    ds = data.range(1000, override_num_blocks=7)
    sizes = [len(b["id"]) for b in ds.iter_batches(batch_size=128)]
    assert sizes == [128] * 7 + [104]
    assert [len(b["id"]) for b in ds.iter_batches(batch_size=128, drop_last=True)] == [128] * 7
    shuffled = np.concatenate([b["id"] for b in ds.iter_batches(batch_size=100, local_shuffle_buffer_size=300,
                                                                 local_shuffle_seed=0)])
    assert sorted(shuffled.tolist()) == list(range(1000)) and shuffled.tolist() != list(range(1000))
    frames = list(ds.iter_batches(batch_size=500, batch_format="pandas"))
    assert isinstance(frames[0], pd.DataFrame) and len(frames) == 2
    torch = pytest.importorskip("torch")
    batches = list(ds.iter_torch_batches(batch_size=256, dtypes=torch.float32))
    assert batches[0]["id"].dtype == torch.float32 and batches[-1]["id"].shape == (232,)
    batches[0]["id"] += 1  # tensors may be changed in place
    with pytest.raises(KeyError, match="must name every column"):
        next(iter(data.from_items([{"a": 1, "b": 2}]).iter_torch_batches(dtypes={"a": torch.float32})))
    collated = next(iter(ds.iter_torch_batches(batch_size=4, collate_fn=lambda b: torch.as_tensor(b["id"] + 1))))
    assert collated.tolist() == [1, 2, 3, 4]


def test_materialize_runs_once_and_stats_name_the_operators(small_store, tmp_path):
    calls = tmp_path / "calls"
    calls.mkdir()

    def mark(batch):
        (calls / f"{os.getpid()}-{time.monotonic_ns()}").touch()
        return batch

    ds = data.range(100, override_num_blocks=4).map_batches(mark).materialize()
    assert len(list(calls.iterdir())) == 4
    assert ds.count() == 100 and sum(len(b["id"]) for b in ds.iter_batches()) == 100
    assert len(list(calls.iterdir())) == 4
    assert "ReadRange->MapBatches(mark)" in ds.stats() and "4 tasks executed" in ds.stats()


# ---- files ---------------------------------------------------------------------------------

def test_parquet_round_trip_with_partitions_and_projection(small_store, tmp_path):
    data.range(300, override_num_blocks=3).map(lambda r: {"id": r["id"], "x": float(r["id"]) / 2}) \
        .write_parquet(str(tmp_path / "out"))
    files = sorted(os.listdir(tmp_path / "out"))
    assert len(files) == 3 and all(f.endswith(".parquet") for f in files)
    back = data.read_parquet(str(tmp_path / "out"), columns=["id"])
    assert back.columns() == ["id"] and sorted(r["id"] for r in back.take_all()) == list(range(300))
    part = tmp_path / "hive" / "split=train"
    part.mkdir(parents=True)
    pa.parquet.write_table(pa.table({"v": [1, 2]}), part / "a.parquet")
    assert data.read_parquet(str(tmp_path / "hive")).take_all() == [{"v": 1, "split": "train"},
                                                                   {"v": 2, "split": "train"}]
    fs = pa.fs.LocalFileSystem()
    assert data.read_parquet(str(tmp_path / "out"), filesystem=fs).count() == 300


def test_csv_json_text_binary_and_images(small_store, tmp_path):
    (tmp_path / "a.csv").write_text("x,y\n1,a\n2,b\n")
    (tmp_path / "b.csv").write_text("x,y\n3,c\n")
    csv = data.read_csv(str(tmp_path / "*.csv"), include_paths=True)
    assert [r["x"] for r in csv.take_all()] == [1, 2, 3] and csv.take(1)[0]["path"].endswith("a.csv")
    (tmp_path / "lines.json").write_text('{"k": 1}\n{"k": 2}\n')
    (tmp_path / "array.json").write_text('[{"k": 3}]')
    assert sorted(r["k"] for r in data.read_json([str(tmp_path / "lines.json"),
                                                  str(tmp_path / "array.json")]).take_all()) == [1, 2, 3]
    (tmp_path / "t.txt").write_text("one\n\ntwo\n")
    assert data.read_text(str(tmp_path / "t.txt")).take_all() == [{"text": "one"}, {"text": "two"}]
    assert data.read_binary_files(str(tmp_path / "t.txt")).take(1)[0]["bytes"] == b"one\n\ntwo\n"
    Image = pytest.importorskip("PIL.Image")
    images = tmp_path / "images"
    images.mkdir()
    for i in range(3):
        Image.fromarray(np.full((8, 6, 3), i, dtype=np.uint8)).save(images / f"{i}.png")
    (images / "notes.txt").write_text("not an image")
    batch = data.read_images(str(images), size=(4, 4)).take_batch(3)
    assert batch["image"].shape == (3, 4, 4, 3)
    out = tmp_path / "out-json"
    data.range(5).write_json(str(out))
    assert sorted(r["id"] for r in data.read_json(str(out)).take_all()) == [0, 1, 2, 3, 4]
    data.range(5).write_csv(str(tmp_path / "out-csv"))
    assert data.read_csv(str(tmp_path / "out-csv")).count() == 5


# ---- bad input and failures ----------------------------------------------------------------

def test_bad_input_gets_clear_errors(small_store, tmp_path):
    with pytest.raises(FileNotFoundError, match="no such file or directory: .*missing"):
        data.read_parquet(str(tmp_path / "missing"))
    with pytest.raises(ValueError, match="batch_size must be a positive integer"):
        data.range(10).map_batches(lambda b: b, batch_size=0)
    with pytest.raises(KeyError, match="SelectColumns.*no column 'nope'; the data has \\['id'\\]"):
        data.range(10).select_columns(["nope"]).take_all()
    with pytest.raises(TypeError, match="MapBatches\\(<lambda>\\) must return a dict of numpy arrays.*got list"):
        data.range(10).map_batches(lambda b: [1, 2]).take_all()
    with pytest.raises(TypeError, match="map takes a function"):
        data.range(3).map(5)


def test_a_user_error_stops_the_pipeline_with_its_traceback(small_store):
    def fails(batch):
        if batch["id"][0] >= 500:
            raise ZeroDivisionError("the 500s are cursed")
        return batch

    started = time.monotonic()
    with pytest.raises(Exception) as caught:
        for _ in data.range(1000, override_num_blocks=10).map_batches(fails).iter_batches():
            pass
    text = str(caught.value)
    assert "MapBatches(fails) failed" in text and "the 500s are cursed" in text and "in fails" in text
    assert time.monotonic() - started < 60


def test_a_killed_transform_worker_is_run_again(small_store, tmp_path):
    marker = tmp_path / "killed"

    def die_once(batch):
        if batch["id"][0] == 300:
            try:
                fd = os.open(marker, os.O_CREAT | os.O_EXCL)
                os.close(fd)
                os.kill(os.getpid(), signal.SIGKILL)
            except FileExistsError:
                pass
        return batch

    total = sum(len(b["id"]) for b in data.range(1000, override_num_blocks=10).map_batches(die_once).iter_batches())
    assert marker.exists() and total == 1000


def test_a_dead_pool_actor_is_replaced(small_store, tmp_path):
    marker = tmp_path / "actor-killed"

    class DieOnce:
        def __call__(self, batch):
            if batch["id"][0] == 400:
                try:
                    os.close(os.open(marker, os.O_CREAT | os.O_EXCL))
                    os.kill(os.getpid(), signal.SIGKILL)
                except FileExistsError:
                    pass
            return batch

    ds = data.range(1000, override_num_blocks=10).map_batches(DieOnce, concurrency=2, batch_size=100)
    assert sorted(r["id"] for r in ds.take_all()) == list(range(1000)) and marker.exists()


# ---- streaming -----------------------------------------------------------------------------

def _store_dirs():
    from oxray._private import worker

    shm = worker.client().store_dir()
    port = shm.rsplit("-", 1)[1]
    return shm, os.path.join(tempfile.gettempdir(), f"oxray-spill-{port}")


def _dir_bytes(path):
    try:
        return sum(e.stat().st_size for e in os.scandir(path) if e.is_file())
    except FileNotFoundError:
        return 0


def test_a_pipeline_larger_than_the_store_streams_within_its_budget(small_store):
    """~640 MiB of blocks through a 96 MiB store, with a consumer slower than the producers:
    the store stays within its size and next to nothing spills."""
    from oxray._private import worker

    shm, spill = _store_dirs()
    peaks = {"store": 0, "spill": 0}
    stop = threading.Event()

    def watch():
        while not stop.is_set():
            peaks["store"] = max(peaks["store"], worker.client().object_store_used())
            peaks["spill"] = max(peaks["spill"], _dir_bytes(spill))
            time.sleep(0.01)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        rows = 0
        ds = data.range(80, override_num_blocks=80).map_batches(
            lambda b: {"x": np.ones((len(b["id"]), (8 << 20) // 8), dtype=np.int64)}, batch_size=1)
        for batch in ds.iter_batches(batch_size=2):
            rows += len(batch["x"])
            time.sleep(0.05)  # a slow consumer
    finally:
        stop.set()
        watcher.join()
    assert rows == 80
    assert 0 < peaks["store"] <= STORE
    assert peaks["spill"] <= STORE // 2, f"spilled {peaks['spill']} bytes"


def _consume_split(iterator, epochs, log, name):
    for epoch in range(epochs):
        ids = []
        for batch in iterator.iter_batches(batch_size=10):
            ids.extend(batch["id"].tolist())
        log.append((name, epoch, time.monotonic(), ids))


def test_streaming_split_gives_equal_shares_every_epoch(small_store):
    first, second = data.range(1001, override_num_blocks=13).streaming_split(2, equal=True)
    log = []
    threads = [threading.Thread(target=_consume_split, args=(it, 2, log, i)) for i, it in enumerate((first, second))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert len(log) == 4
    for epoch in range(2):
        shares = [ids for _, e, _, ids in sorted(log) if e == epoch]
        assert [len(s) for s in shares] == [500, 500]
        assert not set(shares[0]) & set(shares[1])


def test_streaming_split_epochs_wait_for_every_consumer(small_store):
    first, second = data.range(100, override_num_blocks=4).streaming_split(2, equal=True)
    times = {}

    def eager():
        list(first.iter_batches())
        list(first.iter_batches())  # epoch 1 cannot start before the other consumer asks
        times["eager_epoch_1_done"] = time.monotonic()

    thread = threading.Thread(target=eager)
    thread.start()
    list(second.iter_batches())
    time.sleep(1.0)
    times["late_epoch_1_start"] = time.monotonic()
    assert sum(len(b["id"]) for b in second.iter_batches()) == 50
    thread.join(timeout=60)
    assert times["eager_epoch_1_done"] >= times["late_epoch_1_start"]


def test_a_consumer_leaving_an_epoch_early_does_not_stall_the_others(small_store):
    context = data.DataContext.get_current()
    context.execution_options.resource_limits.object_store_memory = 2 << 20  # a tiny budget
    try:
        wide = data.range(100_000, override_num_blocks=50).map_batches(
            lambda b: {"id": b["id"], "pad": np.zeros((len(b["id"]), 16))})
        quitter, reader = wide.streaming_split(2, equal=True)
    finally:
        context.execution_options.resource_limits.object_store_memory = None
    rows = {}

    def quit_early():
        next(iter(quitter.iter_batches(batch_size=100)))  # then on to the next epoch
        rows["quitter"] = sum(len(b["id"]) for b in quitter.iter_batches())

    thread = threading.Thread(target=quit_early)
    thread.start()
    rows["reader"] = sum(len(b["id"]) for b in reader.iter_batches())
    rows["reader again"] = sum(len(b["id"]) for b in reader.iter_batches())
    thread.join(timeout=120)
    assert rows == {"quitter": 50_000, "reader": 50_000, "reader again": 50_000}


def test_train_workers_get_equal_shards_each_epoch(small_store, tmp_path):
    pytest.importorskip("torch")
    from oxray.train import DataConfig, RunConfig, ScalingConfig
    from oxray.train.torch import TorchTrainer

    trainer = TorchTrainer(
        _count_shard_rows, train_loop_config={"epochs": 2},
        scaling_config=ScalingConfig(num_workers=2),
        run_config=RunConfig(storage_path=str(tmp_path), name="data-ingest"),
        datasets={"train": data.range(999).map_batches(lambda b: {"id": b["id"], "y": b["id"] * 2}),
                  "valid": data.range(10)},
        dataset_config=DataConfig(datasets_to_split=["train"]))  # every rank reads all of "valid"
    result = trainer.fit()
    seen = result.metrics_dataframe
    assert seen["rows"].tolist() == [499, 499]  # rank 0's share, each epoch
    assert set(seen["valid_rows"]) == {10}


def _count_shard_rows(config):
    import torch

    from oxray import train

    shard = train.get_dataset_shard("train")
    valid = train.get_dataset_shard("valid")
    for epoch in range(config["epochs"]):
        rows = 0
        for batch in shard.iter_torch_batches(batch_size=64, dtypes=torch.float32):
            assert torch.equal(batch["y"], batch["id"] * 2)
            rows += len(batch["id"])
        valid_rows = sum(len(b["id"]) for b in valid.iter_batches())
        train.report({"epoch": epoch, "rows": rows, "valid_rows": valid_rows})
