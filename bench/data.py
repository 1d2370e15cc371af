#!/usr/bin/env python3
"""Data ingest throughput and memory, oxray.data beside Ray Data (with --ray, when `ray`
imports here), each on a fresh single-node cluster in a process of its own.

Workloads:
  range->map_batches->iter_torch_batches   range(N).map_batches(f).iter_torch_batches(batch_size=1024)
  read_parquet->map_batches->iter_batches  a generated multi-file Parquet data set, a map, iteration

Figures: rows per second, and the peak of the machine's used memory above what it was
before the workload (every process and shared memory; for oxray also its store's peak).
Targets (ISSUES #16): at least 3x Ray Data's throughput with no more peak memory.

Usage: .venv/bin/python bench/data.py [--ray] [--rows N] [--files F]
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time


def used_memory() -> int:
    info = {}
    with open("/proc/meminfo") as f:
        for line in f:
            key, value = line.split(":", 1)
            info[key] = int(value.split()[0]) * 1024
    return info["MemTotal"] - info["MemAvailable"]


class Peak:
    """Samples used memory (and a store's use, when given a reader) every 20 ms."""

    def __init__(self, store=None):
        self.base, self.peak, self.store_peak, self.store = used_memory(), 0, 0, store
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self):
        while not self.stop.is_set():
            self.peak = max(self.peak, used_memory() - self.base)
            if self.store is not None:
                self.store_peak = max(self.store_peak, self.store())
            time.sleep(0.02)

    def done(self):
        self.stop.set()
        self.thread.join()
        return self


def feature(batch):
    import numpy as np

    ids = batch["id"]
    return {"id": ids, "x": ids.astype(np.float32) * 0.5, "y": (ids % 10).astype(np.int64)}


def scale(batch):
    return {"a": batch["a"] * 2.0, "b": batch["b"], "c": batch["c"]}


def make_parquet(directory: str, files: int, rows_per_file: int) -> None:
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(0)
    for i in range(files):
        pq.write_table(pa.table({"a": rng.random(rows_per_file), "b": rng.integers(0, 1000, rows_per_file),
                                 "c": rng.random((rows_per_file,)).astype(np.float32)}),
                       os.path.join(directory, f"part-{i:04d}.parquet"))


def measure(batches, column: str, store, expected=None):
    """(rows per second, peak used memory, peak store use) of iterating `batches`."""
    peak = Peak(store)
    began, count = time.perf_counter(), 0
    for batch in batches:
        count += len(batch[column])
    elapsed = time.perf_counter() - began
    peak.done()
    assert expected is None or count == expected, (count, expected)
    return count / elapsed, peak.peak, peak.store_peak


def child(runtime: str, rows: int, parquet_dir: str) -> dict:
    import importlib

    rt = importlib.import_module(runtime)
    if runtime == "ray":
        rt.init(include_dashboard=False, num_cpus=os.cpu_count(), _temp_dir=os.path.join(parquet_dir, "..", "ray"))
        rt.data.DataContext.get_current().enable_progress_bars = False
        store = None
    else:
        import oxray.data  # noqa: F401  (rt.data below)
        from oxray._private import worker

        rt.init(address="local", num_cpus=os.cpu_count())
        rt.data.DataContext.get_current().enable_progress_bars = False
        store = worker.client().object_store_used
    out = {}
    try:
        # warm up: workers started, functions shipped, torch imported (outside the timing and
        # the memory baseline for both, however lazily each imports it)
        for _ in rt.data.range(10000).map_batches(feature).iter_torch_batches(batch_size=1024):
            pass
        ranged = rt.data.range(rows).map_batches(feature).iter_torch_batches(batch_size=1024)
        out["range->map_batches->iter_torch_batches"] = measure(ranged, "id", store, expected=rows)
        read = rt.data.read_parquet(parquet_dir).map_batches(scale).iter_batches(batch_size=1024)
        out["read_parquet->map_batches->iter_batches"] = measure(read, "a", store)
    finally:
        rt.shutdown()
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ray", action="store_true", help="run the same workloads on Ray Data")
    parser.add_argument("--rows", type=int, default=5_000_000, help="rows of the range workload")
    parser.add_argument("--files", type=int, default=16, help="files of the Parquet data set (250k rows each)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--parquet", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.rows, args.parquet)))
        return
    with tempfile.TemporaryDirectory() as tmp:
        parquet = os.path.join(tmp, "parquet")
        os.makedirs(parquet)
        make_parquet(parquet, args.files, 250_000)
        env = dict(os.environ, OXRAY_HOME=os.path.join(tmp, "home"), RAY_USAGE_STATS_ENABLED="0")
        results = {}
        for runtime in ["oxray"] + (["ray"] if args.ray else []):
            done = subprocess.run([sys.executable, __file__, "--child", runtime, "--rows", str(args.rows),
                                   "--parquet", parquet], env=env, capture_output=True, text=True)
            if done.returncode != 0:
                sys.exit(f"{runtime} failed:\n{done.stderr[-4000:]}")
            results[runtime] = json.loads(done.stdout.strip().splitlines()[-1])
    mib = 1 << 20
    print(f"{'workload':42} {'oxray rows/s':>13} {'ray rows/s':>12} {'ratio':>7} {'oxray peak':>11} "
          f"{'ray peak':>9} {'oxray store':>12}")
    for name, (rate, peak, store) in results["oxray"].items():
        theirs = results.get("ray", {}).get(name)
        ratio = f"{rate / theirs[0]:.2f}x" if theirs else ""
        ray_rate = f"{theirs[0]:12.0f}" if theirs else f"{'':12}"
        ray_peak = f"{theirs[1] / mib:7.0f}Mi" if theirs else f"{'':9}"
        print(f"{name:42} {rate:13.0f} {ray_rate} {ratio:>7} {peak / mib:9.0f}Mi {ray_peak} {store / mib:10.0f}Mi")


if __name__ == "__main__":
    main()
