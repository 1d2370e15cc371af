"""Declarative Serve: `oxray serve deploy` of a config (or an import path) built on the
cluster in the application's runtime_env, beside apps of `serve.run`, kept across a head
restart, and `oxray serve status/config/shutdown`."""

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import yaml

from oxray import serve

from conftest import OXRAY_BIN, Cluster, driver_of
from test_node_loss import restart_head

APP = '''
import os
from oxray import serve


@serve.deployment
class Echo:
    def __init__(self, word: str):
        self.word = word

    def __call__(self, request):
        return f"{self.word} {os.getpid()}"


def build(args):
    return Echo.bind(args.get("word", "built"))


app = Echo.bind("bound")
'''


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def setup():
    with tempfile.TemporaryDirectory(prefix="oxray-py-") as tmp:
        cluster = Cluster(Path(tmp))
        # The builder runs no driver's interpreter: the cluster's default, this one.
        cluster.env["OXRAY_PYTHON"] = sys.executable
        cluster.start(cpus=4)
        code = Path(tmp, "code")
        code.mkdir()
        (code / "echo_app.py").write_text(APP)
        try:
            yield cluster, code, free_port()
        finally:
            cluster.stop()


def cli(cluster, *args, check=True):
    p = subprocess.run([OXRAY_BIN, "serve", *args], env=cluster.env, capture_output=True, text=True, timeout=60,
                       stdin=subprocess.DEVNULL)
    if check:
        assert p.returncode == 0, p.stdout + p.stderr
    return p


def deploy(cluster, tmp_path, body, check=True):
    path = tmp_path / "serve.yaml"
    path.write_text(yaml.safe_dump(body))
    return cli(cluster, "deploy", str(path), check=check)


def fetch(port, path):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=30) as r:
        return r.read().decode()


def wait_for(predicate, what, timeout=120):
    deadline = time.monotonic() + timeout
    while True:
        try:
            if predicate():
                return
        except (OSError, KeyError):
            pass
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def app_status(cluster, name):
    return yaml.safe_load(cli(cluster, "status", "-n", name).stdout)["status"]


def config_of(code, port, **app):
    return {"http_options": {"host": "127.0.0.1", "port": port},
            "applications": [{"name": "echo", "route_prefix": "/echo", "import_path": "echo_app:build",
                              "runtime_env": {"working_dir": str(code)}, **app}]}


def test_a_config_deploys_with_its_working_dir_and_reports_back(setup, tmp_path):
    cluster, code, port = setup
    body = config_of(code, port, args={"word": "hello"})
    out = deploy(cluster, tmp_path, body).stdout
    assert "Sent deploy request successfully." in out
    wait_for(lambda: app_status(cluster, "echo") == "RUNNING", "echo RUNNING")
    assert fetch(port, "/echo").startswith("hello ")
    assert yaml.safe_load(cli(cluster, "config").stdout) == body["applications"][0]
    status = yaml.safe_load(cli(cluster, "status").stdout)
    assert status["applications"]["echo"]["deployments"]["Echo"]["replica_states"] == {"RUNNING": 1}
    assert list(status["proxies"].values()) == ["HEALTHY"]


def test_a_put_leaves_serve_run_apps_alone_and_refuses_their_prefix(setup, tmp_path):
    cluster, code, port = setup
    with driver_of(cluster):
        serve.run(serve.deployment(lambda request: "imperative", name="Mine").bind(), name="mine",
                  route_prefix="/mine")
        taken = deploy(cluster, tmp_path, config_of(code, port, route_prefix="/mine"), check=False)
        assert taken.returncode != 0 and 'Prefix /mine is being used by application "mine"' in taken.stderr
        deploy(cluster, tmp_path, config_of(code, port, args={"word": "again"}))
        wait_for(lambda: fetch(port, "/echo").startswith("again "), "the new args")
        details = json.loads(urllib.request.urlopen(urllib.request.Request(
            f"{cluster.dashboard_url}/api/serve/applications/?api_type=imperative",
            headers={"Authorization": f"Bearer {cluster.token}"}), timeout=30).read())
        assert list(details["applications"]) == ["mine"]
        assert details["applications"]["mine"]["deployed_app_config"] is None
        serve.delete("mine")


def test_an_import_path_with_arguments_deploys_one_app(setup, tmp_path):
    cluster, code, port = setup
    deploy(cluster, tmp_path, config_of(code, port, args={"word": "kept"}))
    wait_for(lambda: fetch(port, "/echo").startswith("kept "), "kept")
    p = cli(cluster, "deploy", "no_such_module:app", "word=x", "--name", "other", check=True)
    assert "Sent deploy request successfully." in p.stdout
    wait_for(lambda: app_status(cluster, "other") == "DEPLOY_FAILED", "other DEPLOY_FAILED")
    message = yaml.safe_load(cli(cluster, "status", "-n", "other").stdout)["message"]
    assert "No module named 'no_such_module'" in message
    # The PUT of one app replaced the declarative set: echo is gone.
    wait_for(lambda: "echo" not in yaml.safe_load(cli(cluster, "status").stdout)["applications"], "echo deleted")


BUILT_APP = '''
from oxray import serve


@serve.deployment(num_replicas=2, ray_actor_options={"num_cpus": 0.5})
class Model:
    def __call__(self, text):
        return text.upper()


@serve.deployment
class Front:
    def __init__(self, model):
        self.model = model

    async def __call__(self, request):
        return await self.model.remote("built")


app = Front.bind(Model.bind())
'''


def test_serve_build_writes_a_config_that_deploys(setup, tmp_path):
    """The config has the options the code sets, in Ray's shape; with the places a user
    fills in (where to listen, where the code is), it deploys as written."""
    cluster, code, port = setup
    (code / "built_app.py").write_text(BUILT_APP)
    out = tmp_path / "built.yaml"
    cli(cluster, "build", "--app-dir", str(code), "built_app:app", "-o", str(out))
    config = yaml.safe_load(out.read_text())
    assert out.read_text().startswith("# This file was generated")
    assert config["proxy_location"] == "EveryNode" and config["http_options"] == {"host": "0.0.0.0", "port": 8000}
    (app,) = config["applications"]
    assert (app["name"], app["route_prefix"], app["import_path"]) == ("app1", "/", "built_app:app")
    assert app["deployments"] == [{"name": "Model", "num_replicas": 2, "ray_actor_options": {"num_cpus": 0.5}},
                                  {"name": "Front"}]
    config["http_options"] = {"host": "127.0.0.1", "port": port}
    app.update(route_prefix="/built", runtime_env={"working_dir": str(code)})
    deploy(cluster, tmp_path, config)
    wait_for(lambda: app_status(cluster, "app1") == "RUNNING", "app1 RUNNING")
    assert fetch(port, "/built") == "BUILT"
    status = yaml.safe_load(cli(cluster, "status", "-n", "app1").stdout)
    assert status["deployments"]["Model"]["replica_states"] == {"RUNNING": 2}
    two = yaml.safe_load(cli(cluster, "build", "--app-dir", str(code), "built_app:app", "echo_app:app").stdout)
    assert [(a["name"], a["route_prefix"]) for a in two["applications"]] == [("app1", "/app1"), ("app2", "/app2")]
    missing = cli(cluster, "build", "no_such_module:app", check=False)
    assert missing.returncode == 1 and "No module named 'no_such_module'" in missing.stderr


def test_serve_start_runs_the_proxy_with_no_application_until_shutdown(setup):
    cluster, code, port = setup
    cli(cluster, "shutdown", "-y")
    out = cli(cluster, "start", "--http-port", str(port))
    assert f"127.0.0.1:{port}" in out.stdout
    wait_for(lambda: fetch(port, "/-/healthz") == "success", "the proxy")
    assert fetch(port, "/-/routes") == "{}"
    status = yaml.safe_load(cli(cluster, "status").stdout)
    assert status["applications"] == {} and list(status["proxies"].values()) == ["HEALTHY"]
    # Serve runs: other options are ignored, as in Ray.
    again = cli(cluster, "start", "--http-port", str(free_port()))
    assert "already running" in again.stderr and f":{port}" in again.stdout
    bad = cli(cluster, "start", "--proxy-location", "Nowhere", check=False)
    assert bad.returncode == 2 and "Nowhere" in bad.stderr
    time.sleep(1.0)  # longer than the controller's round: a proxy with no app stays up
    assert fetch(port, "/-/healthz") == "success"
    cli(cluster, "shutdown", "-y")

    def refused():
        try:
            fetch(port, "/-/healthz")
        except OSError:
            return True
        return False

    wait_for(refused, "the proxy to stop", timeout=10)


def test_a_bad_config_file_is_refused_with_the_reason(setup, tmp_path):
    cluster, code, port = setup
    p = deploy(cluster, tmp_path, {"applications": [{"name": "x"}]}, check=False)
    assert p.returncode != 0 and "import_path is required" in p.stderr
    (tmp_path / "broken.yaml").write_text("applications: [\n")
    p = cli(cluster, "deploy", str(tmp_path / "broken.yaml"), check=False)
    assert p.returncode != 0 and "not a valid YAML or JSON config" in p.stderr


def serve_run(args, env, cwd, while_ready):
    """`oxray serve run ARGS` until it says its applications are ready; then
    `while_ready(printed)`, Ctrl-C, and a clean exit."""
    run = subprocess.Popen([OXRAY_BIN, "serve", "run", *args], env=env, cwd=cwd, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True)
    try:
        lines = []
        while not any("is ready at" in line for line in lines):
            line = run.stdout.readline()
            assert line, "".join(lines)
            lines.append(line)
        while_ready("".join(lines))
        run.send_signal(signal.SIGINT)
        out, _ = run.communicate(timeout=90)
        assert run.returncode == 0, "".join(lines) + out
    finally:
        run.kill()


def test_serve_run_serves_until_interrupted_and_removes_only_its_own_apps(setup, tmp_path):
    cluster, code, port = setup
    deploy(cluster, tmp_path, config_of(code, port, args={"word": "neighbour"}))
    wait_for(lambda: fetch(port, "/echo").startswith("neighbour "), "the neighbour app")

    def while_ready(printed):
        assert f"Application 'runner' is ready at http://127.0.0.1:{port}/run." in printed
        assert fetch(port, "/run").startswith("run ")

    # The import path's module is in the app directory: its code is uploaded from there.
    serve_run(["echo_app:build", "word=run", "--name", "runner", "--route-prefix", "/run", "--app-dir", str(code)],
              cluster.env, tmp_path, while_ready)
    apps = yaml.safe_load(cli(cluster, "status").stdout)["applications"]
    assert "runner" not in apps and apps["echo"]["status"] == "RUNNING", apps
    assert fetch(port, "/echo").startswith("neighbour ")


def test_serve_run_with_no_cluster_starts_one_for_the_run(setup, tmp_path):
    _, code, _ = setup
    port = free_port()
    (code / "local.yaml").write_text(yaml.safe_dump({
        "http_options": {"host": "127.0.0.1", "port": port},
        "applications": [{"name": "local", "route_prefix": "/local", "import_path": "echo_app:build",
                          "args": {"word": "alone"}, "runtime_env": {"working_dir": "."}}]}))
    # A home with no cluster in it, and no address: nothing to join.
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OXRAY_", "RAY_"))}
    env.update(OXRAY_HOME=str(tmp_path / "home"), OXRAY_PYTHON=sys.executable)

    def while_ready(printed):
        assert "starting a local one for this run" in printed
        assert fetch(port, "/local").startswith("alone ")

    serve_run([str(code / "local.yaml")], env, tmp_path, while_ready)
    with pytest.raises(OSError):
        fetch(port, "/local")  # the cluster went with the run


def test_serve_run_of_an_app_that_cannot_deploy_fails_and_leaves_nothing(setup, tmp_path):
    cluster, code, port = setup
    p = subprocess.run([OXRAY_BIN, "serve", "run", "no_such_module:app", "--name", "broken", "--non-blocking"],
                       env=cluster.env, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert p.returncode != 0 and "application 'broken' failed to deploy" in p.stderr, p.stdout + p.stderr
    assert "No module named 'no_such_module'" in p.stderr
    assert "broken" not in yaml.safe_load(cli(cluster, "status").stdout)["applications"]
    p = subprocess.run([OXRAY_BIN, "serve", "run", str(tmp_path / "x.yaml"), "--name", "n"], env=cluster.env,
                       capture_output=True, text=True, timeout=60)
    assert p.returncode != 0 and "go with an import path" in p.stderr


def test_declarative_apps_survive_a_head_restart(setup, tmp_path):
    # Last in the module: the restarted head is this test's to stop.
    cluster, code, port = setup
    deploy(cluster, tmp_path, config_of(code, port, args={"word": "durable"}))
    wait_for(lambda: app_status(cluster, "echo") == "RUNNING", "echo RUNNING")
    pid = fetch(port, "/echo").split()[1]
    head, log = restart_head(cluster)
    try:
        assert head.poll() is None, log.read_text()
        wait_for(lambda: fetch(port, "/echo") == f"durable {pid}", "the same replica behind the new head")
        assert yaml.safe_load(cli(cluster, "config").stdout)["args"] == {"word": "durable"}
        cli(cluster, "shutdown", "-y")
        assert yaml.safe_load(cli(cluster, "status").stdout)["applications"] == {}

        def refused():
            try:
                fetch(port, "/echo")
            except urllib.error.URLError:
                return True
            return False
        wait_for(refused, "the proxy to stop")
        assert "No config has been deployed." in cli(cluster, "config").stdout
    finally:
        head.terminate()
        head.wait(timeout=30)
