"""Ray's own `serve deploy/status/config/shutdown` CLI (pure REST clients of the dashboard
port) and Ray's `ServeInstanceDetails` model against an oxray head: a declarative config
built on the cluster, updated in place, failed with its reason, and shut down."""

import json
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import yaml

SERVE_CLI = str(Path(sys.executable).parent / "serve")

APP = '''
import os
from oxray import serve


@serve.deployment
class Greeter:
    def __init__(self, greeting: str):
        self.greeting = greeting
        self.punctuation = "."

    def reconfigure(self, config):
        self.punctuation = config.get("punctuation", ".")

    def __call__(self, request):
        return f"{self.greeting}, {request.query_params.get('name', 'world')}{self.punctuation} {os.getpid()}"


def build(args):
    return Greeter.bind(args.get("greeting", "Hello"))


app = Greeter.bind("Hi")
'''


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def serve_env(cluster, tmp_path_factory):
    code = tmp_path_factory.mktemp("serve-app")
    (code / "greet_app.py").write_text(APP)
    port = free_port()
    yield code, port
    cluster.serve("shutdown", "-y")


def config(code, port, **app):
    body = {"http_options": {"host": "127.0.0.1", "port": port},
            "applications": [{"name": "greet", "route_prefix": "/greet", "import_path": "greet_app:build",
                              "runtime_env": {"env_vars": {"PYTHONPATH": str(code)}}, **app}]}
    return body


def deploy(cluster, tmp_path, body):
    path = tmp_path / "serve.yaml"
    path.write_text(yaml.safe_dump(body))
    return cluster.serve("deploy", str(path))


def status(cluster):
    r = cluster.serve("status")
    assert r.returncode == 0, r
    return yaml.safe_load(r.stdout)


def fetch(port, path):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=30) as response:
        return response.read().decode()


def wait_status(cluster, app, wanted):
    seen = {}

    def reached():
        seen.update(status(cluster)["applications"].get(app) or {"status": "absent"})
        return seen["status"] == wanted
    cluster.wait_for(reached, cluster.timeout, lambda: f"app {app} {wanted}; last seen {seen}")
    return seen


def test_deploy_builds_the_app_and_status_config_report_it(cluster, serve_env, tmp_path):
    code, port = serve_env
    body = config(code, port, args={"greeting": "Hello"}, deployments=[{"name": "Greeter", "num_replicas": 2}])
    r = deploy(cluster, tmp_path, body)
    assert r.returncode == 0 and "Sent deploy request successfully" in r.output, r
    app = wait_status(cluster, "greet", "RUNNING")
    assert app["deployments"]["Greeter"]["status"] == "HEALTHY"
    assert app["deployments"]["Greeter"]["replica_states"] == {"RUNNING": 2}
    assert fetch(port, "/greet?name=oxray").startswith("Hello, oxray.")
    # `serve config` prints the config exactly as submitted.
    r = cluster.serve("config")
    assert r.returncode == 0, r
    assert yaml.safe_load(r.stdout) == body["applications"][0]
    # Ray's strict model of the full answer accepts it.
    from ray.serve.schema import ServeInstanceDetails
    status_code, details = cluster.http("GET", "/api/serve/applications/?api_type=declarative")
    assert status_code == 200
    parsed = ServeInstanceDetails(**details)
    assert parsed.applications["greet"].source == "declarative"
    assert len(parsed.applications["greet"].deployments["Greeter"].replicas) == 2


def test_a_user_config_change_applies_in_place(cluster, serve_env, tmp_path):
    code, port = serve_env
    before = fetch(port, "/greet")
    pids = {fetch(port, "/greet").rsplit(" ", 1)[1] for _ in range(8)} | {before.rsplit(" ", 1)[1]}
    body = config(code, port, args={"greeting": "Hello"},
                  deployments=[{"name": "Greeter", "num_replicas": 2, "user_config": {"punctuation": "!"}}])
    assert deploy(cluster, tmp_path, body).returncode == 0
    cluster.wait_for(lambda: fetch(port, "/greet").split(" ")[1].endswith("!"), cluster.timeout, "the new user_config")
    wait_status(cluster, "greet", "RUNNING")
    after = {fetch(port, "/greet").rsplit(" ", 1)[1] for _ in range(8)}
    assert after <= pids, "reconfigure restarted a replica"


def test_a_failing_import_is_deploy_failed_with_the_reason(cluster, serve_env, tmp_path):
    code, port = serve_env
    body = config(code, port, name="broken", route_prefix="/broken", import_path="no_such_module:app")
    body["applications"].insert(0, config(code, port, args={"greeting": "Hello"})["applications"][0])
    assert deploy(cluster, tmp_path, body).returncode == 0
    app = wait_status(cluster, "broken", "DEPLOY_FAILED")
    assert "No module named 'no_such_module'" in app["message"]
    assert fetch(port, "/greet").startswith("Hello, world")


def test_bad_configs_are_refused_with_the_reason(cluster, serve_env):
    code, port = serve_env
    body = config(code, port)
    body["applications"].append(dict(body["applications"][0]))
    req = urllib.request.Request(cluster.dashboard_url + "/api/serve/applications/", method="PUT",
                                 data=json.dumps(body).encode(),
                                 headers={"Authorization": f"Bearer {cluster.token}",
                                          "Content-Type": "application/json"})
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(req, timeout=30)
    assert e.value.code == 400
    assert "multiple configs for application" in e.value.read().decode()
    status_code, text = cluster.http("GET", "/api/serve/applications/?api_type=bogus")
    assert status_code == 400 and "Invalid 'api_type' value" in text


def post_scale(cluster, app, deployment, n):
    req = urllib.request.Request(f"{cluster.dashboard_url}/api/v1/applications/{app}/deployments/{deployment}/scale",
                                 method="POST", data=json.dumps({"target_num_replicas": n}).encode(),
                                 headers={"Authorization": f"Bearer {cluster.token}",
                                          "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, json.load(r)
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def test_an_external_scaler_sets_the_replica_count_where_the_app_allows_it(cluster, serve_env, tmp_path):
    code, port = serve_env
    status_code, body = post_scale(cluster, "greet", "Greeter", 2)
    assert status_code == 412 and "external_scaler_enabled" in body["error"], body
    deploy(cluster, tmp_path, config(code, port, args={"greeting": "Hello"}, external_scaler_enabled=True))
    wait_status(cluster, "greet", "RUNNING")
    status_code, body = post_scale(cluster, "greet", "Greeter", 3)
    assert status_code == 200 and "Scaling request received" in body["message"], body
    seen = {}

    def three():
        seen.update(status(cluster)["applications"]["greet"])
        return seen["deployments"]["Greeter"]["replica_states"] == {"RUNNING": 3}
    cluster.wait_for(three, cluster.timeout, lambda: f"three replicas; last seen {seen}")
    assert post_scale(cluster, "greet", "Nope", 1)[0] == 404


def test_apps_left_out_of_a_config_are_deleted_and_shutdown_ends_all(cluster, serve_env, tmp_path):
    code, port = serve_env
    body = config(code, port, import_path="greet_app:app")
    assert deploy(cluster, tmp_path, body).returncode == 0
    cluster.wait_for(lambda: fetch(port, "/greet").startswith("Hi, world"), cluster.timeout, "the rebuilt app")
    cluster.wait_for(lambda: "broken" not in status(cluster)["applications"], cluster.timeout, "broken deleted")
    r = cluster.serve("shutdown", "-y")
    assert r.returncode == 0, r
    assert status(cluster)["applications"] == {}
    with pytest.raises(OSError):
        fetch(port, "/greet")


def test_the_cli_refuses_without_the_token(cluster, serve_env):
    env = dict(cluster.env)
    env.pop("RAY_AUTH_TOKEN")
    env["RAY_AUTH_MODE"] = "disabled"
    p = subprocess.run([SERVE_CLI, "status", "-a", cluster.dashboard_url], env=env, capture_output=True,
                       text=True, timeout=cluster.timeout, stdin=subprocess.DEVNULL)
    assert p.returncode != 0
    assert "401" in p.stdout + p.stderr or "Unauthorized" in p.stdout + p.stderr, p
