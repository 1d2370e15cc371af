#!/usr/bin/env python3
"""The workloads of `ray microbenchmark`, with Ray's names and shapes, for oxray and (with
--ray, when `ray` imports here) for Ray on the same machine.

Usage: .venv/bin/python bench/microbenchmark.py [--ray] [--seconds S] [--trials N]
Targets (ARCHITECTURE.md): at least 5x Ray per call, 2x on get calls.
"""

import argparse
import importlib
import os
import sys
import tempfile
import time


TRIALS = 3


def rate(fn, seconds, batch=1):
    """The median rate of `TRIALS` runs of `seconds` each: on a shared machine one run can
    land on a slow moment."""
    fn()  # warm up: workers started, functions shipped
    rates = []
    for _ in range(TRIALS):
        count, began = 0, time.perf_counter()
        while time.perf_counter() - began < seconds:
            fn()
            count += batch
        rates.append(count / (time.perf_counter() - began))
    return sorted(rates)[len(rates) // 2]


def _zeros(n):
    """Ray's arrays of int64 zeros; bytes of the same size where numpy is missing."""
    try:
        import numpy as np

        return np.zeros(n, dtype=np.int64)
    except ImportError:
        return bytes(8 * n)


def workloads(rt, seconds):
    """Ray's `ray microbenchmark` rows (ray/_private/ray_perf.py), same names and shapes;
    `rate` replaces Ray's `timeit` (the median of a few short trials rather than the mean of
    four 2-second ones: the same per-second figure, less moved by a slow moment)."""
    import multiprocessing

    @rt.remote
    def small_value():
        return b"ok"

    @rt.remote
    def small_value_batch(n):
        rt.get([small_value.remote() for _ in range(n)])
        return 0

    @rt.remote
    def create_object_containing_ref():
        return [rt.put(1) for _ in range(10000)]

    @rt.remote
    def do_put_small():
        for _ in range(100):
            rt.put(0)

    @rt.remote
    def do_put():
        for _ in range(10):
            rt.put(_zeros(10 * 1024 * 1024))

    @rt.remote
    class Actor:
        def small_value(self):
            return b"ok"

        def small_value_arg(self, x):
            return b"ok"

        def small_value_batch(self, n):
            rt.get([small_value.remote() for _ in range(n)])

    @rt.remote
    class AsyncActor:
        async def small_value(self):
            return b"ok"

        async def small_value_with_arg(self, x):
            return b"ok"

    @rt.remote(num_cpus=0)
    class Client:
        def __init__(self, servers):
            self.servers = servers if isinstance(servers, list) else [servers]

        def small_value_batch(self, n):
            results = []
            for s in self.servers:
                results.extend([s.small_value.remote() for _ in range(n)])
            rt.get(results)

        def small_value_batch_arg(self, n):
            x = rt.put(0)
            results = []
            for s in self.servers:
                results.extend([s.small_value_arg.remote(x) for _ in range(n)])
            rt.get(results)

    n_cpu = max(1, multiprocessing.cpu_count() // 2)
    value = rt.put(0)
    arr = _zeros(100 * 1024 * 1024)
    yield "single client get calls", rate(lambda: rt.get(value), seconds)
    yield "single client put calls", rate(lambda: rt.put(0), seconds)
    yield "multi client put calls", rate(lambda: rt.get([do_put_small.remote() for _ in range(10)]), seconds, 1000)
    yield "single client put gigabytes", rate(lambda: rt.put(arr), seconds, 8 * 0.1)
    del arr
    yield "single client tasks and get batch", rate(lambda: rt.get([small_value.remote() for _ in range(1000)]),
                                                    seconds)
    yield "multi client put gigabytes", rate(lambda: rt.get([do_put.remote() for _ in range(10)]), seconds, 8)
    # Large values at three sizes: each put in a loop, the previous ref dropped as the
    # next is made (as `ref = put(x)` in a loop does), and each read back where it lies.
    for label, size in (("1 MB", 1 << 20), ("100 MB", 100 << 20), ("800 MB", 800 << 20)):
        arr = _zeros(size // 8)
        held = [None]

        def put_again(arr=arr, held=held):
            held[0] = rt.put(arr)

        yield f"single client put gigabytes {label}", rate(put_again, seconds, size / 1e9)
        yield f"single client get gigabytes {label}", rate(lambda held=held: rt.get(held[0]), seconds, size / 1e9)
        del arr, held
    containing = create_object_containing_ref.remote()
    yield "single client get object containing 10k refs", rate(lambda: rt.get(containing), seconds)

    def wait_multiple_refs():
        not_ready = [small_value.remote() for _ in range(1000)]
        for _ in range(1000):
            _, not_ready = rt.wait(not_ready)

    yield "single client wait 1k refs", rate(wait_multiple_refs, seconds)
    yield "single client tasks sync", rate(lambda: rt.get(small_value.remote()), seconds)
    yield "single client tasks async", rate(lambda: rt.get([small_value.remote() for _ in range(1000)]), seconds, 1000)
    clients = [Actor.remote() for _ in range(4)]
    yield "multi client tasks async", rate(lambda: rt.get([c.small_value_batch.remote(10000) for c in clients]),
                                           seconds, 40000)
    a = Actor.remote()
    yield "1:1 actor calls sync", rate(lambda: rt.get(a.small_value.remote()), seconds)
    yield "1:1 actor calls async", rate(lambda: rt.get([a.small_value.remote() for _ in range(1000)]), seconds, 1000)
    a = Actor.options(max_concurrency=16).remote()
    yield "1:1 actor calls concurrent", rate(lambda: rt.get([a.small_value.remote() for _ in range(1000)]), seconds,
                                             1000)
    actors = [Actor.remote() for _ in range(n_cpu)]
    client = Client.remote(actors)
    yield "1:n actor calls async", rate(lambda: rt.get(client.small_value_batch.remote(5000)), seconds, 5000 * n_cpu)
    servers = [Actor.remote() for _ in range(n_cpu)]

    @rt.remote
    def work(actors):
        rt.get([actors[i % n_cpu].small_value.remote() for i in range(5000)])

    yield "n:n actor calls async", rate(lambda: rt.get([work.remote(servers) for _ in range(4)]), seconds, 4 * 5000)
    clients = [Client.remote(Actor.remote()) for _ in range(n_cpu)]
    yield "n:n actor calls with arg async", rate(lambda: rt.get([c.small_value_batch_arg.remote(1000)
                                                                 for c in clients]), seconds, 1000 * n_cpu)
    a = AsyncActor.remote()
    yield "1:1 async-actor calls sync", rate(lambda: rt.get(a.small_value.remote()), seconds)
    yield "1:1 async-actor calls async", rate(lambda: rt.get([a.small_value.remote() for _ in range(1000)]), seconds,
                                              1000)
    yield "1:1 async-actor calls with args async", rate(
        lambda: rt.get([a.small_value_with_arg.remote(i) for i in range(1000)]), seconds, 1000)
    actors = [AsyncActor.remote() for _ in range(n_cpu)]
    client = Client.remote(actors)
    yield "1:n async-actor calls async", rate(lambda: rt.get(client.small_value_batch.remote(5000)), seconds,
                                              5000 * n_cpu)
    servers = [AsyncActor.remote() for _ in range(n_cpu)]
    yield "n:n async-actor calls async", rate(lambda: rt.get([work.remote(servers) for _ in range(4)]), seconds,
                                              4 * 5000)

    def placement_group_create_removal(num_pgs=100):
        pgs = [rt.util.placement_group(bundles=[{"custom": 0.001}]) for _ in range(num_pgs)]
        [pg.wait(timeout_seconds=30) for pg in pgs]
        for pg in pgs:
            rt.util.remove_placement_group(pg)

    yield "placement group create/removal", rate(placement_group_create_removal, seconds, 100)


def _oxray_head_cpu():
    """CPU seconds the oxray head processes of this machine have used so far (None: none
    runs): the head is to stay idle while tasks and actors run."""
    total, found = 0.0, False
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            argv = open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0")
            if len(argv) < 2 or not argv[0].endswith(b"oxray") or argv[1] != b"head":
                continue
            fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        found = True
    return total if found else None


def run(module, seconds, init_kwargs):
    rt = importlib.import_module(module)
    rt.init(**init_kwargs)
    try:
        head_before, began = _oxray_head_cpu(), time.perf_counter()
        rows = dict(workloads(rt, seconds))
        head_after = _oxray_head_cpu()
        if head_before is not None and head_after is not None:
            wall = time.perf_counter() - began
            print(f"{module} head CPU during the workloads: {head_after - head_before:.2f} s in {wall:.0f} s")
        return rows
    finally:
        rt.shutdown()


def main():
    global TRIALS
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ray", action="store_true", help="run the same workloads on Ray")
    parser.add_argument("--seconds", type=float, default=1.0, help="length of one trial of a row")
    parser.add_argument("--trials", type=int, default=TRIALS, help="trials per row; the median is shown")
    args = parser.parse_args()
    TRIALS = max(1, args.trials)
    with tempfile.TemporaryDirectory() as tmp:
        os.environ.setdefault("OXRAY_HOME", f"{tmp}/home")
        ox = run("oxray", args.seconds, {"address": "local", "num_cpus": os.cpu_count(), "resources": {"custom": 100}})
        ray = None
        if args.ray:
            os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
            ray = run("ray", args.seconds, {"_temp_dir": f"{tmp}/ray", "include_dashboard": False,
                                            "resources": {"custom": 100}})
    print(f"{'workload':46} {'oxray':>12} {'ray':>12} {'oxray/ray':>10}   (per second; gigabytes: GB/s)")
    for name, value in ox.items():
        theirs = ray.get(name) if ray else None
        ratio = f"{value / theirs:.2f}x" if theirs else ""
        print(f"{name:46} {value:>12.1f} {theirs if theirs is not None else float('nan'):>12.1f} {ratio:>10}")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
