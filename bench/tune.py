#!/usr/bin/env python3
"""N trivial Tune trials (each reports one result) with oxray.tune and, when the real Ray
Tune imports here, with Ray Tune on the same machine: wall time of `Tuner.fit()` and
trials per second, side by side. Each side runs once, in a process of its own, on a local
cluster with the same CPUs.

Usage: .venv/bin/python bench/tune.py [--trials N] [--cpus C] [--oxray PATH] [--no-ray]
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

SIDE = textwrap.dedent("""
    import json, sys, tempfile, time
    kind, trials, cpus = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    if kind == "ray":
        import ray
        from ray import tune
        ray.init(num_cpus=cpus, include_dashboard=False, log_to_driver=False)
    else:
        import oxray as ray
        from oxray import tune
        ray.init()

    def trivial(config):
        tune.report({"score": config["i"]})

    storage = tempfile.mkdtemp(prefix="tune-bench-")
    started = time.perf_counter()
    grid = tune.Tuner(trivial, param_space={"i": tune.grid_search(list(range(trials)))},
                      tune_config=tune.TuneConfig(metric="score", mode="max"),
                      run_config=tune.RunConfig(name="bench", storage_path=storage, verbose=0)).fit()
    wall = time.perf_counter() - started
    assert len(grid) == trials and grid.num_errors == 0, grid
    print("RESULT " + json.dumps({"wall_s": wall, "trials": trials}))
    ray.shutdown()
""")


def run_side(kind, trials, cpus, env):
    out = subprocess.run([sys.executable, "-c", SIDE, kind, str(trials), str(cpus)], env=env, capture_output=True,
                         text=True, timeout=3600)
    for line in out.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT "):])
    raise RuntimeError(f"{kind} failed:\n{out.stdout[-2000:]}\n{out.stderr[-4000:]}")


def real_ray_tune_importable():
    probe = subprocess.run([sys.executable, "-c", "import ray, ray.tune; assert 'oxray' not in ray.__file__"],
                           capture_output=True, env={k: v for k, v in os.environ.items() if k != "OXRAY_AS_RAY"})
    return probe.returncode == 0


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=100)
    parser.add_argument("--cpus", type=int, default=2)
    parser.add_argument("--oxray", default=os.environ.get("OXRAY_BIN", str(REPO / "target/debug/oxray")))
    parser.add_argument("--no-ray", action="store_true")
    args = parser.parse_args()

    rows = {}
    with tempfile.TemporaryDirectory(prefix="oxray-tune-bench-") as tmp:
        env = {k: v for k, v in os.environ.items() if not k.startswith("OXRAY_")}
        env.update(OXRAY_HOME=f"{tmp}/home", OXRAY_TEMP_DIR=f"{tmp}/sessions")
        start = [args.oxray, "start", "--head", "--port", "0", "--dashboard-port", "0", "--num-cpus", str(args.cpus),
                 "--node-ip-address", "127.0.0.1"]
        subprocess.run(start, env=env, check=True, capture_output=True, timeout=60)
        try:
            rows["oxray"] = run_side("oxray", args.trials, args.cpus, env)
        finally:
            subprocess.run([args.oxray, "stop", "--force"], env=env, capture_output=True, timeout=60)
    if not args.no_ray and real_ray_tune_importable():
        env = {k: v for k, v in os.environ.items() if not k.startswith("OXRAY_")}
        env["RAY_DISABLE_USAGE_STATS"] = "1"
        rows["ray"] = run_side("ray", args.trials, args.cpus, env)

    print(f"{args.trials} trivial trials on {args.cpus} CPUs")
    print(f"{'':8}{'wall s':>10}{'trials/s':>10}")
    for name, row in rows.items():
        print(f"{name:8}{row['wall_s']:>10.2f}{row['trials'] / row['wall_s']:>10.1f}")
    if len(rows) == 2:
        print(f"oxray is {rows['ray']['wall_s'] / rows['oxray']['wall_s']:.1f}x faster")


if __name__ == "__main__":
    main()
