"""oxray.serve's pure parts, without a cluster: deployment options, route prefixes, the
graph walk and the controller's PUT body, HTTP request/response mapping, @serve.batch,
@serve.multiplexed, and the router's choice, capacity and FIFO queue over fake replicas."""

import asyncio
import base64
import pickle
import random

import pytest

from oxray import serve
from oxray._private import serialization
from oxray.serve import _build, _http, _router
from oxray.serve._deployment import initial_replicas
from oxray.serve.exceptions import BackPressureError, DeploymentUnavailableError, RayServeException, \
    RequestCancelledError
from oxray.serve.handle import DeploymentHandle, DeploymentResponse
from oxray.serve.schema import ApplicationStatus, DeploymentStatus, ReplicaState, ServeStatus, \
    status_from_controller


@serve.deployment
class Model:
    def __init__(self, *args, **kwargs):
        self.args = args

    def __call__(self, request):
        return "ok"


@serve.deployment
def hello(request):
    return "hello"


# Options -----------------------------------------------------------------------------------

def test_defaults_match_ray():
    assert Model.name == "Model"
    assert Model.num_replicas == 1
    assert Model.max_ongoing_requests == 5
    assert Model.max_queued_requests == -1
    assert Model.user_config is None
    assert Model.ray_actor_options == {"num_cpus": 1}
    assert Model.func_or_class.__name__ == "Model"
    assert hello.name == "hello"
    eff = Model._effective()
    assert (eff["graceful_shutdown_wait_loop_s"], eff["graceful_shutdown_timeout_s"]) == (2.0, 20.0)
    assert (eff["health_check_period_s"], eff["health_check_timeout_s"]) == (10.0, 30.0)
    assert eff["max_constructor_retry_count"] == 20


@pytest.mark.parametrize("options, error", [
    ({"version": "1"}, ValueError),
    ({"num_replicas": 0}, ValueError),
    ({"num_replicas": -2}, ValueError),
    ({"num_replicas": "many"}, ValueError),
    ({"num_replicas": 1.5}, TypeError),
    ({"name": "a#b"}, ValueError),
    ({"name": ""}, TypeError),
    ({"max_ongoing_requests": 0}, ValueError),
    ({"max_queued_requests": 0}, ValueError),
    ({"max_queued_requests": -2}, ValueError),
    ({"ray_actor_options": {"num_cpu": 1}}, ValueError),
    ({"ray_actor_options": {"num_cpus": -1}}, ValueError),
    ({"ray_actor_options": "cpus"}, TypeError),
    ({"user_config": {"f": object()}}, TypeError),
    ({"health_check_period_s": 0}, ValueError),
    ({"autoscaling_config": {"min_replicas": 3, "max_replicas": 2}}, ValueError),
    ({"autoscaling_config": {"bogus": 1}}, ValueError),
    ({"max_replicas_per_node": 101}, ValueError),
    ({"backpressure_config": {"status_code": 500}}, ValueError),
    ({"route_prefix": "/x"}, ValueError),
    ({"no_such_option": 1}, TypeError),
])
def test_bad_options_are_refused(options, error):
    with pytest.raises(error):
        serve.deployment(**options)(Model.func_or_class)
    with pytest.raises(error):
        Model.options(**options)


def test_version_error_says_it_was_removed():
    with pytest.raises(ValueError, match="removed"):
        serve.deployment(version="v1")


def test_num_replicas_with_autoscaling_config_is_refused():
    with pytest.raises(ValueError, match="num_replicas"):
        Model.options(num_replicas=2, autoscaling_config={"max_replicas": 3})


def test_auto_means_autoscaling_1_to_100():
    auto = Model.options(num_replicas="auto")
    config = auto.autoscaling_config
    assert (config.min_replicas, config.max_replicas, config.target_ongoing_requests) == (1, 100, 2)
    assert initial_replicas(auto._effective()) == 1
    # The user's own fields override "auto"'s.
    custom = Model.options(num_replicas="auto", autoscaling_config={"min_replicas": 3})
    assert (custom.autoscaling_config.min_replicas, custom.autoscaling_config.max_replicas) == (3, 100)
    assert initial_replicas(custom._effective()) == 3


def test_autoscaling_initial_replicas_is_what_the_controller_gets():
    d = Model.options(autoscaling_config={"min_replicas": 1, "initial_replicas": 4, "max_replicas": 8})
    assert initial_replicas(d._effective()) == 4
    assert initial_replicas(Model.options(num_replicas=3)._effective()) == 3


def test_options_returns_a_copy_and_keeps_earlier_options():
    a = Model.options(num_replicas=2, user_config={"k": 1})
    b = a.options(name="Other", max_ongoing_requests=7)
    assert (a.name, a.num_replicas, a.max_ongoing_requests) == ("Model", 2, 5)
    assert (b.name, b.num_replicas, b.max_ongoing_requests, b.user_config) == ("Other", 2, 7, {"k": 1})
    assert Model.num_replicas == 1


def test_deployment_cannot_be_called_and_bind_makes_an_application():
    with pytest.raises(RuntimeError, match="bind"):
        Model()
    app = Model.bind(1, k=2)
    assert isinstance(app, serve.Application)
    assert app._args == (1,) and app._kwargs == {"k": 2}


def test_config_classes_accept_dicts_and_check_values():
    from oxray.serve.config import AutoscalingConfig, BackpressureConfig, ProxyLocation, _coerce

    assert _coerce(AutoscalingConfig, {"max_replicas": 4}, "a").max_replicas == 4
    assert serve.HTTPOptions().host == "127.0.0.1" and serve.HTTPOptions().port == 8000
    with pytest.raises(ValueError):
        AutoscalingConfig(min_replicas=1, initial_replicas=5, max_replicas=2)
    assert BackpressureConfig().status_code == 503
    assert ProxyLocation.coerce("NoServer") is ProxyLocation.Disabled
    with pytest.raises(ValueError):
        ProxyLocation.coerce("Nowhere")


# Route prefixes ----------------------------------------------------------------------------

@pytest.mark.parametrize("prefix", ["/", "/a", "/a/b", None])
def test_good_route_prefixes(prefix):
    _build.check_route_prefix(prefix)


@pytest.mark.parametrize("prefix, error", [("a", ValueError), ("/a/", ValueError), ("/{x}", ValueError),
                                           ("/a}", ValueError), (3, TypeError)])
def test_bad_route_prefixes(prefix, error):
    with pytest.raises(error):
        _build.check_route_prefix(prefix)
    with pytest.raises(error):
        _build.application_body(Model.bind(), "app", prefix, {})


# Graph walk and PUT body -------------------------------------------------------------------

def test_graph_walk_deploys_nested_apps_once_each_with_unique_names():
    shared = Model.bind()
    other = Model.bind("second")
    root = Model.options(name="Root").bind(shared, [shared, {"x": other}], k=(other,))
    ingress, order = _build.walk(root)
    assert ingress == "Root"
    assert [name for name, _ in order] == ["Model", "Model_1", "Root"]


def test_walk_refuses_a_deployment_that_is_not_bound():
    with pytest.raises(TypeError, match="bind"):
        _build.walk(Model)


def test_put_body_follows_the_contract():
    @serve.deployment(ray_actor_options={"num_gpus": 0.5, "resources": {"acc": 2}}, user_config={"t": 1},
                      max_ongoing_requests=9, num_replicas=2)
    class Top:
        def __init__(self, down, items):
            pass

    body = _build.application_body(Top.bind(hello.bind(), [Model.bind()]), "app", "/top",
                                   {"host": "127.0.0.1", "port": 8000})
    assert body["route_prefix"] == "/top" and body["ingress"] == "Top"
    assert body["http_options"] == {"host": "127.0.0.1", "port": 8000}
    by_name = {d["name"]: d for d in body["deployments"]}
    assert set(by_name) == {"hello", "Model", "Top"}
    top = by_name["Top"]
    assert top["num_replicas"] == 2 and top["max_ongoing_requests"] == 9 and top["user_config"] == {"t": 1}
    assert top["resources"] == {"CPU": 1.0, "GPU": 0.5, "acc": 2.0}
    assert by_name["hello"]["resources"] == {"CPU": 1.0, "GPU": 0.0}
    assert top["env"]["OMP_NUM_THREADS"] == "1"
    assert top["max_queued_requests"] == -1 and top["max_constructor_retry_count"] == 20
    spec = serialization.loads(base64.b64decode(top["definition"]))
    assert spec["callable"].__name__ == "Top" and spec["is_function"] is False
    down, items = spec["init_args"]
    assert down == DeploymentHandle("hello", "app")
    assert items == [DeploymentHandle("Model", "app")]
    assert serialization.loads(base64.b64decode(by_name["hello"]["definition"]))["is_function"] is True


def test_version_changes_with_code_args_and_actor_options_not_user_config():
    def version(app):
        return _build.application_body(app, "v", "/", {})["deployments"][-1]["version"]

    base = version(Model.bind(1))
    assert version(Model.bind(1)) == base
    assert version(Model.options(user_config={"a": 2}).bind(1)) == base
    assert version(Model.options(num_replicas=3).bind(1)) == base
    assert version(Model.bind(2)) != base
    assert version(Model.options(ray_actor_options={"num_cpus": 2}).bind(1)) != base


# HTTP mapping ------------------------------------------------------------------------------

def test_return_values_map_as_in_ray():
    assert _http.encode(None) == (200, [(b"content-type", b"text/plain")], b"")
    assert _http.encode(b"\x00b") == (200, [(b"content-type", b"text/plain")], b"\x00b")
    assert _http.encode("héllo") == (200, [(b"content-type", b"text/plain; charset=utf-8")], "héllo".encode())
    assert _http.encode({"a": [1, 2]}) == (200, [(b"content-type", b"application/json")], b'{"a":[1,2]}')
    assert _http.encode(3) == (200, [(b"content-type", b"application/json")], b"3")
    assert _http.with_request_id([], "r1") == [(b"x-request-id", b"r1")]


def test_scope_has_full_path_and_prefix_as_root_path():
    scope = _http.build_scope("get", "/api/items", b"q=1", [(b"Host", b"example:8000")], "/api", "1.2.3.4:5")
    assert (scope["method"], scope["path"], scope["root_path"], scope["query_string"]) == ("GET", "/api/items", "/api",
                                                                                        b"q=1")
    assert scope["client"] == ("1.2.3.4", 5) and scope["headers"] == [(b"host", b"example:8000")]
    assert _http.build_scope("GET", "/", b"", [], "/")["root_path"] == ""


def test_fallback_request_reads_like_starlettes():
    scope = _http.build_scope("POST", "/p/x", b"a=1&a=2&b=", [(b"content-type", b"application/json"),
                                                              (b"x-thing", b"v")], "/p")
    request = _http.Request(scope, _http._Receive(b'{"k": 3}'))
    assert request.method == "POST" and request.url.path == "/p/x" and request.url.query == "a=1&a=2&b="
    assert request.headers["X-Thing"] == "v" and request.headers.get("CONTENT-TYPE") == "application/json"
    assert request.query_params["a"] == "2" and request.query_params.getlist("a") == ["1", "2"]
    assert request.query_params["b"] == "" and request.path_params == {}

    async def read():
        return await request.body(), await request.json()

    assert asyncio.run(read()) == (b'{"k": 3}', {"k": 3})


def test_run_asgi_collects_the_response():
    async def app(scope, receive, send):
        message = await receive()
        await send({"type": "http.response.start", "status": 201, "headers": [(b"x-a", b"1")]})
        await send({"type": "http.response.body", "body": message["body"] + scope["path"].encode(),
                    "more_body": True})
        await send({"type": "http.response.body", "body": b"!"})

    scope = _http.build_scope("POST", "/z", b"", [], "/")
    assert asyncio.run(_http.run_asgi(app, scope, b"in:")) == (201, [(b"x-a", b"1")], b"in:/z!")


# @serve.batch ------------------------------------------------------------------------------

def test_batch_groups_concurrent_calls_up_to_max_batch_size():
    sizes = []

    class Holder:
        @serve.batch(max_batch_size=4, batch_wait_timeout_s=0.5)
        async def double(self, items):
            sizes.append(len(items))
            return [i * 2 for i in items]

    holder = Holder()

    async def main():
        return await asyncio.gather(*[holder.double(i) for i in range(10)])

    assert asyncio.run(main()) == [i * 2 for i in range(10)]
    assert sizes == [4, 4, 2]


def test_batch_flushes_at_the_timeout_and_works_on_functions():
    @serve.batch(max_batch_size=100, batch_wait_timeout_s=0.05)
    async def echo(items):
        return list(items)

    async def main():
        loop = asyncio.get_running_loop()
        start = loop.time()
        out = await asyncio.gather(echo("a"), echo("b"))
        return out, loop.time() - start

    out, took = asyncio.run(main())
    assert out == ["a", "b"] and 0.04 <= took < 2


def test_batch_exceptions_fan_out_to_every_caller():
    @serve.batch(max_batch_size=3, batch_wait_timeout_s=0.2)
    async def broken(items):
        raise KeyError("boom")

    async def main():
        return await asyncio.gather(*[broken(i) for i in range(3)], return_exceptions=True)

    results = asyncio.run(main())
    assert len(results) == 3 and all(isinstance(r, KeyError) for r in results)


def test_batch_with_a_wrong_number_of_results_fails_each_caller():
    @serve.batch(max_batch_size=2, batch_wait_timeout_s=0.1)
    async def short(items):
        return items[:1]

    async def main():
        return await asyncio.gather(short(1), short(2), return_exceptions=True)

    assert all(isinstance(r, TypeError) for r in asyncio.run(main()))


def test_batch_never_mixes_model_ids_and_setters_apply():
    from oxray.serve import _context

    seen = []

    @serve.batch(max_batch_size=10, batch_wait_timeout_s=0.1)
    async def f(items):
        seen.append((serve.get_multiplexed_model_id(), sorted(items)))
        return items

    async def call(item, model):
        _context.set_request(_context.RequestContext(multiplexed_model_id=model))
        return await f(item)

    async def main():
        return await asyncio.gather(call(1, "m1"), call(2, "m2"), call(3, "m1"))

    assert asyncio.run(main()) == [1, 2, 3]
    assert sorted(seen) == [("m1", [1, 3]), ("m2", [2])]
    f.set_max_batch_size(3)
    f.set_batch_wait_timeout_s(0.5)
    assert f._get_curr_max_batch_size() == 3 and f._get_curr_batch_wait_timeout_s() == 0.5
    with pytest.raises(ValueError):
        f.set_max_batch_size(0)


def test_batch_refuses_sync_functions_and_bad_arguments():
    with pytest.raises(TypeError, match="async"):
        serve.batch(lambda items: items)
    with pytest.raises(ValueError):
        serve.batch(max_batch_size=0)


def test_batch_streams_lists_from_an_async_generator():
    @serve.batch(max_batch_size=2, batch_wait_timeout_s=0.2)
    async def count(items):
        for step in range(2):
            yield [f"{i}-{step}" for i in items]

    async def collect(item):
        return [v async for v in count(item)]

    async def main():
        return await asyncio.gather(collect("a"), collect("b"))

    assert asyncio.run(main()) == [["a-0", "a-1"], ["b-0", "b-1"]]


# @serve.multiplexed ------------------------------------------------------------------------

def test_multiplexed_is_an_lru_per_replica_and_evicts_with_del():
    loads, deleted = [], []

    class Loaded:
        def __init__(self, model_id):
            self.model_id = model_id

        def __del__(self):
            deleted.append(self.model_id)

    class Holder:
        @serve.multiplexed(max_num_models_per_replica=2)
        async def get_model(self, model_id):
            loads.append(model_id)
            await asyncio.sleep(0.01)
            return Loaded(model_id)

    holder = Holder()

    async def main():
        first = await asyncio.gather(*[holder.get_model("a") for _ in range(3)])
        assert len({id(m) for m in first}) == 1  # concurrent requests load it once
        await holder.get_model("b")
        await holder.get_model("a")  # a becomes most recent
        await holder.get_model("c")  # evicts b
        await holder.get_model("a")

    asyncio.run(main())
    assert loads == ["a", "b", "c"]
    assert deleted[:1] == ["b"]


def test_multiplexed_checks_its_arguments():
    with pytest.raises(ValueError):
        serve.multiplexed(max_num_models_per_replica=0)
    with pytest.raises(TypeError):
        serve.multiplexed(lambda: None)


def test_model_id_is_empty_outside_a_request():
    assert serve.get_multiplexed_model_id() == ""


# Router ------------------------------------------------------------------------------------

class FakeRef:
    def __init__(self, replica, request):
        self.replica = replica
        self.request = request

    def completed(self):
        return self


class FakeMethod:
    def __init__(self, replica):
        self.replica = replica

    def options(self, **_):
        return self

    def remote(self, method_name, args, kwargs, meta):
        ref = FakeRef(self.replica, (method_name, args, kwargs, meta))
        self.replica.sent.append(ref)
        return ref


class FakeActor:
    def __init__(self, name):
        self.name = name
        self.sent = []
        self.handle_request = FakeMethod(self)


class FakeCluster:
    """Replicas below the router's interface: the test ends calls when it wants."""

    def __init__(self, count, max_ongoing=2, max_queued=-1, status="RUNNING"):
        self.actors = {f"r{i}": FakeActor(f"r{i}") for i in range(count)}
        self.watching = {}
        self.kicks = 0
        self.router = _router.Router("app", "Dep", watch=self.watch, kick=self.kick)
        self.app = {"status": status, "deployments": {"Dep": {
            "max_ongoing_requests": max_ongoing, "max_queued_requests": max_queued,
            "replicas": [{"replica_id": name, "actor_name": name, "state": "RUNNING"} for name in self.actors]}}}
        self.router.update(self.app, self.actors.__getitem__)

    def watch(self, ref, done):
        self.watching[id(ref)] = done

    def kick(self):
        self.kicks += 1

    def finish(self, ref):
        self.watching.pop(id(ref))()

    def submit(self, n=1, **meta):
        requests = []
        for i in range(n):
            request = _router.Request("__call__", (i,), {}, {"request_id": f"q{i}", "stream": False, **meta})
            self.router.submit(request)
            requests.append(request)
        return requests

    def in_flight(self):
        return {name: len([r for r in a.sent if id(r) in self.watching]) for name, a in self.actors.items()}


def test_choose_takes_the_less_loaded_of_two_and_skips_full_replicas():
    slots = [_router.Slot(f"r{i}", f"r{i}") for i in range(3)]
    for slot, load in zip(slots, (0, 5, 1)):
        slot.actor, slot.in_flight = object(), load
    picks = {_router.choose(slots, 5, rng=random.Random(seed)).replica_id for seed in range(50)}
    assert picks <= {"r0", "r2"}
    slots[0].in_flight = slots[2].in_flight = 5
    assert _router.choose(slots, 5) is None
    slots[1].in_flight = 4
    assert _router.choose(slots, 5).replica_id == "r1"


def test_choose_prefers_replicas_holding_the_model():
    slots = [_router.Slot(f"r{i}", f"r{i}") for i in range(4)]
    for slot in slots:
        slot.actor = object()
    slots[2].models["m"] = None
    assert all(_router.choose(slots, 5, "m").replica_id == "r2" for _ in range(20))
    slots[2].in_flight = 5
    assert _router.choose(slots, 5, "m").replica_id != "r2"


def test_router_never_exceeds_capacity_and_queues_fifo():
    fake = FakeCluster(2, max_ongoing=2)
    requests = fake.submit(7)
    assert fake.in_flight() == {"r0": 2, "r1": 2}
    assert [r.future.done() for r in requests] == [True] * 4 + [False] * 3
    # Each ended call lets exactly the oldest queued request go, to the replica with room.
    first = requests[0].future.result()
    fake.finish(first)
    assert requests[4].future.done() and not requests[5].future.done()
    assert requests[4].future.result().replica is first.replica
    assert max(fake.in_flight().values()) <= 2
    for request in requests[1:4]:
        fake.finish(request.future.result())
    assert all(r.future.done() for r in requests)
    assert [r.future.result().request[1] for r in requests] == [(i,) for i in range(7)]


def test_router_back_pressure_when_the_queue_is_full():
    fake = FakeCluster(1, max_ongoing=1, max_queued=2)
    requests = fake.submit(4)
    assert isinstance(requests[3].future.exception(), BackPressureError)
    assert not requests[1].future.done() and not requests[2].future.done()


def test_router_cancels_queued_requests_and_fails_when_the_app_fails():
    fake = FakeCluster(1, max_ongoing=1)
    requests = fake.submit(3)
    assert fake.router.cancel(requests[1])
    assert isinstance(requests[1].future.exception(), RequestCancelledError)
    assert not fake.router.cancel(requests[0])  # already sent
    fake.router.update({"status": "DEPLOY_FAILED", "message": "ctor failed"}, fake.actors.__getitem__)
    error = requests[2].future.exception()
    assert isinstance(error, DeploymentUnavailableError) and "ctor failed" in str(error)
    late = fake.submit(1)[0]
    assert isinstance(late.future.exception(), DeploymentUnavailableError)


def test_router_queues_until_replicas_appear_and_drops_removed_ones():
    fake = FakeCluster(0)
    request = fake.submit(1)[0]
    assert not request.future.done() and fake.kicks == 1
    actor = FakeActor("new")
    fake.router.update({"status": "DEPLOYING", "deployments": {"Dep": {"max_ongoing_requests": 1, "replicas": [
        {"replica_id": "n", "actor_name": "new", "state": "STARTING"}]}}}, {"new": actor}.__getitem__)
    assert not request.future.done()  # only RUNNING replicas take requests
    fake.router.update({"status": "RUNNING", "deployments": {"Dep": {"max_ongoing_requests": 1, "replicas": [
        {"replica_id": "n", "actor_name": "new", "state": "RUNNING"}]}}}, {"new": actor}.__getitem__)
    assert request.future.result().replica is actor
    fake.router.update({"status": "RUNNING", "deployments": {"Dep": {"replicas": []}}}, {}.__getitem__)
    assert fake.router.slots == {}


def test_dead_replica_is_skipped():
    fake = FakeCluster(2, max_ongoing=10)
    fake.router.replica_failed(fake.router.slots["r0"])
    fake.submit(5)
    assert fake.in_flight() == {"r0": 0, "r1": 5}


# Handles and responses ---------------------------------------------------------------------

def test_handles_pickle_as_their_names_and_options():
    handle = DeploymentHandle("Dep", "app").options(method_name="predict", multiplexed_model_id="m", stream=True)
    back = pickle.loads(pickle.dumps(handle))
    assert back == handle and back.deployment_name == "Dep" and back.app_name == "app"
    assert back.handle_options["method_name"] == "predict" and back.handle_options["stream"] is True
    assert handle.other.handle_options["method_name"] == "other"
    with pytest.raises(TypeError):
        handle.options(bogus=1)


def test_a_response_does_not_pickle():
    request = _router.Request("__call__", (), {}, {"request_id": "x"})
    with pytest.raises(RayServeException):
        pickle.dumps(DeploymentResponse(request))


def test_result_in_an_event_loop_raises_and_times_out():
    request = _router.Request("__call__", (), {}, {"request_id": "x"})
    response = DeploymentResponse(request)

    async def inside():
        response.result()

    with pytest.raises(RuntimeError, match="event loop"):
        asyncio.run(inside())
    with pytest.raises(TimeoutError):
        response.result(timeout_s=0.05)
    assert response.request_id == "x"


def test_cancel_before_sending():
    request = _router.Request("__call__", (), {}, {"request_id": "x"})
    response = DeploymentResponse(request)
    response.cancel()
    assert response.cancelled()
    with pytest.raises(RequestCancelledError):
        response.result(timeout_s=1)


# Status ------------------------------------------------------------------------------------

def test_status_from_the_controllers_view():
    assert status_from_controller({"applications": {}}) == ServeStatus()
    body = {"applications": {"app": {
        "status": "RUNNING", "message": "", "last_deployed_time_s": 12.5, "route_prefix": "/", "ingress": "A",
        "deployments": {"A": {"status": "HEALTHY", "status_trigger": "CONFIG_UPDATE_COMPLETED", "message": "",
                              "replicas": [{"state": "RUNNING"}, {"state": "RUNNING"}, {"state": "STARTING"}]}}}}}
    status = status_from_controller(body)
    app = status.applications["app"]
    assert app.status == ApplicationStatus.RUNNING == "RUNNING" and app.last_deployed_time_s == 12.5
    dep = app.deployments["A"]
    assert dep.status == DeploymentStatus.HEALTHY
    assert dep.replica_states == {ReplicaState.RUNNING: 2, ReplicaState.STARTING: 1}


def test_replica_context_outside_a_replica_raises():
    with pytest.raises(RayServeException):
        serve.get_replica_context()
    with pytest.raises(RayServeException, match="application name"):
        serve.get_deployment_handle("Dep")


def test_ingress_refuses_classes_with_call():
    async def app(scope, receive, send):
        pass

    with pytest.raises(ValueError, match="__call__"):
        @serve.ingress(app)
        class Bad:
            def __call__(self, request):
                pass


@pytest.mark.parametrize("options, named", [
    ({"placement_group_bundles": [{"CPU": 1}]}, "placement_group_bundles"),
    ({"max_replicas_per_node": 2}, "max_replicas_per_node"),
    ({"ray_actor_options": {"label_selector": {"zone": "a"}}}, "ray_actor_options.label_selector"),
])
def test_placement_options_oxray_cannot_honour_are_refused_by_name(options, named):
    app = Model.options(**options).bind()
    with pytest.raises(ValueError, match=named):
        _build.application_body(app, "app", "/", {})
