#!/usr/bin/env python3
"""Serve over HTTP, side by side in one run: bare uvicorn + FastAPI (the floor), oxray Serve,
and Ray Serve 2.60 when installed. Each serves a no-op deployment and a chain of two
deployments (the ingress calls the second through a handle); a load generator keeps a fixed
number of requests in flight over keep-alive connections and prints requests/s, p50 and p99.

Usage: .venv/bin/python bench/serve.py [--seconds S] [--concurrency 1,8,32] [--no-ray]
Targets (spec A14): p50 within 1 ms of bare uvicorn, >= 10x Ray Serve's requests/s per
replica, no collapse past max_ongoing_requests, serve.run of a no-op app <= 1 s.
"""

import argparse
import asyncio
import importlib.util
import os
import subprocess
import sys
import tempfile
import time

# Each server runs in a process of its own: oxray and Ray must not share an interpreter.
SERVERS = {
    "uvicorn": r'''
import sys
from fastapi import FastAPI
import uvicorn
app = FastAPI()

@app.get("/")
def noop():
    return "ok"

@app.get("/chain")
def chain():
    return "ok"

print("READY 0.0", flush=True)
uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="error")
''',
    "oxray": r'''
import sys, time
import oxray as rt
from oxray import serve
rt.init(address="local", num_cpus=4)

def replica_pids():
    from oxray.serve import _controller_client
    apps = _controller_client.get_applications()["applications"]
    return [r["pid"] for a in apps.values() for d in a["deployments"].values() for r in d["replicas"]]
''',
    "ray": r'''
import sys, time
import ray as rt
from ray import serve
rt.init(include_dashboard=False, num_cpus=4)

def replica_pids():
    return []  # found by their process titles (ray::ServeReplica:...)
''',
}

# The same application for oxray and Ray: the no-op at /, the chain at /chain (three
# replicas of one CPU each, so both clusters declare 4 CPUs whatever the machine has).
APP = r'''
@serve.deployment(max_ongoing_requests=100)
class Second:
    def __call__(self):
        return "ok"

@serve.deployment(max_ongoing_requests=100)
class Chain:
    def __init__(self, second):
        self.second = second

    async def __call__(self, request):
        return await self.second.remote()

@serve.deployment(max_ongoing_requests=100)
class Noop:
    def __call__(self, request):
        return "ok"

serve.start(http_options={"host": "127.0.0.1", "port": int(sys.argv[1])})
began = time.perf_counter()
serve.run(Noop.bind(), name="noop", route_prefix="/")
took = time.perf_counter() - began
serve.run(Chain.bind(Second.bind()), name="chain", route_prefix="/chain")
print(f"READY {took:.3f} {' '.join(map(str, replica_pids()))}", flush=True)
while True:
    time.sleep(3600)
'''


async def load(url: str, concurrency: int, seconds: float):
    import aiohttp

    latencies = []
    errors = 0
    deadline = time.perf_counter() + seconds

    async def client(session):
        nonlocal errors
        while time.perf_counter() < deadline:
            began = time.perf_counter()
            try:
                async with session.get(url) as r:
                    await r.read()
                    if r.status != 200:
                        errors += 1
            except aiohttp.ClientError:
                errors += 1
            latencies.append(time.perf_counter() - began)

    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector) as session:
        async with session.get(url) as r:  # warm: connection, first call
            await r.read()
        began = time.perf_counter()
        await asyncio.gather(*(client(session) for _ in range(concurrency)))
        elapsed = time.perf_counter() - began
    latencies.sort()
    pick = lambda q: latencies[min(len(latencies) - 1, int(q * len(latencies)))] * 1000  # noqa: E731
    return len(latencies) / elapsed, pick(0.5), pick(0.99), errors


def _kib(pid: int, path: str, key: str) -> int:
    try:
        for line in open(f"/proc/{pid}/{path}"):
            if line.startswith(key):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def _titled(prefix: str):
    """Pids whose command line begins with `prefix` (Ray titles its actors' processes)."""
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if open(f"/proc/{entry}/cmdline", "rb").read().startswith(prefix.encode()):
                    pids.append(int(entry))
            except OSError:
                pass
    return pids


def _argv(pid: int):
    try:
        return open(f"/proc/{pid}/cmdline", "rb").read().decode(errors="replace").split("\0")
    except OSError:
        return []


def memory(system: str, replicas):
    """(MiB of RSS of Serve's control plane, mean MiB of PSS per replica). oxray's control
    plane is the whole head process (Serve's controller and proxy live in it); Ray's are its
    ServeController and ProxyActor processes."""
    if system == "oxray":
        control = [p for p in _titled("") if _argv(p)[1:2] == ["head"] and _argv(p)[0].endswith("oxray")]
    else:
        control = _titled("ray::ServeController") + _titled("ray::ProxyActor")
        replicas = _titled("ray::ServeReplica")
    rss = sum(_kib(p, "status", "VmRSS:") for p in control) / 1024
    pss = [_kib(p, "smaps_rollup", "Pss:") / 1024 for p in replicas]
    return rss, (sum(pss) / len(pss) if pss else 0.0), len(pss)


def serve_with(name: str, port: int, env: dict):
    source = SERVERS[name] + ("" if name == "uvicorn" else APP)
    proc = subprocess.Popen([sys.executable, "-c", source, str(port)], stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True, env=env, start_new_session=True)
    line = proc.stdout.readline()
    if not line.startswith("READY"):
        proc.kill()
        raise RuntimeError(f"{name} did not start")
    words = line.split()
    return proc, float(words[1]), [int(w) for w in words[2:]]


def stop(proc):
    import signal

    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        os.killpg(proc.pid, signal.SIGKILL)
    # Ray leaves its cluster behind a killed driver.
    subprocess.run([os.path.join(os.path.dirname(sys.executable), "ray"), "stop", "--force"],
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False) if "ray" in proc.args[2] else None


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--concurrency", default="1,8,32")
    parser.add_argument("--no-ray", action="store_true")
    args = parser.parse_args()
    levels = [int(c) for c in args.concurrency.split(",")]
    systems = ["uvicorn", "oxray"]
    if not args.no_ray and importlib.util.find_spec("ray") is not None:
        systems.append("ray")
    rows = []
    memories = {}
    with tempfile.TemporaryDirectory() as tmp:
        env = dict(os.environ, OXRAY_HOME=f"{tmp}/home", RAY_USAGE_STATS_ENABLED="0", RAY_TMPDIR=f"{tmp}/ray")
        for system in systems:
            port = 18000 + len(rows)
            proc, run_s, replicas = serve_with(system, port, env)
            try:
                if system != "uvicorn":
                    memories[system] = memory(system, replicas)
                paths = [("no-op", "/")] + ([] if system == "uvicorn" else [("chain of 2", "/chain")])
                for label, path in paths:
                    for c in levels:
                        rps, p50, p99, errors = asyncio.run(load(f"http://127.0.0.1:{port}{path}", c, args.seconds))
                        rows.append((system, label, c, rps, p50, p99, errors, run_s))
                        print(f"{system:8} {label:11} c={c:<3} {rps:9.0f} req/s  p50 {p50:7.2f} ms  p99 {p99:7.2f} ms"
                              f"  errors {errors}", flush=True)
            finally:
                stop(proc)
    print()
    print(f"{'workload':24} {'uvicorn':>16} {'oxray':>16} {'ray':>16} {'oxray/ray':>10}   (req/s, p50 ms)")
    for label in ("no-op", "chain of 2"):
        for c in levels:
            cells = {s: next((r for r in rows if r[0] == s and r[1] == label and r[2] == c), None) for s in systems}
            fmt = lambda r: f"{r[3]:8.0f} {r[4]:6.2f}" if r else f"{'-':>15}"  # noqa: E731
            ratio = ""
            if cells.get("oxray") and cells.get("ray"):
                ratio = f"{cells['oxray'][3] / cells['ray'][3]:.1f}x"
            print(f"{label + ' c=' + str(c):24} {fmt(cells.get('uvicorn')):>16} {fmt(cells.get('oxray')):>16} "
                  f"{fmt(cells.get('ray')):>16} {ratio:>10}")
    for s in systems[1:]:
        r = next(r for r in rows if r[0] == s)
        print(f"serve.run of the no-op app, {s}: {r[7]:.2f} s")
    for s, (rss, pss, n) in memories.items():
        print(f"memory, {s}: control plane {rss:.0f} MiB RSS, replicas {pss:.0f} MiB PSS each ({n} replicas)")


if __name__ == "__main__":
    main()
