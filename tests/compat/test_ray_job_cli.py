"""Ray's own `ray job …` and `ray list nodes` CLI (subprocesses) against an oxray head."""

import json
import re
import time
import uuid
from pathlib import Path

# Ray's generated ids: 16 chars of [A-Za-z0-9] without I l o O 0.
GENERATED_ID = re.compile(r"raysubmit_[A-HJ-NP-Za-km-np-z1-9]{16}")


def new_id(prefix):
    return f"compat-{prefix}-{uuid.uuid4().hex[:8]}"


def submitted_id(res):
    m = re.search(r"Job '([^']+)' submitted successfully", res.output)
    assert m, res
    return m.group(1)


def procs_with(marker):
    """Pids whose command line contains `marker` (to find leftovers of a stopped job)."""
    found = []
    for p in Path("/proc").iterdir():
        try:
            if p.name.isdigit() and marker in (p / "cmdline").read_bytes().decode(errors="replace"):
                found.append(int(p.name))
        except OSError:
            pass
    return found


def test_submit_waits_tails_logs_and_succeeds(cluster):
    r = cluster.ray("job", "submit", "--", "python", "-c", "print(1+1)")
    assert r.returncode == 0, r
    job_id = submitted_id(r)
    assert GENERATED_ID.fullmatch(job_id), job_id
    # The tail (WebSocket) prints the log, whose own line "2" is the script's output.
    assert re.search(r"^2$", r.stdout, re.M), r
    assert f"Job '{job_id}' succeeded" in r.output, r
    assert cluster.job(job_id)["status"] == "SUCCEEDED"


def test_no_wait_then_status_and_logs(cluster):
    job_id = new_id("nowait")
    r = cluster.ray("job", "submit", "--no-wait", "--submission-id", job_id,
                    "--", "sh", "-c", "echo hello-$((40+2))")
    assert r.returncode == 0, r
    assert submitted_id(r) == job_id
    assert "Tailing logs" not in r.output, r
    cluster.wait_job(job_id)
    r = cluster.ray("job", "status", job_id)
    assert r.returncode == 0 and f"Job '{job_id}' succeeded" in r.output, r
    r = cluster.ray("job", "logs", job_id)
    assert r.returncode == 0 and "hello-42" in r.stdout, r
    # --follow on a finished job replays the log over the WebSocket, then returns.
    r = cluster.ray("job", "logs", "--follow", job_id)
    assert r.returncode == 0 and "hello-42" in r.stdout, r


def test_failing_entrypoint_exits_1(cluster):
    r = cluster.ray("job", "submit", "--", "sh", "-c", "echo about-to-fail; exit 3")
    assert r.returncode == 1, r
    job_id = submitted_id(r)
    assert "about-to-fail" in r.stdout, r
    assert f"Job '{job_id}' failed" in r.output, r
    # The status is read after the WebSocket closes; it must already be terminal.
    info = cluster.job(job_id)
    assert (info["status"], info["driver_exit_code"]) == ("FAILED", 3), info
    assert info["error_type"] == "JOB_ENTRYPOINT_COMMAND_ERROR", info
    assert "exit code 3" in info["message"], info


def test_working_dir_upload(cluster, tmp_path):
    wd = tmp_path / "wd"
    (wd / "sub").mkdir(parents=True)
    (wd / "empty").mkdir()
    (wd / "sub" / "data.txt").write_text("payload-from-subdir\n")
    (wd / "script.py").write_text(
        "import os\n"
        "print(open('sub/data.txt').read().strip())\n"
        "print('empty-dir:', os.path.isdir('empty'))\n")
    # Twice: the second time the client finds the package (GET 200) and skips the PUT.
    for _ in range(2):
        r = cluster.ray("job", "submit", "--working-dir", str(wd), "--", "python", "script.py")
        assert r.returncode == 0, r
        assert "payload-from-subdir" in r.stdout and "empty-dir: True" in r.stdout, r
    working_dir = cluster.job(submitted_id(r))["runtime_env"]["working_dir"]
    assert re.fullmatch(r"gcs://_ray_pkg_[0-9a-f]{16}\.zip", working_dir), working_dir


def test_runtime_env_json_env_vars(cluster):
    r = cluster.ray("job", "submit", "--runtime-env-json", '{"env_vars": {"X": "y"}}',
                    "--", "sh", "-c", "echo X=$X")
    assert r.returncode == 0 and re.search(r"^X=y$", r.stdout, re.M), r
    # Not a browser, so the values are not redacted.
    assert cluster.job(submitted_id(r))["runtime_env"] == {"env_vars": {"X": "y"}}


def test_metadata_json(cluster):
    meta = {"owner": "compat", "run": "7"}
    r = cluster.ray("job", "submit", "--no-wait", "--metadata-json", json.dumps(meta),
                    "--", "true")
    assert r.returncode == 0, r
    assert cluster.wait_job(submitted_id(r))["metadata"] == meta


def test_submission_id_and_duplicate_refused(cluster):
    job_id = new_id("dup")
    r = cluster.ray("job", "submit", "--no-wait", "--submission-id", job_id, "--", "true")
    assert r.returncode == 0 and submitted_id(r) == job_id, r
    r = cluster.ray("job", "submit", "--no-wait", "--submission-id", job_id, "--", "true")
    assert r.returncode != 0, r
    assert "already exists" in r.output and "status code 400" in r.output, r


def test_stop_long_job(cluster):
    job_id = new_id("stop")
    marker = f"61.{uuid.uuid4().int % 10**6:06d}"  # a background child the stop must reach too
    r = cluster.ray("job", "submit", "--no-wait", "--submission-id", job_id,
                    "--", "sh", "-c", f"sleep {marker} & sleep 60")
    assert r.returncode == 0, r
    cluster.wait_job(job_id, ("RUNNING",))
    r = cluster.ray("job", "status", job_id)
    assert f"Status for job '{job_id}': RUNNING" in r.output, r
    began = time.monotonic()
    r = cluster.ray("job", "stop", job_id)  # waits until the job is terminal
    assert r.returncode == 0 and f"Job '{job_id}' was stopped" in r.output, r
    assert time.monotonic() - began < 30
    info = cluster.job(job_id)
    assert info["status"] == "STOPPED" and info["driver_exit_code"] is None, info
    assert info["end_time"] >= info["start_time"], info
    deadline = time.monotonic() + 15
    while procs_with(f"sleep\0{marker}") and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not procs_with(f"sleep\0{marker}"), "a child of the stopped job survived"


def test_infeasible_resources_fail_fast(cluster):
    # Ray keeps such a job PENDING (an autoscaler may add a node) and fails it after
    # RAY_JOB_START_TIMEOUT_SECONDS (900 s); oxray has no autoscaler and fails it at once.
    r = cluster.ray("job", "submit", "--entrypoint-resources", '{"nope": 1}', "--", "echo", "never")
    assert r.returncode == 1, r
    info = cluster.job(submitted_id(r))
    assert info["status"] == "FAILED" and info["driver_node_id"] is None, info
    assert info["error_type"] == "JOB_SUPERVISOR_ACTOR_UNSCHEDULABLE" and "nope" in info["message"], info


def test_busy_resources_queue_as_pending(cluster):
    holder, waiter, canceled = new_id("holder"), new_id("waiter"), new_id("canceled")
    for job_id in (holder, waiter, canceled):  # the cluster has a single `accel`
        r = cluster.ray("job", "submit", "--no-wait", "--submission-id", job_id,
                        "--entrypoint-resources", '{"accel": 1}', "--", "sleep", "60")
        assert r.returncode == 0, r
    try:
        cluster.wait_job(holder, ("RUNNING",))
        time.sleep(2)
        for job_id in (waiter, canceled):
            info = cluster.job(job_id)
            assert info["status"] == "PENDING" and info["driver_node_id"] is None, info
            assert info["message"].startswith("Job has not started yet."), info
        # A stop while PENDING ends in STOPPED too, and the entrypoint never runs.
        r = cluster.ray("job", "stop", canceled)
        assert r.returncode == 0 and f"Job '{canceled}' was stopped" in r.output, r
        assert cluster.http("GET", f"/api/jobs/{canceled}/logs") == (200, {"logs": ""})
        r = cluster.ray("job", "stop", "--no-wait", holder)
        assert r.returncode == 0, r
        cluster.wait_job(waiter, ("RUNNING",))  # the freed `accel` goes to the waiter
    finally:
        for job_id in (holder, waiter, canceled):
            cluster.http("POST", f"/api/jobs/{job_id}/stop")
    cluster.wait_job(waiter, ("STOPPED",))


def test_delete_finished_and_refuse_running(cluster):
    done = new_id("del")
    r = cluster.ray("job", "submit", "--submission-id", done, "--", "echo", "done")
    assert r.returncode == 0, r
    r = cluster.ray("job", "delete", done)
    assert r.returncode == 0 and f"Job '{done}' deleted successfully" in r.output, r
    assert cluster.http("GET", f"/api/jobs/{done}")[0] == 404
    assert cluster.ray("job", "status", done).returncode != 0

    running = new_id("del-running")
    r = cluster.ray("job", "submit", "--no-wait", "--submission-id", running, "--", "sleep", "60")
    assert r.returncode == 0, r
    cluster.wait_job(running, ("RUNNING",))
    try:
        r = cluster.ray("job", "delete", running)
        assert r.returncode != 0 and "status code 500" in r.output, r
        assert cluster.job(running)["status"] == "RUNNING"
    finally:
        cluster.http("POST", f"/api/jobs/{running}/stop")
    cluster.wait_job(running)


def test_list(cluster):
    ids = [new_id("list") for _ in range(2)]
    for job_id in ids:
        r = cluster.ray("job", "submit", "--no-wait", "--submission-id", job_id, "--", "true")
        assert r.returncode == 0, r
    r = cluster.ray("job", "list")
    assert r.returncode == 0, r
    for job_id in ids:
        assert f"submission_id='{job_id}'" in r.stdout, r


def test_entrypoint_resources_choose_the_node(cluster):
    by_name = {n["node_name"]: n["node_id"] for n in cluster.nodes()}
    worker = by_name.pop("compat-worker")
    (head,) = by_name.values()
    # Only the worker has `accel`; only the head has 2 CPUs. Both must be honoured.
    for flag, value, node in (("--entrypoint-resources", '{"accel": 1}', worker),
                              ("--entrypoint-num-cpus", "2", head),
                              ("--entrypoint-num-cpus", "1", None)):
        r = cluster.ray("job", "submit", flag, value, "--", "echo", "placed")
        assert r.returncode == 0 and "placed" in r.stdout, r
        info = cluster.job(submitted_id(r))
        assert info["driver_node_id"] in ((node,) if node else (worker, head)), (flag, info)


def test_ray_list_nodes(cluster):
    r = cluster.ray("list", "nodes", "--format", "json")
    assert r.returncode == 0, r
    nodes = json.loads(r.stdout)
    assert sorted(n["node_id"] for n in nodes) == sorted(n["node_id"] for n in cluster.nodes())
    assert sorted(n["is_head_node"] for n in nodes) == [False, True]
    (worker,) = [n for n in nodes if not n["is_head_node"]]
    assert worker["node_name"] == "compat-worker" and worker["state"] == "ALIVE", worker
    assert worker["resources_total"]["accel"] == 1.0, worker

    r = cluster.ray("list", "nodes", "--detail", "--format", "json",
                    "--filter", "is_head_node=true")
    assert r.returncode == 0, r
    (head,) = json.loads(r.stdout)
    assert head["is_head_node"] and head["start_time_ms"], head  # the CLI renders it as a date


def test_auth_missing_and_wrong_token(cluster):
    no_auth = {k: v for k, v in cluster.env.items() if k not in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN")}
    wrong = dict(cluster.env, RAY_AUTH_TOKEN="0" * 64)
    for env, expected in ((no_auth, "Authentication required"), (wrong, "Authentication failed")):
        for args in (("job", "list"), ("list", "nodes")):
            r = cluster.ray(*args, env=env)
            assert r.returncode != 0 and expected in r.output, (args, r)
    # A user-supplied Authorization header works without RAY_AUTH_MODE.
    r = cluster.ray("job", "list", "--headers",
                    json.dumps({"Authorization": f"Bearer {cluster.token}"}), env=no_auth)
    assert r.returncode == 0, r


def test_token_through_ray_job_headers(cluster):
    # RAY_JOB_HEADERS is the CLI's fallback for --headers; no RAY_AUTH_MODE needed.
    env = {k: v for k, v in cluster.env.items() if k not in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN")}
    env["RAY_JOB_HEADERS"] = json.dumps({"Authorization": f"Bearer {cluster.token}"})
    r = cluster.ray("job", "submit", "--", "echo", "via-headers", env=env)
    assert r.returncode == 0 and "via-headers" in r.output, r
