#!/usr/bin/env python3
"""Time from `start --head` to a ready cluster, and the memory (PSS) of an idle head plus
one node, for oxray and, when it is installed, for Ray on the same machine.

Usage: bench/cluster_start.py [--oxray PATH] [--runs N] [--idle SECONDS]
Targets: at most 0.3 s to ready and 50 MB for head + 1 node.
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path


def pss_kib(pid):
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def descendants(roots):
    """Every live process whose ancestry reaches one of `roots`."""
    parents = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
                parents[int(entry.name)] = int(stat[stat.rfind(")") + 2 :].split()[1])
            except (OSError, ValueError, IndexError):
                pass
    found = set(r for r in roots if r in parents)
    changed = True
    while changed:
        changed = False
        for pid, ppid in parents.items():
            if ppid in found and pid not in found:
                found.add(pid)
                changed = True
    return found


def alive(pid):
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        return stat[stat.rfind(")") + 2] != "Z"
    except OSError:
        return False


def bench_oxray(binary, runs, idle):
    times, memory, counts = [], [], []
    for _ in range(runs):
        with tempfile.TemporaryDirectory() as tmp:
            env = dict(os.environ, OXRAY_HOME=f"{tmp}/home", OXRAY_TEMP_DIR=f"{tmp}/sessions")
            env.pop("OXRAY_AUTH_TOKEN", None)
            began = time.perf_counter()
            subprocess.run([binary, "start", "--head", "--port", "0", "--dashboard-port", "0"],
                           env=env, check=True, stdout=subprocess.DEVNULL)
            times.append(time.perf_counter() - began)
            time.sleep(idle)
            roots = [json.loads(p.read_text())["pid"] for p in Path(f"{tmp}/home/procs").glob("*.json")]
            pids = [p for p in descendants(roots) if alive(p)]
            memory.append(sum(pss_kib(p) for p in pids) / 1024)
            counts.append(len(pids))
            subprocess.run([binary, "stop"], env=env, check=True, stdout=subprocess.DEVNULL)
    return statistics.median(times), statistics.median(memory), max(counts)


def bench_ray(runs, idle):
    ray = shutil.which("ray")
    if not ray:
        return None
    times, memory, counts = [], [], []
    for _ in range(runs):
        with tempfile.TemporaryDirectory() as tmp:
            before = set(int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit())
            began = time.perf_counter()
            subprocess.run([ray, "start", "--head", f"--temp-dir={tmp}", "--port=6390", "--dashboard-port=8266",
                            "--include-dashboard=true", "--disable-usage-stats"],
                           check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            times.append(time.perf_counter() - began)
            time.sleep(idle)
            now = set(int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit())
            pids = [p for p in now - before if alive(p)]
            memory.append(sum(pss_kib(p) for p in pids) / 1024)
            counts.append(len(pids))
            subprocess.run([ray, "stop", "--force"], check=False, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return statistics.median(times), statistics.median(memory), max(counts)


def main():
    root = Path(__file__).resolve().parent.parent
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--oxray", default=str(root / "target/release/oxray"))
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--idle", type=float, default=2.0, help="seconds to idle before measuring memory")
    args = parser.parse_args()

    ox = bench_oxray(args.oxray, args.runs, args.idle)
    ray = bench_ray(max(1, args.runs // 2), args.idle)
    rows = [("start --head until ready (s, median)", 0, "{:.3f}", "<= 0.3"),
            ("idle head + 1 node PSS (MB, median)", 1, "{:.1f}", "<= 50"),
            ("processes", 2, "{:d}", "")]
    print(f"{'workload':40} {'oxray':>10} {'ray':>10} {'ray/oxray':>10}  target")
    for name, i, fmt, target in rows:
        ray_cell = fmt.format(ray[i]) if ray else "n/a"
        ratio = f"{ray[i] / ox[i]:.1f}x" if ray and ox[i] else ""
        print(f"{name:40} {fmt.format(ox[i]):>10} {ray_cell:>10} {ratio:>10}  {target}")
    if not ray:
        print("(Ray is not installed here; `pip install 'ray[default]'` to compare side by side)")


if __name__ == "__main__":
    main()
