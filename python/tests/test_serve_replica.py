"""The Serve replica actor (`oxray.serve._replica.Replica`) on a real local cluster, called
the way the controller, the proxy and handles call it."""

import asyncio
import inspect
import json
import os
import threading
import time
from pathlib import Path

import pytest

import oxray
from oxray import serve
from oxray._private import serialization
from oxray.actor import ActorMethod
from oxray.serve._replica import Replica
from oxray.serve.exceptions import RayServeException

from conftest import driver_of


@pytest.fixture(scope="module")
def driver(cluster):
    # The replicas import this module's classes by name, as a job's workers would.
    with driver_of(cluster, runtime_env={"env_vars": {"PYTHONPATH": str(Path(__file__).parent)}}):
        yield cluster


def make(target, *args, user_config=None, max_ongoing=5, **kwargs):
    definition = serialization.dumps({"callable": target, "is_function": not inspect.isclass(target),
                                      "init_args": args, "init_kwargs": kwargs})
    identity = json.dumps({"app": "app", "deployment": getattr(target, "__name__", "D"), "replica_id": "r1",
                           "user_config": user_config, "max_ongoing_requests": max_ongoing})
    return oxray.remote(Replica).options(num_cpus=0).remote(definition, identity)


def call(actor, name, *args, timeout=30):
    return oxray.get(ActorMethod(actor, name, 1).remote(*args), timeout=timeout)


def ready(actor):
    return json.loads(call(actor, "__serve_ready__"))


def http(actor, method="GET", path="/", query=b"", headers=(), body=b"", root_path="/", request_id="req-1"):
    status, out, data = call(actor, "__serve_http__", method, path, query, list(headers), body, root_path,
                             request_id, "127.0.0.1:5555")
    return status, {bytes(k).decode(): bytes(v).decode() for k, v in out}, bytes(data)


def request(actor, method_name, *args, meta=None, **kwargs):
    meta = {"request_id": "h1", "multiplexed_model_id": "", "stream": False, **(meta or {})}
    return oxray.get(actor.handle_request.remote(method_name, args, kwargs, meta), timeout=30)


class Echo:
    """Answers with what the request held, or with one of each return type."""

    def __init__(self, greeting="hi"):
        self.greeting = greeting
        self.config = None
        self.pid = os.getpid()

    def reconfigure(self, config):
        self.config = config

    async def __call__(self, request):
        kind = request.query_params.get("kind", "echo")
        if kind == "none":
            return None
        if kind == "bytes":
            return b"raw"
        if kind == "str":
            return "héllo"
        if kind == "json":
            return {"n": [1, 2]}
        if kind == "gen":
            return (f"part{i}," for i in range(3))
        if kind == "fail":
            raise ValueError("user failure")
        if kind == "starlette":
            from starlette.responses import PlainTextResponse

            return PlainTextResponse("made", status_code=202, headers={"x-own": "1"})
        return {"method": request.method, "path": request.url.path, "q": request.query_params.get("q"),
                "header": request.headers.get("X-Custom"), "body": (await request.json()) if request.method == "POST"
                else None, "greeting": self.greeting}

    def sync_method(self, x, y=0):
        return {"sum": x + y, "thread": threading.current_thread().name}

    async def async_method(self, x):
        await asyncio.sleep(0)
        return {"x": x, "thread": threading.current_thread().name}

    def failing(self):
        raise KeyError("handle failure")

    def context(self):
        ctx = serve.get_replica_context()
        return {"app": ctx.app_name, "deployment": ctx.deployment, "replica_id": ctx.replica_id,
                "same": ctx.servable_object is self, "model": serve.get_multiplexed_model_id(),
                "config": self.config, "pid": os.getpid()}

    def count(self, n):
        for i in range(n):
            yield i

    async def acount(self, n):
        for i in range(n):
            await asyncio.sleep(0)
            yield i * 10


class Failing:
    def __init__(self):
        raise ValueError("constructor is broken")


class Unhealthy:
    def __init__(self):
        self.healthy = True

    def set_health(self, healthy):
        self.healthy = healthy

    def check_health(self):
        if not self.healthy:
            raise RuntimeError("sick")


class Slow:
    def __init__(self, marker):
        self.marker = marker

    async def work(self, seconds):
        await asyncio.sleep(seconds)
        return "done"

    def __del__(self):
        with open(self.marker, "w") as f:
            f.write("deleted")


def plain_function(request):
    return f"fn:{request.url.path}"


def test_ready_reports_the_pid(driver):
    actor = make(Echo)
    answer = ready(actor)
    assert answer["ok"] is True and isinstance(answer["pid"], int) and answer["pid"] != os.getpid()
    assert json.loads(call(actor, "__serve_health__")) == {"ok": True}


def test_a_failing_constructor_is_reported_not_raised(driver):
    actor = make(Failing)
    answer = ready(actor)
    assert answer["ok"] is False
    assert "ValueError" in answer["error"] and "constructor is broken" in answer["error"]
    assert json.loads(call(actor, "__serve_health__"))["ok"] is False
    with pytest.raises(RayServeException, match="constructor"):
        request(actor, "sync_method", 1)


def test_http_return_types(driver):
    actor = make(Echo, greeting="hey")
    assert ready(actor)["ok"]
    status, headers, body = http(actor, query=b"kind=none")
    assert (status, headers["content-type"], body) == (200, "text/plain", b"")
    assert headers["x-request-id"] == "req-1"
    assert http(actor, query=b"kind=bytes")[1:] == ({"content-type": "text/plain", "x-request-id": "req-1"}, b"raw")
    status, headers, body = http(actor, query=b"kind=str")
    assert headers["content-type"] == "text/plain; charset=utf-8" and body == "héllo".encode()
    status, headers, body = http(actor, query=b"kind=json")
    assert headers["content-type"] == "application/json" and body == b'{"n":[1,2]}'
    assert http(actor, query=b"kind=gen")[2] == b"part0,part1,part2,"
    status, headers, body = http(actor, query=b"kind=fail")
    assert status == 500 and headers["content-type"] == "text/plain; charset=utf-8"
    assert b"ValueError: user failure" in body and b"Traceback" in body


def test_http_request_fields(driver):
    actor = make(Echo, greeting="hey")
    status, _, body = http(actor, "POST", "/api/items", b"q=7", [(b"x-custom", b"v"),
                                                                  (b"content-type", b"application/json")],
                           b'{"a": 1}', root_path="/api", request_id="abc")
    assert status == 200
    assert json.loads(body) == {"method": "POST", "path": "/api/items", "q": "7", "header": "v", "body": {"a": 1},
                                "greeting": "hey"}


def test_http_starlette_response_as_is(driver):
    pytest.importorskip("starlette")
    actor = make(Echo)
    status, headers, body = http(actor, query=b"kind=starlette")
    assert (status, body, headers["x-own"]) == (202, b"made", "1")
    assert headers["content-type"].startswith("text/plain")


def test_function_deployment_over_http(driver):
    actor = make(plain_function)
    assert ready(actor)["ok"]
    assert http(actor, path="/f/x")[2] == b"fn:/f/x"


async def raw_asgi(scope, receive, send):
    message = await receive()
    body = json.dumps({"path": scope["path"], "root_path": scope["root_path"], "body": message["body"].decode(),
                       "instance": serve.get_replica_context().servable_object.tag}).encode()
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/json")]})
    await send({"type": "http.response.body", "body": body})


@serve.ingress(raw_asgi)
class RawIngress:
    tag = "raw"


def test_ingress_with_a_plain_asgi_app(driver):
    actor = make(RawIngress)
    assert ready(actor)["ok"]
    status, headers, body = http(actor, "PUT", "/pre/x", body=b"data", root_path="/pre", request_id="z")
    assert status == 200 and headers["x-request-id"] == "z"
    assert json.loads(body) == {"path": "/pre/x", "root_path": "/pre", "body": "data", "instance": "raw"}


def fastapi_ingress_class():
    from fastapi import FastAPI

    app = FastAPI()

    @serve.ingress(app)
    class Api:
        def __init__(self, prefix):
            self.prefix = prefix

        @app.get("/hello")
        def hello(self, name: str = "world"):
            return {"message": f"{self.prefix} {name}"}

        @app.post("/items/{item_id}")
        async def item(self, item_id: int, payload: dict):
            return {"id": item_id, "payload": payload, "prefix": self.prefix}

    return Api


def test_fastapi_ingress(driver):
    pytest.importorskip("fastapi")
    actor = make(fastapi_ingress_class(), "Hello")
    assert ready(actor)["ok"]
    status, headers, body = http(actor, "GET", "/api/hello", b"name=serve", root_path="/api")
    assert status == 200 and json.loads(body) == {"message": "Hello serve"}
    assert headers["content-type"] == "application/json"
    status, _, body = http(actor, "POST", "/api/items/4", headers=[(b"content-type", b"application/json")],
                           body=b'{"k": "v"}', root_path="/api")
    assert status == 200 and json.loads(body) == {"id": 4, "payload": {"k": "v"}, "prefix": "Hello"}
    assert http(actor, "GET", "/api/missing", root_path="/api")[0] == 404
    status, _, body = http(actor, "GET", "/api/docs", root_path="/api")
    assert status == 200 and b"swagger" in body.lower()


def test_handle_requests_run_sync_methods_in_threads_and_async_on_the_loop(driver):
    actor = make(Echo)
    assert ready(actor)["ok"]
    sync = request(actor, "sync_method", 2, y=3)
    assert sync["sum"] == 5 and sync["thread"].startswith("serve-replica")
    assert request(actor, "async_method", 7)["x"] == 7
    with pytest.raises(KeyError, match="handle failure"):
        request(actor, "failing")
    with pytest.raises(RayServeException, match="does not exist"):
        request(actor, "no_such_method")


def test_top_level_object_refs_are_read_before_the_call(driver):
    # How a DeploymentResponse passed to another call arrives: as its ObjectRef.
    actor = make(Echo)
    assert request(actor, "sync_method", oxray.put(40), y=oxray.put(2))["sum"] == 42


def test_replica_context_and_model_id(driver):
    actor = make(Echo, user_config={"level": 1})
    assert ready(actor)["ok"]
    context = request(actor, "context", meta={"multiplexed_model_id": "m7"})
    assert context["app"] == "app" and context["deployment"] == "Echo" and context["replica_id"] == "r1"
    assert context["same"] is True and context["model"] == "m7"
    assert context["config"] == {"level": 1}  # reconfigure ran before the replica was ready


def test_streaming_handle_requests(driver):
    actor = make(Echo)
    assert ready(actor)["ok"]
    for method, expected in (("count", [0, 1, 2]), ("acount", [0, 10, 20])):
        gen = actor.handle_request.options(num_returns="streaming").remote(
            method, (3,), {}, {"request_id": "s", "multiplexed_model_id": "", "stream": True})
        assert [oxray.get(ref, timeout=30) for ref in gen] == expected
    with pytest.raises(TypeError, match="stream=True"):
        request(actor, "count", 2)


def test_reconfigure_keeps_the_process(driver):
    actor = make(Echo, user_config={"v": 1})
    pid = ready(actor)["pid"]
    assert json.loads(call(actor, "__serve_reconfigure__", json.dumps({"v": 2}))) == {"ok": True}
    context = request(actor, "context")
    assert context["config"] == {"v": 2} and context["pid"] == pid
    broken = make(Slow, "/nonexistent")
    assert ready(broken)["ok"]
    answer = json.loads(call(broken, "__serve_reconfigure__", json.dumps({"v": 1})))
    assert answer["ok"] is False and "reconfigure" in answer["error"]


def test_health_calls_check_health(driver):
    actor = make(Unhealthy)
    assert ready(actor)["ok"]
    assert json.loads(call(actor, "__serve_health__")) == {"ok": True}
    request(actor, "set_health", False)
    answer = json.loads(call(actor, "__serve_health__"))
    assert answer["ok"] is False and "sick" in answer["error"]


def test_stop_waits_for_requests_in_flight_then_calls_del(driver, tmp_path):
    marker = tmp_path / "deleted"
    actor = make(Slow, str(marker))
    assert ready(actor)["ok"]
    slow = actor.handle_request.remote("work", (1.5,), {}, {"request_id": "w", "stream": False})
    time.sleep(0.3)
    start = time.monotonic()
    answer = json.loads(call(actor, "__serve_stop__", 0.1, 10.0))
    took = time.monotonic() - start
    assert answer["ok"] is True and answer["in_flight"] == 0
    assert 0.8 < took < 8
    assert oxray.get(slow, timeout=10) == "done"
    assert marker.read_text() == "deleted"


def test_stop_gives_up_at_the_timeout(driver, tmp_path):
    actor = make(Slow, str(tmp_path / "d2"))
    assert ready(actor)["ok"]
    actor.handle_request.remote("work", (30,), {}, {"request_id": "w", "stream": False})
    time.sleep(0.3)
    start = time.monotonic()
    answer = json.loads(call(actor, "__serve_stop__", 0.1, 0.5))
    assert time.monotonic() - start < 5 and answer["in_flight"] == 1


# Streamed HTTP responses (`__serve_http_stream__`): a response made in one piece is one
# item, (status, headers, body); others are (status, headers), then each chunk.

def http_stream(actor, method="GET", path="/", query=b"", headers=(), body=b"", root_path="/", request_id="st-1"):
    """(status, headers, body chunks, when each item arrived (seconds since the call), whether
    the response came whole in one item)."""
    start = time.monotonic()
    gen = ActorMethod(actor, "__serve_http_stream__", 1).options(num_returns="streaming").remote(
        method, path, query, list(headers), body, root_path, request_id, "127.0.0.1:5555")
    items = []
    for ref in gen:
        items.append((oxray.get(ref, timeout=30), time.monotonic() - start))
    first, times = items[0][0], [t for _, t in items]
    status, out = first[:2]
    whole = len(first) == 3
    chunks = ([bytes(first[2])] if first[2] else []) if whole else [bytes(c) for c, _ in items[1:]]
    assert not (whole and len(items) > 1), "nothing follows a whole response"
    return status, {bytes(k).decode(): bytes(v).decode() for k, v in out}, chunks, times, whole


TICK_S = 0.8
closed = []  # the user code of the in-process streams that ended


def note_closed(mark):
    # A module-level function, imported by reference, so that code pickled by value (made in a
    # function) still writes to this list.
    closed.append(mark)


class Ticker:
    async def __call__(self, request):
        fail = request.query_params.get("fail")
        try:
            for i in range(3):
                if i:
                    await asyncio.sleep(TICK_S)
                yield f"tick{i};"
                if fail:
                    raise RuntimeError("broken midway")
        finally:
            note_closed("ticker")


class SyncTicker:
    def __call__(self, request):
        try:
            for i in range(100):
                time.sleep(0.05)
                yield f"{i},"
        finally:
            note_closed("sync")


def streaming_ingress_class():
    from fastapi import FastAPI
    from fastapi.responses import StreamingResponse

    app = FastAPI()

    @serve.ingress(app)
    class Streamer:
        @app.get("/events")
        def events(self, n: int = 3):
            async def body():
                try:
                    for i in range(n):
                        if i:
                            await asyncio.sleep(TICK_S)
                        yield f"event{i}\n".encode()
                finally:
                    note_closed("fastapi")

            return StreamingResponse(body(), media_type="text/event-stream", headers={"x-stream": "yes"})

    return Streamer


def test_stream_of_a_plain_return_is_one_whole_item(driver):
    """A replica that dies while it answers is then a 500 at the proxy, never a body cut short."""
    actor = make(Echo)
    assert ready(actor)["ok"]
    status, headers, chunks, _, whole = http_stream(actor, query=b"kind=str")
    assert status == 200 and headers == {"content-type": "text/plain; charset=utf-8", "x-request-id": "st-1"}
    assert chunks == ["héllo".encode()] and whole
    status, _, chunks, _, whole = http_stream(actor, query=b"kind=json")
    assert status == 200 and chunks == [b'{"n":[1,2]}'] and whole
    status, headers, chunks, _, whole = http_stream(actor, query=b"kind=starlette")
    assert (status, chunks, headers["x-own"], whole) == (202, [b"made"], "1", True), "an ASGI body in one message"


def test_stream_of_an_empty_body_is_whole_too(driver):
    actor = make(Echo)
    status, headers, chunks, _, whole = http_stream(actor, query=b"kind=none", request_id="e")
    assert (status, headers, chunks, whole) == (200, {"content-type": "text/plain", "x-request-id": "e"}, [], True)


def test_stream_of_an_async_generator_sends_each_chunk_as_it_is_yielded(driver):
    actor = make(Ticker)
    assert ready(actor)["ok"]
    status, headers, chunks, times, whole = http_stream(actor)
    assert status == 200 and headers["content-type"] == "text/plain; charset=utf-8" and not whole
    assert chunks == [b"tick0;", b"tick1;", b"tick2;"]
    # The generator sleeps twice after its first chunk: that chunk came long before its end.
    assert times[-1] - times[1] > 1.5 * TICK_S, times
    assert times[1] < times[-1] - TICK_S
    # __serve_http__ joins the same response.
    assert http(actor)[2] == b"tick0;tick1;tick2;"


def test_stream_of_a_fastapi_streaming_response(driver):
    pytest.importorskip("fastapi")
    actor = make(streaming_ingress_class())
    assert ready(actor)["ok"]
    status, headers, chunks, times, whole = http_stream(actor, path="/api/events", query=b"n=3", root_path="/api")
    assert not whole
    assert status == 200 and headers["x-stream"] == "yes" and headers["x-request-id"] == "st-1"
    assert headers["content-type"].startswith("text/event-stream")
    assert chunks == [b"event0\n", b"event1\n", b"event2\n"]
    assert times[-1] - times[1] > 1.5 * TICK_S, times
    status, _, chunks, _, _ = http_stream(actor, path="/api/missing", root_path="/api")
    assert status == 404 and b"".join(chunks) == b'{"detail":"Not Found"}'


def test_stream_of_a_user_error(driver):
    actor = make(Echo)
    status, headers, chunks, _, _ = http_stream(actor, query=b"kind=fail", request_id="bad")
    assert status == 500 and headers == {"content-type": "text/plain; charset=utf-8", "x-request-id": "bad"}
    text = b"".join(chunks)
    assert b"Traceback" in text and b"ValueError: user failure" in text
    # Once the head is out, an error fails the stream (the proxy then aborts the connection).
    ticker = make(Ticker)
    gen = ActorMethod(ticker, "__serve_http_stream__", 1).options(num_returns="streaming").remote(
        "GET", "/", b"fail=1", [], b"", "/", "late", "127.0.0.1:5555")
    items = []
    with pytest.raises(Exception, match="broken midway"):
        for ref in gen:
            items.append(oxray.get(ref, timeout=30))
    assert [items[0][0], bytes(items[1])] == [200, b"tick0;"]
    assert http(ticker, query=b"fail=1")[0] == 500
    assert json.loads(call(ticker, "__serve_stop__", 0.05, 5.0))["in_flight"] == 0


def local_replica(target):
    """A Replica in this process, to close its streams the way a departing client does."""
    definition = serialization.dumps({"callable": target, "is_function": False, "init_args": (), "init_kwargs": {}})
    return Replica(definition, json.dumps({"app": "app", "deployment": target.__name__, "replica_id": "local"}))


@pytest.mark.parametrize("target,path,root_path,mark", [(Ticker, "/", "/", "ticker"),
                                                         (SyncTicker, "/", "/", "sync"),
                                                         ("fastapi", "/api/events", "/api", "fastapi")])
@pytest.mark.parametrize("how", ["aclose", "cancel"])
def test_a_departing_client_stops_the_users_code(target, path, root_path, mark, how):
    from oxray.serve import _context

    if target == "fastapi":
        pytest.importorskip("fastapi")
        target = streaming_ingress_class()
    saved = _context.current_replica()
    closed.clear()

    async def main():
        replica = local_replica(target)
        stream = replica.__serve_http_stream__("GET", path, b"n=50", [], b"", root_path, "gone", "")
        status, _ = await stream.__anext__()
        assert status == 200 and await stream.__anext__()
        assert replica._in_flight == 1
        if how == "aclose":
            await stream.aclose()
        else:
            task = asyncio.ensure_future(stream.__anext__())
            await asyncio.sleep(0.01)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
        assert replica._in_flight == 0
        for _ in range(100):  # a sync generator is closed once its running step ends
            if closed:
                break
            await asyncio.sleep(0.01)
        assert closed == [mark]
        replica._pool.shutdown(wait=True)

    try:
        asyncio.run(asyncio.wait_for(main(), 20))
    finally:
        _context.set_replica(saved)
