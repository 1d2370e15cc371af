#!/usr/bin/env python3
"""oxray.tune and, when the real Ray Tune imports here, Ray Tune on the same machine, side
by side, each workload in a process of its own on a local cluster with the same CPUs:

- trivial: N trials that each report one result (wall time of `Tuner.fit()`, trials/s);
- optuna: N trials suggested by OptunaSearch (optuna installed), each reporting one result;
- start latency: trials run one after another (max_concurrent_trials=1); the median time
  between the starts of consecutive trials, which is what starting a trial costs;
- fast reports: one trial per CPU, each reporting R results as fast as it can; results per
  second through the driver, all of them accounted for;
- trials of 1 s: N trials that each sleep a second; the ideal wall time (N / CPUs seconds)
  as a share of the measured one (spec: 10k such trials on 16 CPUs within 5 % of ideal);
- paced reports: one trial per CPU reporting 50 results a second; the 99th percentile of
  the time a report waits for the driver's answer (spec: 50 results/s per trial, no lag).

Usage: .venv/bin/python bench/tune.py [--trials N] [--optuna-trials N] [--reports R]
       [--second-trials N] [--paced-reports R] [--cpus C] [--oxray PATH] [--no-ray]
       [--only trivial,optuna,latency,reports,seconds,paced]
Targets (spec B10): trial start <= 50 ms; 100 trivial OptunaSearch trials <= 2 s; >= 10x Ray
on trivial trials; trials of 1 s within 5 % of ideal; paced reports without lag."""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
WORKLOADS = ("trivial", "optuna", "latency", "reports", "seconds", "paced")

SIDE = textwrap.dedent("""
    import json, statistics, sys, tempfile, time
    kind, workload, count, cpus = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    if kind == "ray":
        import ray
        from ray import tune
        from ray.tune.search.optuna import OptunaSearch
        ray.init(num_cpus=cpus, include_dashboard=False, log_to_driver=False)
    else:
        import oxray as ray
        from oxray import tune
        from oxray.tune.search.optuna import OptunaSearch
        ray.init()

    def trivial(config):
        tune.report({"score": config["i"]})

    def stamped(config):
        tune.report({"started": time.time()})

    def chatty(config):
        for i in range(config["reports"]):
            tune.report({"i": i})

    def second_long(config):
        time.sleep(1.0)
        tune.report({"i": config["i"]})

    def paced(config):
        # 50 results a second; each report's wait for the driver's answer is noted.
        waits, began = [], time.perf_counter()
        for i in range(config["reports"]):
            time.sleep(max(0.0, began + i / 50 - time.perf_counter()))
            sent = time.perf_counter()
            tune.report({"i": i, "last_wait_ms": waits[-1] if waits else 0.0})
            waits.append((time.perf_counter() - sent) * 1000)
        tune.report({"p99_wait_ms": sorted(waits)[int(len(waits) * 0.99)]})

    def fit(trainable, space, **tune_options):
        with tempfile.TemporaryDirectory(prefix="tune-bench-") as storage:
            started = time.perf_counter()
            grid = tune.Tuner(trainable, param_space=space, tune_config=tune.TuneConfig(**tune_options),
                              run_config=tune.RunConfig(name="bench", storage_path=storage, verbose=0)).fit()
            wall = time.perf_counter() - started
            results = [r for r in grid]  # read while the results are there
        assert grid.num_errors == 0, [r.error for r in results if r.error]
        return results, wall

    if workload == "trivial":
        grid, wall = fit(trivial, {"i": tune.grid_search(list(range(count)))}, metric="score", mode="max")
        out = {"wall_s": wall, "rate": count / wall}
    elif workload == "optuna":
        searcher = OptunaSearch(metric="score", mode="max", seed=0)
        grid, wall = fit(trivial, {"i": tune.uniform(0, 1)}, search_alg=searcher, num_samples=count)
        assert len(grid) == count
        out = {"wall_s": wall, "rate": count / wall}
    elif workload == "latency":
        grid, wall = fit(stamped, {"i": tune.grid_search(list(range(count)))}, max_concurrent_trials=1)
        starts = sorted(r.metrics["started"] for r in grid)
        gap = statistics.median(b - a for a, b in zip(starts, starts[1:]))
        out = {"wall_s": wall, "rate": gap * 1000}
    elif workload == "seconds":
        grid, wall = fit(second_long, {"i": tune.grid_search(list(range(count)))})
        out = {"wall_s": wall, "rate": 100 * (count * 1.0 / cpus) / wall}
    elif workload == "paced":
        grid, wall = fit(paced, {"reports": count, "i": tune.grid_search(list(range(cpus)))})
        out = {"wall_s": wall, "rate": max(r.metrics["p99_wait_ms"] for r in grid)}
    else:
        grid, wall = fit(chatty, {"reports": count, "i": tune.grid_search(list(range(cpus)))})
        iterations = sum(r.metrics["training_iteration"] for r in grid)
        assert iterations == count * cpus, iterations
        out = {"wall_s": wall, "rate": iterations / wall}
    print("RESULT " + json.dumps(out))
    ray.shutdown()
""")

# Per workload: what its figure is, and whether more of it is better.
FIGURES = {"trivial": ("trials/s", True), "optuna": ("trials/s", True), "latency": ("ms per start", False),
           "reports": ("results/s", True), "seconds": ("% of ideal", True), "paced": ("p99 ms per report", False)}


def run_side(kind, workload, count, cpus, env):
    out = subprocess.run([sys.executable, "-c", SIDE, kind, workload, str(count), str(cpus)], env=env,
                         capture_output=True, text=True, timeout=3600)
    for line in out.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT "):])
    raise RuntimeError(f"{kind} {workload} failed:\n{out.stdout[-2000:]}\n{out.stderr[-4000:]}")


def real_ray_tune_importable():
    probe = subprocess.run([sys.executable, "-c", "import ray, ray.tune; assert 'oxray' not in ray.__file__"],
                           capture_output=True, env={k: v for k, v in os.environ.items() if k != "OXRAY_AS_RAY"})
    return probe.returncode == 0


def optuna_importable():
    return subprocess.run([sys.executable, "-c", "import optuna"], capture_output=True).returncode == 0


def oxray_side(args, workloads, counts):
    rows = {}
    with tempfile.TemporaryDirectory(prefix="oxray-tune-bench-") as tmp:
        env = {k: v for k, v in os.environ.items() if not k.startswith("OXRAY_")}
        env.update(OXRAY_HOME=f"{tmp}/home", OXRAY_TEMP_DIR=f"{tmp}/sessions")
        start = [args.oxray, "start", "--head", "--port", "0", "--dashboard-port", "0", "--num-cpus", str(args.cpus),
                 "--node-ip-address", "127.0.0.1"]
        subprocess.run(start, env=env, check=True, capture_output=True, timeout=60)
        try:
            for workload in workloads:
                rows[workload] = run_side("oxray", workload, counts[workload], args.cpus, env)
        finally:
            subprocess.run([args.oxray, "stop", "--force"], env=env, capture_output=True, timeout=60)
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=100, help="trivial trials")
    parser.add_argument("--optuna-trials", type=int, default=100)
    parser.add_argument("--latency-trials", type=int, default=30)
    parser.add_argument("--reports", type=int, default=1000, help="results each fast-reporting trial sends")
    parser.add_argument("--second-trials", type=int, default=40, help="trials of 1 s each")
    parser.add_argument("--paced-reports", type=int, default=250, help="results each 50-a-second trial sends")
    parser.add_argument("--cpus", type=int, default=2)
    parser.add_argument("--oxray", default=os.environ.get("OXRAY_BIN", str(REPO / "target/debug/oxray")))
    parser.add_argument("--no-ray", action="store_true")
    parser.add_argument("--only", default=",".join(WORKLOADS), help="a comma-separated subset of " + ", ".join(WORKLOADS))
    args = parser.parse_args()
    workloads = [w for w in args.only.split(",") if w]
    unknown = [w for w in workloads if w not in WORKLOADS]
    if unknown:
        parser.error(f"unknown workload(s) {unknown}; known: {', '.join(WORKLOADS)}")
    if "optuna" in workloads and not optuna_importable():
        print("(optuna is not installed here: the optuna row is left out)")
        workloads.remove("optuna")
    counts = {"trivial": args.trials, "optuna": args.optuna_trials, "latency": args.latency_trials,
              "reports": args.reports, "seconds": args.second_trials, "paced": args.paced_reports}

    results = {"oxray": oxray_side(args, workloads, counts)}
    if not args.no_ray and real_ray_tune_importable():
        env = {k: v for k, v in os.environ.items() if not k.startswith("OXRAY_")}
        env["RAY_DISABLE_USAGE_STATS"] = "1"
        results["ray"] = {w: run_side("ray", w, counts[w], args.cpus, env) for w in workloads}

    print(f"\non {args.cpus} CPUs; wall s of Tuner.fit() and the workload's figure")
    print(f"{'workload':44}" + "".join(f"{name + ' wall s':>14}{name:>14}" for name in results) + "   oxray vs Ray")
    labels = {"trivial": f"{args.trials} trivial trials", "optuna": f"{args.optuna_trials} OptunaSearch trials",
              "latency": f"start latency, {args.latency_trials} in a row",
              "reports": f"{args.cpus} x {args.reports} fast reports",
              "seconds": f"{args.second_trials} trials of 1 s", "paced": f"{args.cpus} trials x 50 results/s"}
    for workload in workloads:
        unit, more_is_better = FIGURES[workload]
        line = f"{labels[workload] + ' (' + unit + ')':44}"
        for side in results.values():
            line += f"{side[workload]['wall_s']:>14.2f}{side[workload]['rate']:>14.1f}"
        if "ray" in results:
            ours, theirs = results["oxray"][workload]["rate"], results["ray"][workload]["rate"]
            ratio = ours / theirs if more_is_better else theirs / ours
            line += f"{ratio:>12.1f}x"
        print(line)


if __name__ == "__main__":
    main()
