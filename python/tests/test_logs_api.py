"""Workers and logs in the state API: `/api/v0/workers`, `/api/v0/logs`, `/api/v0/logs/{file,stream}`
and `oxray logs` / `oxray list workers`, on a real two-node cluster whose second node dies last."""

import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request

import pytest

import oxray
from conftest import OXRAY_BIN, Cluster, agent_pid, api, driver_of, state






def log(cluster, **params):
    with api(cluster, "/api/v0/logs/file", **params) as response:
        return response.read().decode()


def refused(cluster, path="/api/v0/logs/file", **params):
    with pytest.raises(urllib.error.HTTPError) as error:
        api(cluster, path, **params)
    return error.value.code, error.value.read().decode()


def eventually(read, ready, timeout=15):
    deadline = time.time() + timeout
    while True:
        value = read()
        if ready(value) or time.time() > deadline:
            return value
        time.sleep(0.2)


def tasks_named(cluster, name):
    return state(cluster, "tasks", detail="true", limit=10000, filter_keys=["name"], filter_predicates=["="],
                 filter_values=[name])["result"]


def cli(cluster, *args, check=True):
    result = subprocess.run([OXRAY_BIN, *args], env=cluster.env, capture_output=True, text=True, timeout=60)
    if check:
        assert result.returncode == 0, result.stderr
    return result


@oxray.remote(resources={"side": 1})
def speak(word):
    print(f"out:{word}")
    print(f"err:{word}", file=sys.stderr)
    return os.getpid()


@oxray.remote(resources={"side": 1})
def dies_loudly():
    print("last words", flush=True)
    os._exit(3)


@oxray.remote(num_cpus=0.5)
class Talker:
    def say(self, text):
        print(text, flush=True)
        return os.getpid()


@pytest.fixture(scope="module")
def two_nodes(tmp_path_factory):
    """A head node, and a node `side` that runs the `side` tasks (one at a time)."""
    cluster = Cluster(tmp_path_factory.mktemp("logs"))
    try:
        cluster.start_head_and_agents(("side",), "--resources", '{"side": 1}')
        cluster.token = cluster.oxray("get-auth-token").stdout.strip()
        info = json.loads(open(os.path.join(cluster.env["OXRAY_HOME"], "current_cluster.json")).read())
        cluster.dashboard_url = info["dashboard_url"]
        with driver_of(cluster):
            nodes = {n["NodeName"]: n["NodeID"] for n in oxray.nodes()}
            pids = oxray.get([speak.remote(w) for w in ("alpha", "beta", "gamma")])
            with pytest.raises(Exception):
                oxray.get(dies_loudly.options(max_retries=0).remote())
            talker = Talker.remote()
            actor_pid = oxray.get(talker.say.remote("actor hello"))
            yield cluster, {"side": nodes["side"], "pids": pids, "talker": talker, "actor": talker._actor_id,
                            "actor_pid": actor_pid}
    finally:
        cluster.stop()


def test_workers_of_every_node_are_listed_alive_and_ended(two_nodes):
    cluster, facts = two_nodes
    rows = eventually(lambda: state(cluster, "workers", detail="true", limit=1000)["result"],
                      lambda rows: any(r["exit_type"] == "SYSTEM_ERROR" for r in rows))
    assert {r["worker_type"] for r in rows} == {"WORKER"}
    by_pid = {r["pid"]: r for r in rows}
    assert by_pid[facts["actor_pid"]]["is_alive"] is True
    assert by_pid[facts["pids"][0]]["node_id"] == facts["side"]
    [crashed] = [r for r in rows if r["exit_type"] == "SYSTEM_ERROR"]
    assert crashed["is_alive"] is False and "code 3" in crashed["exit_detail"]
    assert crashed["start_time_ms"] <= crashed["end_time_ms"]
    alive = state(cluster, "workers", filter_keys=["is_alive"], filter_predicates=["="], filter_values=["true"])
    assert all(r["is_alive"] for r in alive["result"]) and "exit_detail" not in alive["result"][0]
    listed = cli(cluster, "list", "workers", "--format", "json")
    assert {w["worker_id"] for w in json.loads(listed.stdout)} == {r["worker_id"] for r in rows}


def test_a_nodes_log_files_are_listed_by_group(two_nodes):
    cluster, facts = two_nodes
    groups = state(cluster, "logs", node_id=facts["side"])
    assert groups["worker_out"] and groups["worker_err"] and "agent" in groups
    only_err = state(cluster, "logs", node_id=facts["side"], glob="worker-*.err")
    assert list(only_err) == ["worker_err"]
    assert refused(cluster, "/api/v0/logs")[0] == 400
    assert refused(cluster, "/api/v0/logs", node_ip="10.255.0.1")[0] == 404
    listing = cli(cluster, "logs", "cluster", "--node-id", facts["side"])
    assert "worker_out:" in listing.stdout


def test_a_task_reads_only_what_it_printed(two_nodes):
    cluster, _ = two_nodes
    rows = eventually(lambda: tasks_named(cluster, "speak"),
                      lambda rows: len(rows) == 3 and all(r["task_log_info"] for r in rows))
    # The three ran one after the other on the side node's single slot, in the same worker.
    assert len({r["worker_id"] for r in rows}) == 1
    for row in rows:
        out = log(cluster, task_id=row["task_id"])
        err = log(cluster, task_id=row["task_id"], suffix="err")
        words = [w for w in ("alpha", "beta", "gamma") if f"out:{w}" in out]
        assert len(words) == 1 and err == f"err:{words[0]}\n", (out, err)
    assert refused(cluster, task_id=rows[0]["task_id"], attempt_number=5)[0] == 404
    shown = cli(cluster, "logs", "task", "--id", rows[0]["task_id"], "--err")
    assert shown.stdout.startswith("err:")
    missing = cli(cluster, "logs", "task", "--id", "f" * 32, check=False)
    assert missing.returncode == 1 and "Could not find" in missing.stderr


def test_an_actor_and_a_dead_worker_are_read_by_id_and_pid(two_nodes):
    cluster, facts = two_nodes
    assert "actor hello" in log(cluster, actor_id=facts["actor"])
    calls = eventually(lambda: tasks_named(cluster, "Talker.say"), lambda rows: len(rows) == 1)
    code, text = refused(cluster, task_id=calls[0]["task_id"])
    assert code == 404 and f"ray logs actor --id {facts['actor']}" in text
    shown = cli(cluster, "logs", "actor", "--id", facts["actor"])
    assert "actor hello" in shown.stdout
    # The worker that died (the one that ran the side tasks before) keeps its log on its node.
    workers = state(cluster, "workers", detail="true", limit=1000)["result"]
    [crashed] = [w for w in workers if w["exit_type"] == "SYSTEM_ERROR"]
    assert log(cluster, node_id=facts["side"], pid=crashed["pid"]).endswith("\nlast words\n")
    by_cli = cli(cluster, "logs", "worker", "--pid", str(crashed["pid"]), "--node-id", facts["side"], "--tail", "1")
    assert by_cli.stdout == "last words\n"


def test_files_are_read_whole_or_by_last_lines_and_names_stay_inside(two_nodes):
    cluster, facts = two_nodes
    files = state(cluster, "logs", node_id=facts["side"])["agent"]
    whole = log(cluster, node_id=facts["side"], filename=files[0], lines=-1)
    assert whole.count("\n") >= 2
    assert log(cluster, node_id=facts["side"], filename=files[0], lines=2) == "".join(
        whole.splitlines(keepends=True)[-2:])
    for bad in ("../auth_token", "/etc/passwd", ".."):
        code, text = refused(cluster, node_id=facts["side"], filename=bad)
        assert code == 400 and "not the name of a file" in text
    assert refused(cluster, node_id=facts["side"], filename="nope.log")[0] == 404
    assert refused(cluster, node_id=facts["side"], filename="x", lines="many")[0] == 400


def test_a_followed_log_shows_what_is_printed_after(two_nodes):
    cluster, facts = two_nodes
    response = api(cluster, "/api/v0/logs/stream", actor_id=facts["actor"], lines=1)
    try:
        first = response.read1().decode()
        assert "actor hello" in first
        oxray.get(facts["talker"].say.remote("said later"))
        seen = ""
        deadline = time.time() + 15
        while "said later" not in seen and time.time() < deadline:
            seen += response.read1().decode()
        assert "said later" in seen
    finally:
        response.close()


def submit_job(cluster, entrypoint, **extra):
    body = json.dumps({"entrypoint": entrypoint, **extra}).encode()
    request = urllib.request.Request(f"{cluster.dashboard_url}/api/jobs/", data=body, method="POST",
                                     headers={"Authorization": f"Bearer {cluster.token}"})
    with urllib.request.urlopen(request, timeout=15) as response:
        return json.loads(response.read())["submission_id"]


def job_logs(cluster, job_id):
    with api(cluster, f"/api/jobs/{job_id}/logs") as response:
        return json.loads(response.read())["logs"]


def follow_job_log(cluster, job):
    """Follows a job's log over the WebSocket (Ray's `tail_job_logs`) in a thread."""
    from oxray.job_submission import JobSubmissionClient

    client = JobSubmissionClient(cluster.dashboard_url, headers={"Authorization": f"Bearer {cluster.token}"})
    tail = {"chunks": []}

    async def collect():
        async for chunk in client.tail_job_logs(job):
            tail["chunks"].append(chunk)

    tail["thread"] = threading.Thread(target=lambda: asyncio.run(collect()), daemon=True)
    tail["thread"].start()
    eventually(lambda: "".join(tail["chunks"]), lambda text: "job line 2" in text)
    return tail


def test_the_logs_of_a_dead_node_say_it_is_gone(two_nodes):
    cluster, facts = two_nodes
    task = tasks_named(cluster, "speak")[0]
    # A job on the node that dies: what it printed is still there, from the head's copy.
    script = "import time\nfor i in range(3):\n    print('job line', i, flush=True)\ntime.sleep(600)\n"
    job = submit_job(cluster, f"{sys.executable} -c \"{script}\"", entrypoint_resources={"side": 0.5})
    eventually(lambda: job_logs(cluster, job), lambda text: "job line 2" in text)
    with api(cluster, f"/api/jobs/{job}") as response:
        driver_pid = int(json.loads(response.read())["driver_info"]["pid"])
    time.sleep(2)  # the agent sends the log's news every second
    tail = follow_job_log(cluster, job)
    os.kill(agent_pid(cluster, "side"), signal.SIGKILL)
    os.killpg(driver_pid, signal.SIGKILL)  # its entrypoint dies with the machine
    # A follower is told, and given what the copy holds past what it read.
    tail["thread"].join(90)
    followed = "".join(tail["chunks"])
    assert not tail["thread"].is_alive() and "job line 2\n" in followed, followed
    assert f"node {facts['side']} (" in followed and "stopped answering" in followed, followed
    eventually(lambda: state(cluster, "nodes", filter_keys=["state"], filter_predicates=["="],
                             filter_values=["DEAD"])["result"], lambda rows: len(rows) == 1)
    code, text = refused(cluster, task_id=task["task_id"])
    assert code == 404 and "is gone" in text and facts["side"] in text
    copied = job_logs(cluster, job)
    assert "job line 0\njob line 1\njob line 2\n" in copied, copied
    assert f"node {facts['side']} is gone" in copied and "copy of this job's log that the head kept" in copied
    workers = state(cluster, "workers", limit=1000)["result"]
    assert all(w["node_id"] != facts["side"] for w in workers)
