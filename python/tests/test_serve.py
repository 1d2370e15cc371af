"""oxray.serve end to end: the head's controller and HTTP proxy (port 8000), replicas as
actors, handles routing from the driver and from replicas."""

import asyncio
import concurrent.futures
import os
import tempfile
import time
from pathlib import Path
from typing import List

import pytest
import requests

import oxray
from oxray import serve
from oxray.serve.exceptions import RayServeException
from oxray.serve.schema import ApplicationStatus, DeploymentStatus, ServeStatus

from conftest import Cluster, driver_of

URL = "http://127.0.0.1:8000"


@pytest.fixture(scope="module")
def serve_cluster():
    # Replicas take a CPU each, as in Ray: room for the biggest application here.
    with tempfile.TemporaryDirectory(prefix="oxray-py-") as tmp:
        c = Cluster(Path(tmp))
        c.start(cpus=8)
        try:
            yield c
        finally:
            c.stop()


@pytest.fixture(scope="module")
def driver(serve_cluster):
    cluster = serve_cluster
    # The replicas import this module's classes by name, as a job's workers would.
    with driver_of(cluster, runtime_env={"env_vars": {"PYTHONPATH": str(Path(__file__).parent)}}):
        try:
            yield cluster
        finally:
            serve.shutdown()


@pytest.fixture
def clean(driver):
    yield driver
    serve.shutdown()


def get(path, **kwargs):
    return requests.get(URL + path, timeout=30, **kwargs)


@serve.deployment
class Hello:
    def __call__(self, request):
        return f"Hello {request.query_params.get('name', 'world')}!"

    def pid(self):
        return os.getpid()

    async def shout(self, word: str, times: int = 1):
        return (word.upper() + " ") * times


@serve.deployment
def hello_function(request):
    return {"path": request.url.path}


def test_hello_world_over_http_and_handle(clean):
    handle = serve.run(Hello.bind(), name="hello", route_prefix="/")
    response = get("/?name=serve")
    assert response.status_code == 200 and response.text == "Hello serve!"
    assert response.headers["content-type"] == "text/plain; charset=utf-8"
    assert response.headers.get("x-request-id")
    assert handle.shout.remote("hi", times=2).result(timeout_s=30) == "HI HI "
    assert handle.options(method_name="pid").remote().result() != os.getpid()


def test_function_deployment_under_a_route_prefix(clean):
    serve.run(hello_function.bind(), name="fn", route_prefix="/fn")
    response = get("/fn/sub")
    assert response.status_code == 200 and response.json() == {"path": "/fn/sub"}
    assert get("/elsewhere").status_code == 404


@serve.deployment
class Adder:
    def __init__(self, increment: int):
        self.increment = increment

    def __call__(self, x: int) -> int:
        return x + self.increment


@serve.deployment
class Multiplier:
    def __init__(self, factor: int):
        self.factor = factor

    async def __call__(self, x: int) -> int:
        return x * self.factor


@serve.deployment
class Pipeline:
    def __init__(self, adders: List, multiplier):
        self.adder = adders[0]
        self.multiplier = multiplier

    async def __call__(self, request) -> dict:
        x = int(request.query_params["x"])
        return {"result": await self.compute(x)}

    async def compute(self, x: int) -> int:
        # The adder's response goes on to the multiplier without being awaited here.
        return await self.multiplier.remote(self.adder.remote(x))


def test_composition_passes_a_response_on(clean):
    handle = serve.run(Pipeline.bind([Adder.bind(1)], Multiplier.bind(3)), name="pipe", route_prefix="/pipe")
    assert get("/pipe?x=4").json() == {"result": 15}
    assert handle.compute.remote(1).result() == 6
    # From the driver too, a response passed as an argument is read first.
    adder = serve.get_deployment_handle("Adder", app_name="pipe")
    multiplier = serve.get_deployment_handle("Multiplier", app_name="pipe")
    assert multiplier.remote(adder.remote(9)).result(timeout_s=30) == 30
    status = serve.status().applications["pipe"]
    assert set(status.deployments) == {"Adder", "Multiplier", "Pipeline"}


@serve.deployment(user_config={"threshold": 1})
class Configurable:
    def __init__(self):
        self.threshold = None

    def reconfigure(self, config):
        self.threshold = config["threshold"]

    def state(self):
        return {"threshold": self.threshold, "pid": os.getpid()}


def test_user_config_update_keeps_the_replica(clean):
    handle = serve.run(Configurable.bind(), name="cfg", route_prefix=None)
    first = handle.state.remote().result()
    assert first["threshold"] == 1
    handle = serve.run(Configurable.options(user_config={"threshold": 2}).bind(), name="cfg", route_prefix=None)
    deadline = time.monotonic() + 10
    state = handle.state.remote().result()
    while state["threshold"] != 2 and time.monotonic() < deadline:
        time.sleep(0.05)
        state = handle.state.remote().result()
    assert state == {"threshold": 2, "pid": first["pid"]}


@serve.deployment
class Broken:
    def __init__(self):
        raise RuntimeError("this constructor always fails")


def test_a_constructor_that_always_fails(clean):
    with pytest.raises(RayServeException, match="this constructor always fails"):
        serve.run(Broken.bind(), name="broken", route_prefix="/broken")
    app = serve.status().applications["broken"]
    assert app.status == ApplicationStatus.DEPLOY_FAILED
    assert app.deployments["Broken"].status == DeploymentStatus.DEPLOY_FAILED
    assert get("/broken").status_code == 503


def test_delete_and_shutdown(clean):
    serve.run(Hello.bind(), name="one", route_prefix="/one")
    serve.run(Hello.bind(), name="two", route_prefix="/two")
    assert get("/one").text == "Hello world!"
    serve.delete("one")
    assert "one" not in serve.status().applications
    with pytest.raises(RayServeException, match="Application 'one' does not exist."):
        serve.get_app_handle("one")
    assert get("/one").status_code == 404
    assert get("/two").text == "Hello world!"
    serve.shutdown()
    assert serve.status().applications == {}


def test_duplicate_route_prefix_is_refused(clean):
    serve.run(Hello.bind(), name="first", route_prefix="/same")
    with pytest.raises(RayServeException, match="/same"):
        serve.run(Hello.bind(), name="second", route_prefix="/same")
    with pytest.raises(ValueError):
        serve.run(Hello.bind(), name="third", route_prefix="bad")


def test_status_shapes(clean):
    assert isinstance(serve.status(), ServeStatus)
    serve.run(Hello.options(num_replicas=2).bind(), name="shape", route_prefix="/shape")
    status = serve.status()
    app = status.applications["shape"]
    assert app.status == ApplicationStatus.RUNNING == "RUNNING"
    assert app.last_deployed_time_s > 0 and isinstance(app.message, str)
    deployment = app.deployments["Hello"]
    assert deployment.status == DeploymentStatus.HEALTHY
    assert sum(deployment.replica_states.values()) == 2
    assert deployment.replica_states.get("RUNNING") == 2
    handle = serve.get_app_handle("shape")
    pids = {handle.pid.remote().result() for _ in range(20)}
    assert 1 <= len(pids) <= 2


try:
    from fastapi import FastAPI

    fastapi_app = FastAPI()

    @serve.ingress(fastapi_app)
    class Api:
        def __init__(self, greeting: str):
            self.greeting = greeting

        @fastapi_app.get("/hello")
        def hello(self, name: str = "world"):
            return {"message": f"{self.greeting}, {name}"}

        @fastapi_app.post("/items/{item_id}")
        async def create(self, item_id: int, item: dict):
            return {"id": item_id, "item": item}

    ApiDeployment = serve.deployment(Api)
except ImportError:
    ApiDeployment = None


@pytest.mark.skipif(ApiDeployment is None, reason="fastapi is not installed")
def test_fastapi_ingress(clean):
    serve.run(ApiDeployment.bind("Hi"), name="api", route_prefix="/api")
    assert get("/api/hello?name=serve").json() == {"message": "Hi, serve"}
    response = requests.post(URL + "/api/items/3", json={"k": "v"}, timeout=30)
    assert response.status_code == 200 and response.json() == {"id": 3, "item": {"k": "v"}}
    assert get("/api/docs").status_code == 200
    assert get("/api/nope").status_code == 404


@serve.deployment(max_ongoing_requests=32)
class Batcher:
    @serve.batch(max_batch_size=8, batch_wait_timeout_s=0.2)
    async def __call__(self, items: List[int]):
        return [(item * 2, len(items)) for item in items]


def test_batch_with_16_concurrent_callers(clean):
    handle = serve.run(Batcher.bind(), name="batch", route_prefix="/batch")
    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        results = list(pool.map(lambda i: handle.remote(i).result(timeout_s=30), range(16)))
    assert [r[0] for r in results] == [i * 2 for i in range(16)]
    sizes = [r[1] for r in results]
    assert max(sizes) <= 8 and max(sizes) > 1

    async def many():
        return await asyncio.gather(*[handle.remote(i) for i in range(16)])

    assert [r[0] for r in asyncio.run(many())] == [i * 2 for i in range(16)]


@serve.deployment(max_ongoing_requests=1)
class Sleeper:
    async def __call__(self, seconds: float):
        await asyncio.sleep(seconds)
        return os.getpid()


def test_requests_queue_at_the_caller_beyond_max_ongoing(clean):
    handle = serve.run(Sleeper.bind(), name="sleep", route_prefix=None)
    start = time.monotonic()
    responses = [handle.remote(0.3) for _ in range(4)]
    assert time.monotonic() - start < 0.5  # .remote() returns at once even when queued
    assert len({r.result(timeout_s=30) for r in responses}) == 1
    # One at a time: the four took about four times as long as one.
    assert time.monotonic() - start >= 1.1


@serve.deployment
class Streamer:
    def __call__(self, n: int):
        for i in range(n):
            yield i


def test_streaming_handle(clean):
    handle = serve.run(Streamer.bind(), name="stream", route_prefix=None)
    assert list(handle.options(stream=True).remote(4)) == [0, 1, 2, 3]


@oxray.remote
def call_from_a_task(handle):
    return handle.shout.remote("task").result()


def test_handles_work_from_tasks(clean):
    serve.run(Hello.bind(), name="task", route_prefix=None)
    handle = serve.get_app_handle("task")
    assert oxray.get(call_from_a_task.remote(handle), timeout=60) == "TASK "



@serve.deployment(ray_actor_options={"num_cpus": 5})
class Big:
    def __call__(self, request):
        return "big"


def test_a_deployment_no_node_can_hold_fails_with_the_reason(clean):
    with pytest.raises(RayServeException, match="cannot be placed: no node of the cluster can hold"):
        serve.run(Big.options(ray_actor_options={"num_cpus": 64}).bind(), name="huge", route_prefix="/huge")
    assert serve.status().applications["huge"].status == ApplicationStatus.DEPLOY_FAILED
    assert get("/huge").status_code == 503


def test_a_deployment_waiting_for_resources_says_so_and_can_be_deleted(clean):
    # The second replica waits: the first holds 5 of the cluster's 8 CPUs.
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        running = pool.submit(serve.run, Big.options(num_replicas=2).bind(), name="big", route_prefix="/big")
        deadline = time.monotonic() + 30
        message = ""
        while time.monotonic() < deadline and "taken more than" not in message:
            app = serve.status().applications.get("big")
            message = app.deployments["Big"].message if app else ""
            time.sleep(0.2)
        assert "taken more than" in message and '"CPU":5' in message, message
        assert serve.status().applications["big"].status == ApplicationStatus.DEPLOYING
        serve.delete("big")
        with pytest.raises(RayServeException, match="deleted while it was being deployed"):
            running.result(timeout=30)
    assert "big" not in serve.status().applications


@serve.deployment
class Tokens:
    async def __call__(self, request):
        n = int(request.query_params.get("n", "3"))

        async def tokens():
            for i in range(n):
                yield f"token{i} "
                await asyncio.sleep(0.3)

        from starlette.responses import StreamingResponse

        return StreamingResponse(tokens(), media_type="text/plain")


def test_a_streamed_response_reaches_the_client_piece_by_piece(clean):
    serve.run(Tokens.bind(), name="tokens", route_prefix="/tokens")
    began = time.monotonic()
    with requests.get(URL + "/tokens?n=4", stream=True, timeout=30) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/plain")
        pieces = []
        for piece in response.iter_content(chunk_size=None):
            pieces.append((piece.decode(), time.monotonic() - began))
    assert "".join(p for p, _ in pieces) == "token0 token1 token2 token3 "
    # The first token came long before the last one was made (4 x 0.3 s).
    assert pieces[0][1] < 0.8, pieces
    assert pieces[-1][1] >= 0.9, pieces


@serve.deployment
class BreaksMidway:
    async def __call__(self, request):
        async def tokens():
            yield "token0 "
            await asyncio.sleep(0.1)
            raise RuntimeError("the model broke")

        from starlette.responses import StreamingResponse

        return StreamingResponse(tokens(), media_type="text/plain")


def test_an_error_after_a_streamed_response_started_aborts_the_connection(clean):
    """Too late for a 500: the client must see the body cut short, not a clean end (Ray does
    the same)."""
    serve.run(BreaksMidway.bind(), name="breaks", route_prefix="/breaks")
    with requests.get(URL + "/breaks", stream=True, timeout=30) as response:
        assert response.status_code == 200
        pieces = []
        with pytest.raises(requests.exceptions.ChunkedEncodingError):
            for piece in response.iter_content(chunk_size=None):
                pieces.append(piece)
    assert b"".join(pieces) == b"token0 "
    # The proxy and the replica serve on.
    with requests.get(URL + "/breaks", stream=True, timeout=30) as response:
        assert response.status_code == 200


@serve.deployment(max_ongoing_requests=2, autoscaling_config={
    "min_replicas": 1, "max_replicas": 3, "target_ongoing_requests": 1, "upscale_delay_s": 0,
    "downscale_delay_s": 1, "look_back_period_s": 1, "metrics_interval_s": 0.2})
class Busy:
    async def __call__(self, request):
        await asyncio.sleep(float(request.query_params.get("s", "0")))
        return str(os.getpid())


def _replicas(app, deployment):
    overview = serve.status().applications[app].deployments[deployment]
    return overview.replica_states.get("RUNNING", 0)


def _autoscaling_detail(cluster, app, deployment):
    import json

    from conftest import api

    with api(cluster, "/api/serve/applications/") as response:
        details = json.loads(response.read())
    return details["applications"][app]["deployments"][deployment]["autoscaling_detail"]


def test_autoscaling_follows_http_load_up_to_max_and_back_to_min(clean, serve_cluster):
    serve.run(Busy.bind(), name="busy", route_prefix="/busy")
    assert _replicas("busy", "Busy") == 1
    pids = set()
    stop = time.monotonic() + 60

    def load():
        while time.monotonic() < stop and _replicas("busy", "Busy") < 3:
            pids.add(get("/busy?s=0.5").text)

    with concurrent.futures.ThreadPoolExecutor(6) as pool:
        for f in [pool.submit(load) for _ in range(6)]:
            f.result()
    assert _replicas("busy", "Busy") == 3, serve.status()
    # Requests reach the new replicas too.
    with concurrent.futures.ThreadPoolExecutor(6) as pool:
        pids.update(pool.map(lambda _: get("/busy?s=0.3").text, range(12)))
    assert len(pids) >= 2
    deadline = time.monotonic() + 30
    while _replicas("busy", "Busy") > 1:
        assert time.monotonic() < deadline, serve.status()
        time.sleep(0.2)
    assert get("/busy").status_code == 200
    # What the autoscaler did, in Ray's `autoscaling_detail`.
    detail = _autoscaling_detail(serve_cluster, "busy", "Busy")
    ups = [d for d in detail["decisions"] if d["curr_num_replicas"] > d["prev_num_replicas"]]
    downs = [d for d in detail["decisions"] if d["curr_num_replicas"] < d["prev_num_replicas"]]
    assert ups and downs and downs[-1]["curr_num_replicas"] == 1, detail
    assert detail["metrics_health"] == "healthy" and detail["metrics"]["target_ongoing_requests"] == 1
    _parsed_by_rays_model("DeploymentAutoscalingDetail", detail)


def _parsed_by_rays_model(model, value):
    """Ray's own pydantic model takes the value (in a process of its own: Ray is not
    imported beside oxray); skipped where Ray is not installed."""
    import json
    import subprocess
    import sys

    code = f"import json, sys; from ray.serve.schema import {model} as M; M(**json.load(sys.stdin))"
    if subprocess.run([sys.executable, "-c", "import ray.serve.schema"], capture_output=True).returncode != 0:
        pytest.skip("Ray is not installed here")
    done = subprocess.run([sys.executable, "-c", code], input=json.dumps(value), capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]


@serve.deployment(autoscaling_config={
    "min_replicas": 0, "max_replicas": 1, "initial_replicas": 0, "target_ongoing_requests": 1,
    "upscale_delay_s": 0, "downscale_delay_s": 1, "look_back_period_s": 1, "metrics_interval_s": 0.2})
class Doubler:
    def __call__(self, x):
        return x * 2


def test_a_deployment_at_zero_replicas_scales_up_for_requests_through_handles(clean):
    """No HTTP request reaches it: the handle's waiting request is what the autoscaler sees."""
    serve.run(Doubler.bind(), name="zero", route_prefix=None)
    assert _replicas("zero", "Doubler") == 0
    handle = serve.get_deployment_handle("Doubler", "zero")
    assert handle.remote(21).result(timeout_s=60) == 42
    assert _replicas("zero", "Doubler") == 1
    deadline = time.monotonic() + 30
    while _replicas("zero", "Doubler") > 0:  # and back to zero once idle
        assert time.monotonic() < deadline, serve.status()
        time.sleep(0.2)


@serve.deployment(num_replicas=2, max_ongoing_requests=8)
class Steady:
    async def __call__(self, request):
        await asyncio.sleep(0.05)
        return str(os.getpid())


def _wait_running(app, deployment, replicas, timeout=60):
    """Until exactly `replicas` replicas of the deployment run, and no other."""
    deadline = time.monotonic() + timeout
    while True:
        states = serve.status().applications[app].deployments[deployment].replica_states
        if states == {"RUNNING": replicas}:
            return
        assert time.monotonic() < deadline, states
        time.sleep(0.2)


def _load(seconds, clients, path):
    """`clients` callers sending requests for `seconds`: each request's status (or the
    exception's name) and the pid that answered, in the order they ended."""
    stop = time.monotonic() + seconds
    outcomes = []

    def caller():
        while time.monotonic() < stop:
            try:
                r = requests.get(URL + path, timeout=30)
                outcomes.append((r.status_code, r.text if r.status_code == 200 else "", time.monotonic()))
            except requests.RequestException as e:
                outcomes.append((type(e).__name__, "", time.monotonic()))

    with concurrent.futures.ThreadPoolExecutor(clients) as pool:
        for f in [pool.submit(caller) for _ in range(clients)]:
            f.result()
    return outcomes


# How a request in flight on a replica that dies ends: a 500. A response made in one piece
# comes from the replica as one item, so it is never a body cut short.
IN_FLIGHT_FAILURES = {500}


def test_a_replica_killed_under_load_costs_only_its_requests_in_flight(clean):
    import signal
    import threading

    serve.run(Steady.bind(), name="steady", route_prefix="/steady")
    pids = {get("/steady").text for _ in range(20)}
    assert len(pids) == 2, pids
    victim = int(sorted(pids)[0])
    killed_at = []

    def kill_soon():
        time.sleep(2)
        killed_at.append(time.monotonic())
        os.kill(victim, signal.SIGKILL)

    threading.Thread(target=kill_soon, daemon=True).start()
    outcomes = _load(8, 6, "/steady")
    statuses = [s for s, _, _ in outcomes]
    failed = [s for s in statuses if s != 200]
    # Every request ended (none hung past its timeout), and only those the dead replica held
    # or was sent failed (see IN_FLIGHT_FAILURES), none retried elsewhere.
    assert len(outcomes) > 100 and set(failed) <= IN_FLIGHT_FAILURES, set(failed)
    # Failures are the requests it held or was sent before the proxy saw it gone: all within
    # a few seconds of the kill (on a loaded machine the news takes longer than the 8 it held).
    late_failures = [t - killed_at[0] for s, _, t in outcomes if s != 200 and t > killed_at[0] + 5]
    assert not late_failures and len(failed) <= len(outcomes) // 20, f"{len(failed)} of {len(outcomes)} failed"
    after = [pid for s, pid, t in outcomes if s == 200 and t > killed_at[0] + 0.5]
    assert after and str(victim) not in after, "nothing goes to the dead replica once it is known dead"
    _wait_running("steady", "Steady", 2)
    new = {get("/steady").text for _ in range(30)}
    assert len(new) == 2 and str(victim) not in new, "a new replica took the dead one's place"
    print(f"replica SIGKILL under load: {len(failed)} of {len(outcomes)} requests failed")
