#!/usr/bin/env python3
"""What reporting task and actor state to the head costs the fastest rows of
`bench/microbenchmark.py`: each row with reporting on and off
(`OXRAY_TASK_EVENTS_REPORT_INTERVAL_MS=0`), in alternating rounds on fresh private clusters,
the median of the rounds shown. Two measures per row: calls per second, and the CPU time
the whole cluster (driver, head, agent, workers) spent per call. On a small shared machine
the first swings with scheduling from round to round; the second counts the work done and
shows the cost of reporting more steadily.

With --against DIR, a third column runs the same rows on another built checkout (its
`python/` with the native module in place and its `target/release/oxray`): the code before
reporting existed, to see the rows against what they were then.

Usage: .venv/bin/python bench/reporting_cost.py [--rounds 4] [--seconds 1.0] [--against DIR]
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

ROWS = ("single client tasks async", "1:1 actor calls async", "1:1 actor calls concurrent",
        "n:n actor calls async", "1:n async-actor calls async")


ROLES = ("driver", "head", "agent", "workers")


def role_of(pid, root):
    """Which part of the cluster `pid` is, from its command line."""
    if pid == root:
        return "driver"
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            argv = f.read().split(b"\0")
    except OSError:
        return "workers"
    for role in (b"head", b"agent"):
        if role in argv or b"--" + role in argv:
            return role.decode()
    return "workers"


def tree_cpu_s(root):
    """CPU seconds (user + system) spent so far by `root` and every process below it, by
    role."""
    children, cpu = {}, {}
    tick = os.sysconf("SC_CLK_TCK")
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rpartition(")")[2].split()
        except OSError:  # gone meanwhile
            continue
        pid, ppid = int(entry), int(fields[1])
        children.setdefault(ppid, []).append(pid)
        cpu[pid] = (int(fields[11]) + int(fields[12])) / tick
    total, stack = dict.fromkeys(ROLES, 0.0), [root]
    while stack:
        pid = stack.pop()
        total[role_of(pid, root)] += cpu.get(pid, 0.0)
        stack.extend(children.get(pid, ()))
    return total


def costed(fn, seconds, batch):
    """(calls per second as `rate` measures it, CPU microseconds of the cluster per call,
    and of each role per call)."""
    from microbenchmark import rate

    me = os.getpid()
    began_cpu, began = tree_cpu_s(me), time.perf_counter()
    calls = rate(fn, seconds, batch)
    spent = time.perf_counter() - began
    # rate() runs a warm-up call, then its trials: all of it is counted.
    ended_cpu = tree_cpu_s(me)
    per_call = {r: 1e6 * (ended_cpu[r] - began_cpu[r]) / (calls * spent) for r in ROLES}
    return calls, sum(per_call.values()), per_call


def measure(seconds):
    """The rows in this process, on a private cluster; printed as JSON."""
    import ctypes
    import multiprocessing

    import oxray as rt

    # The cluster's daemons are adopted by this process when their launcher exits, so
    # their CPU time is counted with its own.
    PR_SET_CHILD_SUBREAPER = 36
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)

    @rt.remote
    def small_value():
        return b"ok"

    @rt.remote
    class Actor:
        def small_value(self):
            return b"ok"

    @rt.remote
    class AsyncActor:
        async def small_value(self):
            return b"ok"

    @rt.remote
    class Client:
        def __init__(self, servers):
            self.servers = servers if isinstance(servers, list) else [servers]

        def small_value_batch(self, n):
            rt.get([s.small_value.remote() for s in self.servers for _ in range(n)])

    n_cpu = max(1, multiprocessing.cpu_count() // 2)
    rt.init(address="local", num_cpus=os.cpu_count())
    out = {}
    out[ROWS[0]] = costed(lambda: rt.get([small_value.remote() for _ in range(1000)]), seconds, 1000)
    a = Actor.remote()
    out[ROWS[1]] = costed(lambda: rt.get([a.small_value.remote() for _ in range(1000)]), seconds, 1000)
    c = Actor.options(max_concurrency=16).remote()
    out[ROWS[2]] = costed(lambda: rt.get([c.small_value.remote() for _ in range(1000)]), seconds, 1000)
    servers = [Actor.remote() for _ in range(n_cpu)]

    @rt.remote
    def work(actors):
        rt.get([actors[i % n_cpu].small_value.remote() for i in range(5000)])

    out[ROWS[3]] = costed(lambda: rt.get([work.remote(servers) for _ in range(4)]), seconds, 4 * 5000)
    client = Client.remote([AsyncActor.remote() for _ in range(n_cpu)])
    out[ROWS[4]] = costed(lambda: rt.get(client.small_value_batch.remote(5000)), seconds, 5000 * n_cpu)
    rt.shutdown()
    print(json.dumps(out))


def one_round(seconds, reporting, against=None):
    here = os.path.dirname(os.path.abspath(__file__))
    env = dict(os.environ)
    env.pop("OXRAY_TASK_EVENTS_REPORT_INTERVAL_MS", None)
    if not reporting:
        env["OXRAY_TASK_EVENTS_REPORT_INTERVAL_MS"] = "0"
    path = [here]
    if against:
        path.insert(0, os.path.join(against, "python"))
        env["OXRAY_BIN"] = os.path.join(against, "target", "release", "oxray")
    with tempfile.TemporaryDirectory() as home:
        env["OXRAY_HOME"] = home
        env["PYTHONPATH"] = os.pathsep.join(path + [env.get("PYTHONPATH", "")])
        out = subprocess.run([sys.executable, __file__, "--measure", "--seconds", str(seconds)], env=env,
                             capture_output=True, text=True, timeout=600, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=1.0)
    parser.add_argument("--measure", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--against", metavar="DIR", help="another built checkout, run as a third column")
    args = parser.parse_args()
    if args.measure:
        return measure(args.seconds)
    runs = {True: [], False: [], "against": []}
    for _ in range(args.rounds):
        for reporting in (True, False):
            runs[reporting].append(one_round(args.seconds, reporting))
        if args.against:
            runs["against"].append(one_round(args.seconds, True, args.against))

    def median(reporting, pick):
        values = sorted(pick(r) for r in runs[reporting])
        return values[len(values) // 2]

    print(f"median of {args.rounds} rounds each; CPU: the cluster's CPU time per call")
    print(f"{'row':34} {'calls/s on':>10} {'off':>10} {'on vs off':>10} {'CPU us on':>10} {'off':>8} {'on vs off':>10}"
          + (f" {'against':>10} {'on vs it':>9}" if args.against else ""))
    for row in ROWS:
        on, off = median(True, lambda r: r[row][0]), median(False, lambda r: r[row][0])
        cpu_on, cpu_off = median(True, lambda r: r[row][1]), median(False, lambda r: r[row][1])
        line = (f"{row:34} {on:>10.0f} {off:>10.0f} {100 * (on / off - 1):>+9.1f}% "
                f"{cpu_on:>10.1f} {cpu_off:>8.1f} {100 * (cpu_on / cpu_off - 1):>+9.1f}%")
        if args.against:
            then = median("against", lambda r: r[row][0])
            line += f" {then:>10.0f} {100 * (on / then - 1):>+8.1f}%"
        print(line)
    print()
    print("where reporting's CPU goes: us per call, on minus off (median of the rounds)")
    print(f"{'row':34} " + " ".join(f"{r:>8}" for r in ROLES))
    for row in ROWS:
        share = [median(True, lambda r: r[row][2][role]) - median(False, lambda r: r[row][2][role]) for role in ROLES]
        print(f"{row:34} " + " ".join(f"{d:>+8.2f}" for d in share))


if __name__ == "__main__":
    main()
