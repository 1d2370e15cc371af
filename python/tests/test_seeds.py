"""The users' own commands, verbatim (their addresses made this test's), on hosts in network
namespaces: seed 002's bare-metal cluster (`ray stop`, `ray start --head ... --include-dashboard=true
... --num-gpus=2`, two `ray start --address=...` nodes with Ray 2.60's RAY_AUTH_TOKEN, `ray list
nodes`, `ray status`) and seeds 000 and 004's jobs (`ray job submit` with and without
`--working-dir` and `--no-wait`, `ray job status/logs/stop`), whose drivers `import ray` in a
Python where oxray is installed and Ray is not."""

import json
import os
import re
import shlex

import pytest

import bare_env
from conftest import OXRAY_BIN
from netns import Host, Network, wait_for

NET = Network("oxsd", "10.206.0", ["h", "a", "b"])
H, A, B = (NET.address[n] for n in ("h", "a", "b"))
SEED_002 = [
    ("h", "ray stop"),
    ("h", "ray stop --force"),
    ("h", f"ray start --head --node-ip-address={H} --port=6379 --dashboard-host=0.0.0.0 --include-dashboard=true "
          "--dashboard-port=8265 --num-cpus=4 --num-gpus=2"),
    ("a", f"ray start --address='{H}:6379' --node-ip-address={A} --num-cpus=4 --num-gpus=2"),
    ("b", f"ray start --address='{H}:6379' --node-ip-address={B} --num-cpus=4 --num-gpus=2"),
]
SCRIPT = """
import ray
ray.init()
print(ray.cluster_resources())
"""
SLOW = """
import time
print("started", flush=True)
time.sleep(600)
"""


@pytest.fixture(scope="module")
def seeded(tmp_path_factory):
    root = tmp_path_factory.mktemp("seeds")
    python = bare_env.make_env(root / "venv", with_ray=False)
    bin_dir = root / "bin"
    bin_dir.mkdir()
    (bin_dir / "ray").symlink_to(OXRAY_BIN)
    # `ray` is oxray's, `python` one with oxray and no Ray, as on a machine oxray was installed on.
    path = f"{bin_dir}:{python.parent}:{os.environ['PATH']}"
    NET.make()
    hosts = {}
    try:
        for name, line in SEED_002:
            if name not in hosts:
                hosts[name] = Host(NET, name, root)
                hosts[name].env["PATH"] = path
                if name != "h":
                    # Ray 2.60's token setting, the token read on the head.
                    hosts[name].env["RAY_AUTH_TOKEN"] = hosts["h"].run("ray", "get-auth-token").stdout.strip()
            host, words = hosts[name], shlex.split(line)
            if words[1] == "start":
                host.start(*words[2:], node_ip=False, program=words[0])
            else:
                host.run(*words)
        yield hosts
    finally:
        for host in reversed(list(hosts.values())):
            host.stop()
        NET.remove()


def test_seed_002_brings_up_three_nodes_with_their_cpus_and_gpus(seeded):
    h = seeded["h"]
    nodes = json.loads(h.run("ray", "list", "nodes", "--format", "json").stdout)
    assert sorted(n["node_ip"] for n in nodes if n["state"] == "ALIVE") == [H, A, B]
    status = h.run("ray", "status").stdout
    assert re.search(r"\b12\.0 CPU\b", status) and re.search(r"\b6\.0 GPU\b", status), status
    # The head's dashboard answers on every interface, as --dashboard-host=0.0.0.0 asks.
    assert seeded["a"].get(f"http://{H}:8265/api/version")[0] == 200


def test_seed_jobs_run_import_ray_scripts_on_the_cluster(seeded, tmp_path):
    h = seeded["h"]
    out = h.run("ray", "job", "submit", "--address", f"http://{H}:8265", "--", "python", "-c", SCRIPT).stdout
    assert "'CPU': 12.0" in out and "'GPU': 6.0" in out, out
    assert "succeeded" in out.lower(), out

    workdir = tmp_path / "your_working_directory"
    workdir.mkdir()
    (workdir / "script.py").write_text(SCRIPT)
    (workdir / "slow.py").write_text(SLOW)
    h.env["RAY_ADDRESS"] = f"http://{H}:8265"
    out = h.run("ray", "job", "submit", "--working-dir", str(workdir), "--", "python", "script.py").stdout
    assert "'GPU': 6.0" in out, out

    submitted = h.run("ray", "job", "submit", "--no-wait", "--working-dir", str(workdir), "--", "python",
                      "slow.py").stdout
    job_id = re.search(r"raysubmit_\w+", submitted).group(0)
    wait_for("the job to start", lambda: "started" in h.run("ray", "job", "logs", job_id).stdout, timeout=60)
    assert "RUNNING" in h.run("ray", "job", "status", job_id).stdout
    h.run("ray", "job", "stop", job_id)
    wait_for("the job to stop", lambda: "was stopped" in h.run("ray", "job", "status", job_id).stdout, timeout=60)
