#!/usr/bin/env python3
"""The workloads of `ray microbenchmark` that oxray runs today, with Ray's names and shapes,
for oxray and (with --ray, when `ray` imports here) for Ray on the same machine.

Usage: .venv/bin/python bench/microbenchmark.py [--ray] [--seconds S]
Targets (ARCHITECTURE.md): at least 5x Ray per call, 2x on get calls.
"""

import argparse
import importlib
import os
import sys
import tempfile
import time


def rate(fn, seconds, batch=1):
    fn()  # warm up: workers started, functions shipped
    count, began = 0, time.perf_counter()
    while time.perf_counter() - began < seconds:
        fn()
        count += batch
    return count / (time.perf_counter() - began)


def workloads(rt, seconds):
    @rt.remote
    def small_value():
        return b"ok"

    @rt.remote
    class Actor:
        def small_value(self):
            return b"ok"

    actor = Actor.remote()
    rt.get(actor.small_value.remote())
    value = rt.put(0)
    big = b"x" * (100 * 1024 * 1024)
    refs_1k = [rt.put(i) for i in range(1000)]
    yield "single client get calls", rate(lambda: rt.get(value), seconds)
    yield "single client put calls", rate(lambda: rt.put(0), seconds)
    yield "single client put gigabytes", rate(lambda: rt.put(big), seconds) * 0.1
    yield "single client tasks sync", rate(lambda: rt.get(small_value.remote()), seconds)
    yield "single client tasks async", rate(lambda: rt.get([small_value.remote() for _ in range(100)]), seconds, 100)
    yield "1:1 actor calls sync", rate(lambda: rt.get(actor.small_value.remote()), seconds)
    yield "1:1 actor calls async", rate(lambda: rt.get([actor.small_value.remote() for _ in range(100)]), seconds, 100)
    yield "wait 1k refs", rate(lambda: rt.wait(refs_1k, num_returns=len(refs_1k)), seconds)


def run(module, seconds, init_kwargs):
    rt = importlib.import_module(module)
    rt.init(**init_kwargs)
    try:
        return dict(workloads(rt, seconds))
    finally:
        rt.shutdown()


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ray", action="store_true", help="run the same workloads on Ray")
    parser.add_argument("--seconds", type=float, default=2.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        os.environ.setdefault("OXRAY_HOME", f"{tmp}/home")
        ox = run("oxray", args.seconds, {"address": "local", "num_cpus": os.cpu_count()})
        ray = None
        if args.ray:
            os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
            ray = run("ray", args.seconds, {"_temp_dir": f"{tmp}/ray", "include_dashboard": False})
    print(f"{'workload':32} {'oxray':>12} {'ray':>12} {'oxray/ray':>10}   (per second; gigabytes: GB/s)")
    for name, value in ox.items():
        theirs = ray.get(name) if ray else None
        ratio = f"{value / theirs:.2f}x" if theirs else ""
        print(f"{name:32} {value:>12.1f} {theirs if theirs is not None else float('nan'):>12.1f} {ratio:>10}")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
