#!/usr/bin/env python3
"""`init()` + `cluster_resources()` from a new Python process: joining a running cluster and
starting a private one, for oxray and (when `ray` imports here) for Ray.

Usage: .venv/bin/python bench/init.py [--oxray PATH] [--runs N]
Target: at most 0.2 s (Ray 2.60: about 2 s).
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SNIPPET = "import {mod}; {mod}.init({args}); {mod}.cluster_resources()"


def timed(code, env, runs):
    times = []
    for _ in range(runs):
        began = time.perf_counter()
        subprocess.run([sys.executable, "-c", code], env=env, check=True, stdout=subprocess.DEVNULL)
        times.append(time.perf_counter() - began)
    return statistics.median(times)


def main():
    root = Path(__file__).resolve().parent.parent
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--oxray", default=str(root / "target/release/oxray"))
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("OXRAY_", "RAY_"))}
        env.update(OXRAY_HOME=f"{tmp}/home", OXRAY_TEMP_DIR=f"{tmp}/sessions", OXRAY_BIN=args.oxray)
        rows.append(("start a private cluster", timed(SNIPPET.format(mod="oxray", args=""), env, args.runs)))
        subprocess.run([args.oxray, "start", "--head", "--port", "0", "--dashboard-port", "0"], env=env, check=True,
                       stdout=subprocess.DEVNULL)
        try:
            rows.append(("join a running cluster", timed(SNIPPET.format(mod="oxray", args=""), env, args.runs)))
        finally:
            subprocess.run([args.oxray, "stop"], env=env, check=False, stdout=subprocess.DEVNULL)

    ray = None
    try:
        import ray as _  # noqa: F401
        with tempfile.TemporaryDirectory() as tmp:
            env = dict(os.environ, RAY_USAGE_STATS_ENABLED="0")
            env.pop("RAY_ADDRESS", None)
            ray = timed(SNIPPET.format(mod="ray", args=f"_temp_dir='{tmp}', include_dashboard=False"), env,
                        max(1, args.runs // 2))
    except Exception as e:  # Ray missing, or unable to start here
        print(f"(Ray not measured: {e})")

    print(f"{'init() + cluster_resources(), new process':45} {'oxray (s)':>10} {'ray (s)':>10}")
    for name, value in rows:
        ray_cell = f"{ray:.3f}" if ray is not None and name.startswith("start") else "n/a"
        print(f"{name:45} {value:>10.3f} {ray_cell:>10}")
    print("target: <= 0.2 s")


if __name__ == "__main__":
    main()
