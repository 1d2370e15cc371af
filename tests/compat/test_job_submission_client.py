"""Ray's `ray.job_submission.JobSubmissionClient` (in process) against an oxray head."""

import asyncio
import json
import subprocess
import sys
import time
import uuid

import aiohttp
import pytest
from ray.exceptions import AuthenticationError
from ray.job_submission import JobDetails, JobStatus, JobSubmissionClient, JobType

DETAILS_KEYS = {"type", "job_id", "submission_id", "driver_info", "status", "entrypoint",
                "message", "error_type", "start_time", "end_time", "metadata", "runtime_env",
                "driver_agent_http_address", "driver_node_id", "driver_exit_code"}


TERMINAL = (JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.STOPPED)


@pytest.fixture
def wait_status(cluster, sdk):
    def wait(job_id, statuses=TERMINAL):
        seen = []
        cluster.wait_for(lambda: seen.append(sdk.get_job_status(job_id)) or seen[-1] in statuses,
                         cluster.timeout, lambda: f"{job_id} in {statuses}; last {seen[-1:]}")
        assert isinstance(seen[-1], JobStatus)
        return seen[-1]
    return wait


async def first_chunk(client, job_id):
    return await anext(client.tail_job_logs(job_id))


def test_version_handshake(cluster, sdk):
    status, body = cluster.http("GET", "/api/version", token=False)  # needs no token
    assert status == 200, body
    assert body["version"] == "4" and body["ray_version"] == "2.60.0", body
    assert sdk.get_version() == "4"


def test_submit_and_job_details(cluster, sdk, wait_status):
    before = int(time.time() * 1000)
    job_id = sdk.submit_job(entrypoint="python -c \"print('sdk-' + 'ok')\"", metadata={"k": "v"})
    assert wait_status(job_id) == JobStatus.SUCCEEDED
    after = int(time.time() * 1000)
    info = sdk.get_job_info(job_id)
    assert isinstance(info, JobDetails)
    assert info.type == JobType.SUBMISSION and info.submission_id == job_id
    assert info.status == JobStatus.SUCCEEDED and info.status.is_terminal()
    assert info.entrypoint == "python -c \"print('sdk-' + 'ok')\""
    assert info.metadata == {"k": "v"} and info.runtime_env == {}
    assert info.driver_exit_code == 0 and info.error_type is None
    assert info.message == "Job finished successfully."
    assert before - 1000 <= info.start_time <= info.end_time <= after + 1000, info
    # The wire form: every documented key present (null when unknown), times in integer ms.
    raw = cluster.job(job_id)
    assert DETAILS_KEYS <= raw.keys(), raw
    assert raw["type"] == "SUBMISSION" and isinstance(raw["start_time"], int), raw
    logs = sdk.get_job_logs(job_id)
    assert f"Running entrypoint for job {job_id}: " in logs and "sdk-ok\n" in logs, logs


def test_failed_job(sdk, wait_status):
    job_id = sdk.submit_job(entrypoint="echo to-stderr >&2; exit 3")
    assert wait_status(job_id) == JobStatus.FAILED
    info = sdk.get_job_info(job_id)
    assert info.driver_exit_code == 3 and info.end_time is not None, info
    assert "to-stderr" in sdk.get_job_logs(job_id)  # stdout and stderr share the log


def test_tail_job_logs_streams_while_running(cluster, sdk):
    job_id = sdk.submit_job(
        entrypoint="python -c \"import time; print('first'); time.sleep(4); print('second')\"")

    async def tail():
        text, status_at_first = "", None
        async for chunk in sdk.tail_job_logs(job_id):
            assert isinstance(chunk, str)
            text += chunk
            if status_at_first is None and "first" in text:
                status_at_first = sdk.get_job_status(job_id)
        return text, status_at_first

    text, status_at_first = asyncio.run(asyncio.wait_for(tail(), cluster.timeout))
    # Ray's client treats any close code but 1006 as a normal end, so an early close
    # (e.g. 1011) shows up only as missing text.
    assert "first\n" in text and "second\n" in text, f"tail ended early: {text!r}"
    assert status_at_first == JobStatus.RUNNING, "the first line was not streamed while running"
    assert text.index("first\n") < text.index("second\n"), text
    # The socket closes only after the terminal status is stored.
    assert sdk.get_job_status(job_id) == JobStatus.SUCCEEDED


def test_stop_job(sdk, wait_status):
    job_id = sdk.submit_job(entrypoint="sleep 60")
    wait_status(job_id, (JobStatus.RUNNING,))
    assert sdk.stop_job(job_id) is True
    assert wait_status(job_id) == JobStatus.STOPPED
    info = sdk.get_job_info(job_id)
    assert info.driver_exit_code is None and info.end_time is not None, info
    assert sdk.stop_job(job_id) is False  # already terminal


def test_delete_job(sdk, wait_status):
    done = sdk.submit_job(entrypoint="true")
    wait_status(done)
    assert sdk.delete_job(done) is True
    with pytest.raises(RuntimeError, match="status code 404"):
        sdk.get_job_info(done)
    running = sdk.submit_job(entrypoint="sleep 60")
    wait_status(running, (JobStatus.RUNNING,))
    try:
        with pytest.raises(RuntimeError, match="status code 500"):
            sdk.delete_job(running)
        assert sdk.get_job_status(running) == JobStatus.RUNNING
    finally:
        sdk.stop_job(running)
    wait_status(running)


def test_list_jobs(sdk):
    ids = {sdk.submit_job(entrypoint="true") for _ in range(2)}
    jobs = sdk.list_jobs()
    assert all(isinstance(j, JobDetails) and isinstance(j.status, JobStatus) for j in jobs)
    assert ids <= {j.submission_id for j in jobs if j.type == JobType.SUBMISSION}


def test_submission_id_duplicate_and_unknown_ids(sdk):
    job_id = f"compat-sdk-{uuid.uuid4().hex[:8]}"
    assert sdk.submit_job(entrypoint="true", submission_id=job_id) == job_id
    with pytest.raises(RuntimeError, match="already exists"):
        sdk.submit_job(entrypoint="true", submission_id=job_id)
    for call in (sdk.get_job_info, sdk.get_job_logs, sdk.stop_job, sdk.delete_job):
        with pytest.raises(RuntimeError, match="status code 404"):
            call("compat-no-such-job")
    with pytest.raises(aiohttp.WSServerHandshakeError) as e:
        asyncio.run(first_chunk(sdk, "compat-no-such-job"))
    assert e.value.status == 404


def test_working_dir_and_py_modules(sdk, tmp_path, wait_status):
    (tmp_path / "wd").mkdir()
    (tmp_path / "wd" / "main.py").write_text("import mypkg\nprint('value', mypkg.VALUE)\n")
    (tmp_path / "mypkg").mkdir()
    (tmp_path / "mypkg" / "__init__.py").write_text("VALUE = 'from-py-modules'\n")
    job_id = sdk.submit_job(entrypoint="python main.py",
                            runtime_env={"working_dir": str(tmp_path / "wd"),
                                         "py_modules": [str(tmp_path / "mypkg")],
                                         "env_vars": {"K": "V"}})
    assert wait_status(job_id) == JobStatus.SUCCEEDED, sdk.get_job_logs(job_id)
    assert "value from-py-modules" in sdk.get_job_logs(job_id)
    env = sdk.get_job_info(job_id).runtime_env
    assert env["working_dir"].startswith("gcs://_ray_pkg_"), env
    assert [m[:15] for m in env["py_modules"]] == ["gcs://_ray_pkg_"] and env["env_vars"] == {"K": "V"}


def test_entrypoint_resources(sdk, wait_status):
    # entrypoint_memory makes the client check ray_version >= 2.8 first.
    job_id = sdk.submit_job(entrypoint="echo sized", entrypoint_num_cpus=1,
                            entrypoint_memory=1024, entrypoint_resources={"accel": 1})
    assert wait_status(job_id) == JobStatus.SUCCEEDED
    assert "sized" in sdk.get_job_logs(job_id)


AUTH_PROBE = """
import json, sys
from ray.job_submission import JobSubmissionClient
url, token = sys.argv[1:]
cases = {"env": {}, "x-ray-header": {"headers": {"X-Ray-Authorization": "Bearer " + token}},
         "cookie": {"cookies": {"ray-authentication-token": token}}}
out = {}
for name, kwargs in cases.items():
    try:
        JobSubmissionClient(url, **kwargs).list_jobs()
        out[name] = "ok"
    except Exception as e:
        out[name] = type(e).__name__ + ": " + str(e).splitlines()[0]
print(json.dumps(out))
"""


def auth_probe(cluster, env):
    # RAY_AUTH_MODE is fixed per process, hence a fresh interpreter per environment.
    p = subprocess.run([sys.executable, "-c", AUTH_PROBE, cluster.dashboard_url, cluster.token],
                       env=env, capture_output=True, text=True, timeout=cluster.timeout)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout.splitlines()[-1])


def test_auth_without_token_mode(cluster):
    env = {k: v for k, v in cluster.env.items() if k not in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN")}
    out = auth_probe(cluster, env)
    assert out["env"].startswith("AuthenticationError: Authentication required"), out
    # Ray's server also takes the token from X-Ray-Authorization or the cookie (proxies, UI).
    assert out["x-ray-header"] == "ok" and out["cookie"] == "ok", out


def test_auth_wrong_token(cluster):
    out = auth_probe(cluster, dict(cluster.env, RAY_AUTH_TOKEN="f" * 64))
    assert out["env"].startswith("AuthenticationError: Authentication failed"), out
    # In process too, with an explicit header (it overrides the token from the env),
    # including on the WebSocket upgrade of the log tail.
    bad = JobSubmissionClient(cluster.dashboard_url, headers={"Authorization": "Bearer nope"})
    with pytest.raises(AuthenticationError, match="Authentication failed"):
        bad.list_jobs()
    with pytest.raises(aiohttp.WSServerHandshakeError) as e:
        asyncio.run(first_chunk(bad, "any"))
    assert e.value.status == 403
