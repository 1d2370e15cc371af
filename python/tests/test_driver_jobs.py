"""Every driver has a job, as in Ray: a driver that connects by itself is given a job id
("01000000", ...) and listed as a DRIVER job, RUNNING until it disconnects or dies, then
SUCCEEDED; a submission's driver gives the submission its job id. Its tasks and actors, and
the tasks they submit, name that job in the state API."""

import json
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest

from conftest import OXRAY_BIN, api
from test_node_loss import restart_head
from test_state_api import rows_when

DRIVER = """
import sys, oxray
oxray.init()

@oxray.remote
def leaf():
    return oxray.get_runtime_context().get_job_id()

@oxray.remote
def parent():
    return oxray.get(leaf.remote())

@oxray.remote(num_cpus=0.1)
class Keeper:
    def job(self):
        return oxray.get(leaf.remote())

keeper = Keeper.remote()
jobs = {oxray.get_runtime_context().get_job_id(), oxray.get(parent.remote()), oxray.get(keeper.job.remote())}
print(" ".join(sorted(jobs)), flush=True)
sys.stdin.readline()
"""


def jobs(cluster):
    with api(cluster, "/api/jobs/") as response:
        return json.loads(response.read())


def job_when(cluster, job_id, ready):
    deadline = time.time() + 40
    while True:
        [row] = [j for j in jobs(cluster) if j["job_id"] == job_id] or [None]
        if (row and ready(row)) or time.time() > deadline:
            return row
        time.sleep(0.2)


def start_driver(cluster):
    driver = subprocess.Popen([sys.executable, "-c", DRIVER], env=cluster.env, stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    job_ids = driver.stdout.readline().split()
    assert len(job_ids) == 1, f"the driver, its tasks and its actor disagree on the job: {job_ids}"
    return driver, job_ids[0]


def test_a_driver_is_a_job_until_it_disconnects_and_its_work_names_it(cluster):
    driver, job_id = start_driver(cluster)
    try:
        row = job_when(cluster, job_id, lambda r: True)
        assert row["type"] == "DRIVER" and row["status"] == "RUNNING" and row["submission_id"] is None
        assert row["driver_info"]["pid"] == str(driver.pid) and row["end_time"] is None
        tasks = rows_when(cluster, "tasks", lambda rows: sum(r["job_id"] == job_id for r in rows) >= 5)
        mine = {r["name"] for r in tasks if r["job_id"] == job_id}
        # The nested calls, submitted by a worker and an actor, name the driver's job too.
        assert {"leaf", "parent", "Keeper.__init__", "Keeper.job"} <= mine
        actors = rows_when(cluster, "actors", lambda rows: any(r["job_id"] == job_id for r in rows))
        assert any(r["class_name"] == "Keeper" and r["job_id"] == job_id for r in actors)
        with api(cluster, f"/api/jobs/{job_id}") as response:
            assert json.loads(response.read())["type"] == "DRIVER"
        # Found, but nothing to stop: it runs where it was started, not as an entrypoint here.
        stop = urllib.request.Request(f"{cluster.dashboard_url}/api/jobs/{job_id}/stop", method="POST",
                                      headers={"Authorization": f"Bearer {cluster.token}"})
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(stop, timeout=15)
        assert refused.value.code == 400 and "submission type" in refused.value.read().decode()
        listed = subprocess.run([OXRAY_BIN, "job", "list"], env=cluster.env, capture_output=True, text=True,
                                timeout=60)
        assert job_id in listed.stdout and "DRIVER" in listed.stdout, listed.stderr
    finally:
        driver.communicate("\n", timeout=60)
    ended = job_when(cluster, job_id, lambda r: r["status"] == "SUCCEEDED")
    assert ended["status"] == "SUCCEEDED" and ended["end_time"] >= ended["start_time"]


def test_a_killed_driver_ends_its_job_and_ids_count_up(cluster):
    first, first_id = start_driver(cluster)
    second, second_id = start_driver(cluster)
    assert int.from_bytes(bytes.fromhex(second_id), "little") > int.from_bytes(bytes.fromhex(first_id), "little")
    first.send_signal(signal.SIGKILL)
    first.wait(timeout=30)
    assert job_when(cluster, first_id, lambda r: r["status"] == "SUCCEEDED")["status"] == "SUCCEEDED"
    assert job_when(cluster, second_id, lambda r: True)["status"] == "RUNNING"
    second.communicate("\n", timeout=60)


def test_a_driver_that_disconnects_and_lives_on_ends_its_job(cluster):
    script = ("import sys, oxray; oxray.init(); print(oxray.get_runtime_context().get_job_id(), flush=True); "
              "oxray.shutdown(); sys.stdin.readline()")
    driver = subprocess.Popen([sys.executable, "-c", script], env=cluster.env, stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        job_id = driver.stdout.readline().strip()
        assert job_when(cluster, job_id, lambda r: r["status"] == "SUCCEEDED")["status"] == "SUCCEEDED"
        assert driver.poll() is None
    finally:
        driver.communicate("\n", timeout=60)


def test_a_submission_gets_the_job_id_of_its_driver(client_env):
    from oxray.job_submission import JobSubmissionClient
    from test_job_submission import wait_terminal

    cluster = client_env
    client = JobSubmissionClient()
    code = ("import oxray; oxray.init(); "
            "print('JOBID', oxray.get_runtime_context().get_job_id(), oxray.get(oxray.remote(lambda: 1).remote()))")
    submission_id = client.submit_job(entrypoint=f"{sys.executable} -c \"{code}\"")
    assert str(wait_terminal(client, submission_id)) == "SUCCEEDED", client.get_job_logs(submission_id)
    printed = client.get_job_logs(submission_id).split("JOBID ", 1)[1].split()[0]
    details = client.get_job_info(submission_id)
    assert details.job_id == printed and details.type.value == "SUBMISSION"
    # Found by its job id too, and listed once (no DRIVER row of its own).
    with api(cluster, f"/api/jobs/{printed}") as response:
        assert json.loads(response.read())["submission_id"] == submission_id
    assert [j["type"] for j in jobs(cluster) if j["job_id"] == printed] == ["SUBMISSION"]
    tasks = rows_when(cluster, "tasks", lambda rows: any(r["job_id"] == printed for r in rows))
    assert any(r["job_id"] == printed for r in tasks)


def test_a_driver_keeps_its_job_across_a_head_restart(cluster):
    # Last in the module: the restarted head is this test's to stop.
    driver, job_id = start_driver(cluster)
    head, log = restart_head(cluster)
    try:
        assert head.poll() is None, f"the restarted head exited: {log.read_text()}"
        # It registers again within a second or so; the head keeps its record meanwhile.
        time.sleep(3)
        assert job_when(cluster, job_id, lambda r: True)["status"] == "RUNNING"
        driver.communicate("\n", timeout=60)
        assert job_when(cluster, job_id, lambda r: r["status"] == "SUCCEEDED")["status"] == "SUCCEEDED"
    finally:
        if driver.poll() is None:
            driver.kill()
        head.kill()
        head.wait(timeout=30)


@pytest.fixture(scope="module")
def cluster():
    import tempfile
    from pathlib import Path

    from conftest import Cluster

    with tempfile.TemporaryDirectory(prefix="oxray-py-") as tmp:
        c = Cluster(Path(tmp))
        c.start(3)
        try:
            yield c
        finally:
            c.stop()
