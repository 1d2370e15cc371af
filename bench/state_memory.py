#!/usr/bin/env python3
"""The memory of the process that keeps task state (oxray's head, Ray's GCS server) while a
driver runs many short tasks: it must stay flat once the kept task records are at their cap
(oxray: --max-ended-tasks, 10,000 by default; Ray: task_events_max_num_task_in_gcs, 100,000).

Usage: .venv/bin/python bench/state_memory.py [--tasks N] [--every N] [--ray]
Prints the RSS in MiB after every `--every` tasks, for oxray and (with --ray) for Ray, each
in an interpreter of its own.
"""

import argparse
import json
import subprocess
import sys

# Runs inside the child interpreter: starts the runtime, finds its state keeper, runs the
# tasks in rounds and prints one JSON line per round.
CHILD = r'''
import json, os, sys, time
name, total, every = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rt = __import__(name)
if name == "oxray":
    rt.init(address="local", num_cpus=2)
else:
    rt.init(num_cpus=2, include_dashboard=False)

def argv(pid):
    try:
        return open(f"/proc/{pid}/cmdline", "rb").read().decode(errors="replace").split("\0")
    except OSError:
        return []

def descends_from_me(pid):
    while pid > 1:
        try:
            stat = open(f"/proc/{pid}/stat").read()
            pid = int(stat[stat.rfind(")") + 2:].split()[1])
        except (OSError, ValueError):
            return False
        if pid == os.getpid():
            return True
    return False

def keeper():
    """The state keeper of the cluster this driver started (not of another one)."""
    for entry in os.listdir("/proc"):
        if entry.isdigit() and descends_from_me(int(entry)):
            a = argv(int(entry))
            if name == "oxray" and a[1:2] == ["head"] and a[0].endswith("oxray"):
                return int(entry)
            if name == "ray" and a and a[0].endswith("gcs_server"):
                return int(entry)
    raise SystemExit(f"no state keeper found for {name}")

def rss_mib(pid):
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0

@rt.remote
def noop():
    return None

pid = keeper()
print(json.dumps({"done": 0, "rss": rss_mib(pid), "seconds": 0.0}), flush=True)
done, began = 0, time.perf_counter()
while done < total:
    for _ in range(every // 1000):
        rt.get([noop.remote() for _ in range(1000)])
    done += every
    time.sleep(1.5)  # reports reach the state keeper about once a second
    print(json.dumps({"done": done, "rss": rss_mib(pid), "seconds": time.perf_counter() - began}), flush=True)
rt.shutdown()
'''


def run(name, total, every):
    proc = subprocess.run([sys.executable, "-c", CHILD, name, str(total), str(every)],
                          capture_output=True, text=True, timeout=3600)
    if proc.returncode:
        raise SystemExit(f"{name} failed:\n{proc.stderr[-2000:]}")
    return [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", type=int, default=100_000)
    parser.add_argument("--every", type=int, default=10_000, help="tasks between readings (a multiple of 1000)")
    parser.add_argument("--ray", action="store_true", help="the same on Ray")
    args = parser.parse_args()
    every = max(1000, args.every // 1000 * 1000)
    oxray = run("oxray", args.tasks, every)
    ray = run("ray", args.tasks, every) if args.ray else []
    print(f"{'tasks done':>10} {'oxray head RSS MiB':>19} {'Ray GCS RSS MiB':>16}")
    for i, row in enumerate(oxray):
        theirs = f"{ray[i]['rss']:>16.1f}" if i < len(ray) else f"{'':>16}"
        print(f"{row['done']:>10} {row['rss']:>19.1f} {theirs}")
    print(f"time for {args.tasks} tasks: oxray {oxray[-1]['seconds']:.1f} s"
          + (f", Ray {ray[-1]['seconds']:.1f} s" if ray else "") + " (with 1.5 s pauses per reading)")


if __name__ == "__main__":
    main()
