import asyncio
import sys
import time

import pytest

from oxray.job_submission import JobDetails, JobStatus, JobSubmissionClient, JobType

PY = sys.executable


def wait_terminal(client, job_id, timeout=60):
    deadline = time.time() + timeout
    while time.time() < deadline:
        status = client.get_job_status(job_id)
        if status.is_terminal():
            return status
        time.sleep(0.1)
    raise AssertionError(f"job {job_id} still {status} after {timeout} s")


def test_submit_status_logs_and_delete(client_env):
    client = JobSubmissionClient()
    job_id = client.submit_job(
        entrypoint=f"{PY} -c \"import os; print('hi', os.environ['GREETING'])\"",
        runtime_env={"env_vars": {"GREETING": "there"}},
        metadata={"owner": "py"},
    )
    assert wait_terminal(client, job_id) == JobStatus.SUCCEEDED
    info = client.get_job_info(job_id)
    assert isinstance(info, JobDetails)
    assert info.type == JobType.SUBMISSION and info.submission_id == job_id
    assert info.metadata == {"owner": "py"} and info.driver_exit_code == 0
    assert info.end_time >= info.start_time
    assert "hi there" in client.get_job_logs(job_id)
    assert job_id in [j.submission_id for j in client.list_jobs()]
    assert client.delete_job(job_id) is True
    with pytest.raises(RuntimeError, match="404"):
        client.get_job_info(job_id)


def test_working_dir_upload_and_tail(client_env, tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "data.txt").write_text("payload")
    (tmp_path / "main.py").write_text(
        "import time\nfor i in range(3):\n    print('line', i, open('sub/data.txt').read(), flush=True)\n    time.sleep(0.2)\n"
    )
    client = JobSubmissionClient(client_env.dashboard_url)
    job_id = client.submit_job(entrypoint=f"{PY} main.py", runtime_env={"working_dir": str(tmp_path)})

    async def collect():
        return "".join([chunk async for chunk in client.tail_job_logs(job_id)])

    text = asyncio.run(collect())
    assert "line 2 payload" in text
    assert client.get_job_status(job_id) == JobStatus.SUCCEEDED


def test_stop_and_refusals(client_env):
    client = JobSubmissionClient()
    job_id = client.submit_job(entrypoint="sleep 60", submission_id="py-long")
    with pytest.raises(RuntimeError, match="already exists"):
        client.submit_job(entrypoint="true", submission_id="py-long")
    with pytest.raises(RuntimeError, match="non-terminal"):
        client.delete_job(job_id)
    assert client.stop_job(job_id) is True
    assert wait_terminal(client, job_id) == JobStatus.STOPPED
    assert client.stop_job(job_id) is False
    failing = client.submit_job(entrypoint="exit 7")
    assert wait_terminal(client, failing) == JobStatus.FAILED
    assert client.get_job_info(failing).driver_exit_code == 7


def test_wrong_token_is_refused(client_env):
    with pytest.raises(RuntimeError, match="403"):
        JobSubmissionClient(client_env.dashboard_url, headers={"Authorization": "Bearer wrong"}).list_jobs()
