"""Ray's own state CLI (`ray list`, `ray get`, `ray summary`, RAY_ADDRESS=http://head:8265,
token auth; `ray logs` with the head's bootstrap address) against an oxray head: the tasks,
actors, placement groups, workers, objects and logs of a job submitted with `ray job submit`
and of a driver, parsed by Ray's strict state models."""

import json
import subprocess
import sys
import textwrap

import pytest
import yaml

JOB = textwrap.dedent('''
    import oxray as ray

    @ray.remote
    def square(x):
        print(f"squaring {x}")
        return x * x

    @ray.remote
    def fails():
        raise ValueError("state compat")

    @ray.remote
    class Keeper:
        def ping(self):
            print("keeper pinged")
            return "pong"

    ray.init()
    assert ray.get([square.remote(i) for i in range(3)]) == [0, 1, 4]
    try:
        ray.get(fails.remote())
    except Exception:
        pass
    keeper = Keeper.options(name="keeper", namespace="compat", lifetime="detached").remote()
    assert ray.get(keeper.ping.remote()) == "pong"
    group = ray.util.placement_group([{"CPU": 0.1}], name="compat-group", lifetime="detached")
    ray.get(group.ready())
    print("workload done")
''')


@pytest.fixture(scope="module")
def job(cluster, tmp_path_factory):
    code = tmp_path_factory.mktemp("state-job")
    (code / "state_job.py").write_text(JOB)
    r = cluster.ray("job", "submit", "--submission-id", "state-compat", "--working-dir", str(code),
                    "--", "python", "state_job.py")
    assert r.returncode == 0 and "workload done" in r.output, r

    def reported():
        status, body = cluster.http("GET", "/api/v0/tasks?limit=100&detail=False")
        return status == 200 and body["data"]["result"]["total"] >= 6
    cluster.wait_for(reported, 30, "the job's tasks in the state API")
    return "state-compat"


def listed(cluster, *args):
    r = cluster.ray("list", *args, "--format", "json")
    assert r.returncode == 0, r
    return json.loads(r.stdout)


def test_ray_list_tasks_and_actors(cluster, job):
    tasks = listed(cluster, "tasks", "--limit", "100")
    names = {t["name"]: t for t in tasks}
    assert {"square", "fails", "Keeper.__init__", "Keeper.ping"} <= set(names)
    assert names["fails"]["state"] == "FAILED" and names["fails"]["error_type"] == "TASK_EXECUTION_EXCEPTION"
    # Tasks name the job id (Ray's JobID) the job's driver was given.
    assert names["square"]["job_id"] == cluster.job(job)["job_id"] and len(names["square"]["job_id"]) == 8
    failed = listed(cluster, "tasks", "--filter", "state=FAILED", "--detail")
    assert [t["name"] for t in failed] == ["fails"] and "state compat" in failed[0]["error_message"]
    actors = listed(cluster, "actors", "--filter", "name=keeper")
    assert len(actors) == 1 and actors[0]["state"] == "ALIVE" and actors[0]["ray_namespace"] == "compat"
    table = cluster.ray("list", "actors")
    assert table.returncode == 0 and "Keeper" in table.stdout, table


def test_ray_get_and_summary(cluster, job):
    [actor] = listed(cluster, "actors", "--filter", "class_name=Keeper")
    got = cluster.ray("get", "actors", actor["actor_id"])
    assert got.returncode == 0, got
    [shown] = yaml.safe_load(got.stdout)  # Ray prints the one actor as a YAML list
    assert shown["class_name"] == "Keeper" and shown["is_detached"] is True
    [task] = listed(cluster, "tasks", "--filter", "name=fails")
    got = cluster.ray("get", "tasks", task["task_id"])
    assert got.returncode == 0 and "TASK_EXECUTION_EXCEPTION" in got.stdout, got
    summary = cluster.ray("summary", "tasks")
    assert summary.returncode == 0 and "square" in summary.stdout and "FINISHED" in summary.stdout, summary
    actors = cluster.ray("summary", "actors")
    assert actors.returncode == 0 and "Keeper" in actors.stdout, actors


def test_ray_list_placement_groups_and_jobs(cluster, job):
    groups = listed(cluster, "placement-groups")
    [group] = [g for g in groups if g["name"] == "compat-group"]
    jobs = listed(cluster, "jobs")
    [row] = [j for j in jobs if j["submission_id"] == job]
    assert row["status"] == "SUCCEEDED" and row["type"] == "SUBMISSION", jobs
    assert group["state"] == "CREATED" and group["creator_job_id"] == row["job_id"], group


def test_a_bad_filter_is_refused_with_rays_message(cluster, job):
    r = cluster.ray("list", "tasks", "--filter", "language!=RUST", "--filter", "worker_pid=x")
    assert r.returncode != 0 and "worker_pid" in r.output, r


def test_ray_list_and_get_workers(cluster, job):
    workers = listed(cluster, "workers", "--detail")
    assert workers and {w["worker_type"] for w in workers} == {"WORKER"}, workers
    alive = [w for w in workers if w["is_alive"]]
    assert alive and all(w["pid"] > 0 and w["node_id"] for w in alive)
    got = cluster.ray("get", "workers", alive[0]["worker_id"])
    assert got.returncode == 0, got
    [shown] = yaml.safe_load(got.stdout)
    assert shown["pid"] == alive[0]["pid"] and shown["ip"] == alive[0]["ip"]


def test_ray_logs_reads_files_actors_tasks_and_jobs(cluster, job):
    listing = cluster.ray_at_gcs("logs", "cluster", "--node-ip", "127.0.0.1")
    assert listing.returncode == 0 and "worker_out" in listing.stdout and "head.log" in listing.stdout, listing
    [actor] = listed(cluster, "actors", "--filter", "class_name=Keeper")
    shown = cluster.ray_at_gcs("logs", "actor", "--id", actor["actor_id"])
    assert shown.returncode == 0 and "keeper pinged" in shown.stdout, shown
    squares = listed(cluster, "tasks", "--filter", "name=square")
    for task in squares:
        shown = cluster.ray_at_gcs("logs", "task", "--id", task["task_id"])
        assert shown.returncode == 0 and shown.stdout.count("squaring") == 1, shown
    driver = cluster.ray_at_gcs("logs", "job", "--id", job)
    assert driver.returncode == 0 and "workload done" in driver.stdout, driver
    missing = cluster.ray_at_gcs("logs", "task", "--id", "f" * 32)
    assert missing.returncode != 0 and "Could not find log file" in missing.output, missing


HOLDER = textwrap.dedent('''
    import sys
    import oxray
    oxray.init(address=sys.argv[1])
    held = oxray.put(b"z" * 2_000_000)
    print(held.hex(), flush=True)
    sys.stdin.read()
''')


def test_ray_list_and_summary_objects(cluster, job):
    env = dict(cluster.env, OXRAY_AUTH_TOKEN=cluster.token)
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, cluster.address], env=env, stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        held = holder.stdout.readline().strip()
        objects = listed(cluster, "objects", "--filter", f"object_id={held}")
        assert [(o["pid"], o["type"], o["task_status"]) for o in objects] == [(holder.pid, "DRIVER", "FINISHED")]
        assert "MiB" in str(objects[0]["object_size"])  # Ray prints sizes humanized
        # A driver that connected by itself is a job of its own.
        drivers = listed(cluster, "jobs", "--filter", "type=DRIVER", "--detail")
        [mine] = [d for d in drivers if d["driver_info"]["pid"] == str(holder.pid)]
        assert mine["status"] == "RUNNING" and mine["submission_id"] is None, mine
        summary = cluster.ray("summary", "objects")
        assert summary.returncode == 0 and "LOCAL_REFERENCE" in summary.stdout, summary
    finally:
        holder.stdin.close()
        holder.wait(timeout=30)
