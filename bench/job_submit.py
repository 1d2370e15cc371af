#!/usr/bin/env python3
"""Time to submit `python -c "print(1)"` and see it SUCCEEDED: oxray's own CLI, Ray's CLI
and Ray's JobSubmissionClient against an oxray head and, when Ray can start here, against
Ray's own head. Ray's client comes from the venv of python/requirements-compat.txt.

Usage: bench/job_submit.py [--oxray PATH] [--venv DIR] [--runs N] [--no-ray-cluster]
Target: at most 0.5 s for `oxray job submit` (and for the server side, the SDK row).
"""

import argparse
import json
import os
import shlex
import signal
import socket
import statistics
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path

ENTRYPOINT = ["python", "-c", "print(1)"]

# Submit, follow the log tail until the server closes it, then read the status: what
# `ray job submit` does, minus the ~1 s of Python start-up and imports.
SDK_SCRIPT = """
import asyncio, statistics, sys, time
from ray.job_submission import JobStatus, JobSubmissionClient
client = JobSubmissionClient(sys.argv[1])
async def follow(job_id):
    async for _ in client.tail_job_logs(job_id):
        pass
times = []
for _ in range(int(sys.argv[2]) + 1):  # the first run warms up workers; not counted
    began = time.perf_counter()
    job_id = client.submit_job(entrypoint=sys.argv[3])
    asyncio.run(follow(job_id))
    status = client.get_job_status(job_id)
    assert status == JobStatus.SUCCEEDED, (job_id, status)
    times.append(time.perf_counter() - began)
print(statistics.median(times[1:]))
"""


def timed_runs(cmd, env, runs):
    times = []
    for i in range(runs + 1):
        began = time.perf_counter()
        p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
        if p.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} exited {p.returncode}:\n{p.stdout}{p.stderr}")
        if i:  # the first run warms up caches and workers
            times.append(time.perf_counter() - began)
    return statistics.median(times)


def sdk_median(python, url, env, runs):
    p = subprocess.run([python, "-c", SDK_SCRIPT, url, str(runs), shlex.join(ENTRYPOINT)],
                       env=env, capture_output=True, text=True, timeout=600)
    if p.returncode != 0:
        raise RuntimeError(f"JobSubmissionClient run failed:\n{p.stderr[-2000:]}")
    return float(p.stdout.split()[-1])


def client_env(venv, token=None):
    env = {k: v for k, v in os.environ.items()
           if k not in ("RAY_ADDRESS", "RAY_API_SERVER_ADDRESS", "RAY_JOB_HEADERS", "RAY_AUTH_TOKEN")}
    # `python` in the entrypoint must exist on the server side; the venv's does.
    env.update(RAY_USAGE_STATS_ENABLED="0", PATH=f"{venv}/bin{os.pathsep}{env.get('PATH', '')}",
               NO_PROXY="127.0.0.1,localhost", no_proxy="127.0.0.1,localhost")
    if token:
        env.update(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=token)
    else:
        env.pop("RAY_AUTH_MODE", None)
    return env


def bench_oxray_head(binary, venv, runs):
    """Rows for an oxray head: {workload: seconds or a reason it is n/a}."""
    rows = {}
    with tempfile.TemporaryDirectory() as tmp:
        env = client_env(venv)
        env.update(OXRAY_HOME=f"{tmp}/home", OXRAY_TEMP_DIR=f"{tmp}/sessions")
        env.pop("OXRAY_AUTH_TOKEN", None)
        subprocess.run([binary, "start", "--head", "--port", "0", "--dashboard-port", "0", "--num-cpus", "2"],
                       env=env, check=True, stdout=subprocess.DEVNULL)
        try:
            url = json.loads(Path(f"{tmp}/home/current_cluster.json").read_text())["dashboard_url"]
            token = subprocess.run([binary, "get-auth-token"], env=env, check=True,
                                   capture_output=True, text=True).stdout.strip()
            if subprocess.run([binary, "job", "submit", "--help"], env=env, capture_output=True).returncode:
                rows["oxray"] = "n/a: this oxray has no `job submit` yet"
            else:
                rows["oxray"] = timed_runs([binary, "job", "submit", "--", *ENTRYPOINT], env, runs)
                # Its exit code alone could hide a job that never ran: ask the server.
                req = urllib.request.Request(f"{url}/api/jobs/", headers={"Authorization": f"Bearer {token}"})
                statuses = [j["status"] for j in json.load(urllib.request.urlopen(req, timeout=30))]
                if statuses != ["SUCCEEDED"] * (runs + 1):
                    raise RuntimeError(f"`oxray job submit` returned 0 but the jobs are {statuses}")
            ray_env = client_env(venv, token)
            rows["ray"] = timed_runs([f"{venv}/bin/ray", "job", "submit", "--address", url, "--", *ENTRYPOINT],
                                     ray_env, runs)
            rows["sdk"] = sdk_median(f"{venv}/bin/python", url, ray_env, runs)
        finally:
            subprocess.run([binary, "stop", "--force"], env=env, stdout=subprocess.DEVNULL)
    return rows


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def bench_ray_head(venv, runs):
    """The same rows against Ray's own head, started in the foreground (--block) in its own
    process group so that it is stopped by group id, leaving any other Ray alone."""
    env = client_env(venv)
    with tempfile.TemporaryDirectory(prefix="rb") as tmp:  # short: Ray's socket paths are limited
        dash = free_port()
        head = subprocess.Popen(
            [f"{venv}/bin/ray", "start", "--head", "--block", f"--temp-dir={tmp}", f"--port={free_port()}",
             f"--dashboard-port={dash}", "--dashboard-host=127.0.0.1", "--include-dashboard=true",
             f"--ray-client-server-port={free_port()}", f"--dashboard-agent-listen-port={free_port()}",
             "--num-cpus=2", "--disable-usage-stats"],
            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        url = f"http://127.0.0.1:{dash}"
        try:
            deadline = time.monotonic() + 90
            while True:
                if head.poll() is not None:
                    return {"error": f"`ray start --head` exited {head.returncode}"}
                try:
                    urllib.request.urlopen(f"{url}/api/version", timeout=2).read()
                    break
                except OSError:
                    if time.monotonic() > deadline:
                        return {"error": "Ray's dashboard did not come up within 90 s"}
                    time.sleep(0.5)
            return {"ray": timed_runs([f"{venv}/bin/ray", "job", "submit", "--address", url, "--", *ENTRYPOINT],
                                      env, runs),
                    "sdk": sdk_median(f"{venv}/bin/python", url, env, runs)}
        finally:
            for sig, wait in ((signal.SIGTERM, 15), (signal.SIGKILL, 5)):
                try:
                    os.killpg(head.pid, sig)
                    head.wait(wait)
                    break
                except ProcessLookupError:
                    break
                except subprocess.TimeoutExpired:
                    continue


def main():
    root = Path(__file__).resolve().parent.parent
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--oxray", default=str(root / "target/release/oxray"))
    parser.add_argument("--venv", default=str(root / ".venv"), help="venv with ray[default]==2.60.0")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--no-ray-cluster", action="store_true", help="skip starting Ray's own head")
    args = parser.parse_args()
    if not Path(args.venv, "bin/ray").exists():
        raise SystemExit(f"no Ray client in {args.venv}: python3 -m venv {args.venv} && "
                         f"{args.venv}/bin/pip install -r python/requirements-compat.txt")

    ox = bench_oxray_head(args.oxray, args.venv, args.runs)
    ray = {"error": "skipped (--no-ray-cluster)"} if args.no_ray_cluster else bench_ray_head(args.venv, args.runs)

    def cell(rows, key):
        value = rows.get(key, "n/a")
        return f"{value:.3f}" if isinstance(value, float) else "n/a"

    print(f"submit `python -c 'print(1)'` until SUCCEEDED, median of {args.runs} (s)")
    print(f"{'client':44} {'oxray head':>11} {'ray head':>10}  target")
    for key, name, target in (("oxray", "oxray job submit", "<= 0.5"),
                              ("ray", "ray job submit (Ray's CLI)", ""),
                              ("sdk", "JobSubmissionClient submit + tail (in process)", "<= 0.5")):
        print(f"{name:44} {cell(ox, key):>11} {cell(ray, key):>10}  {target}")
    for note in (ox.get("oxray"), ray.get("error")):
        if isinstance(note, str):
            print(f"({note})")


if __name__ == "__main__":
    main()
