"""The replica actor the Serve controller creates: it runs the user's deployment and answers
the controller (ready, health, reconfigure, stop), the HTTP proxy (`__serve_http__`, or
`__serve_http_stream__` for a response sent as it is made) and handles (`handle_request`).
Every method is `async def`: the actor runs calls concurrently on one event loop; sync user
code runs in a thread pool beside it."""

import asyncio
import concurrent.futures
import contextvars
import functools
import inspect
import json
import os
import sys
import traceback
from contextlib import aclosing
from typing import Any, Dict, Optional

from oxray.serve import _context, _http, _ingress
from oxray.serve.exceptions import RayServeException


SWITCH_INTERVAL_S = 0.0002


def _traceback(error: BaseException) -> str:
    return "".join(traceback.format_exception(type(error), error, error.__traceback__))


def _json(**fields) -> str:
    return json.dumps(fields)


def _reset_request(token) -> None:
    try:
        _context.reset_request(token)
    except ValueError:  # a generator closed from another context than the one that started it
        pass


class Replica:
    def __init__(self, definition: bytes, identity: str):
        # Nothing here may raise for the user's code: a failure is reported by __serve_ready__.
        # Sync methods run in a pool thread while the event loop thread keeps the GIL busy:
        # at the default 5 ms switch interval a call waited ~2 ms to get it back.
        sys.setswitchinterval(SWITCH_INTERVAL_S)
        self._identity = json.loads(identity)
        self._definition = definition
        self._app_name = self._identity.get("app", "")
        self._deployment = self._identity.get("deployment", "")
        self._replica_id = self._identity.get("replica_id", "")
        self._max_ongoing = int(self._identity.get("max_ongoing_requests") or 5)
        self._user = None
        self._callable = None
        self._is_function = False
        self._asgi = None
        self._lifespan = None
        self._error: Optional[str] = None
        self._started: Optional[asyncio.Task] = None
        self._in_flight = 0
        self._stopping = False
        self._stopped = False
        self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=max(self._max_ongoing, 2),
                                                           thread_name_prefix="serve-replica")
        _context.set_replica(_context.ReplicaContext(self._app_name, self._deployment, self._replica_id))

    # Construction ----------------------------------------------------------------------

    async def _start(self) -> None:
        try:
            from oxray._private import serialization

            spec: Dict[str, Any] = serialization.loads(self._definition)
            target = spec["callable"]
            args, kwargs = spec.get("init_args") or (), spec.get("init_kwargs") or {}
            if spec.get("is_function", not inspect.isclass(target)):
                self._is_function = True
                self._callable = target
            else:
                instance = target.__new__(target)
                init = instance.__init__
                if inspect.iscoroutinefunction(init):
                    await init(*args, **kwargs)
                else:
                    await self._in_thread(init, args, kwargs)
                self._user = instance
                self._callable = instance
                _context.current_replica().servable_object = instance
                self._asgi = _ingress.asgi_app_of(instance)
                if self._asgi is not None:
                    await self._start_lifespan()
                user_config = self._identity.get("user_config")
                if user_config is not None:
                    await self._reconfigure(user_config)
        except BaseException as error:  # the user's constructor: reported, not raised
            self._error = _traceback(error)

    async def _ensure_started(self) -> None:
        if self._started is None:
            self._started = asyncio.get_running_loop().create_task(self._start())
        await asyncio.shield(self._started)
        if self._error is not None:
            raise RayServeException(f"The replica's constructor failed:\n{self._error}")

    async def _start_lifespan(self) -> None:
        """Runs the ASGI app's lifespan startup, if it has one (apps without it are fine)."""
        queue: asyncio.Queue = asyncio.Queue()
        started = asyncio.get_running_loop().create_future()
        state = {"stopped": asyncio.get_running_loop().create_future()}

        async def receive():
            return await queue.get()

        async def send(message):
            kind = message["type"]
            if kind in ("lifespan.startup.complete", "lifespan.startup.failed") and not started.done():
                started.set_result(message)
            elif kind in ("lifespan.shutdown.complete", "lifespan.shutdown.failed") and not state["stopped"].done():
                state["stopped"].set_result(message)

        async def run():
            try:
                await self._asgi({"type": "lifespan", "asgi": {"version": "3.0"}, "state": {}}, receive, send)
            except BaseException:  # an app without lifespan support
                pass
            for future in (started, state["stopped"]):
                if not future.done():
                    future.set_result(None)

        queue.put_nowait({"type": "lifespan.startup"})
        state["task"] = asyncio.get_running_loop().create_task(run())
        message = await started
        if message is not None and message["type"] == "lifespan.startup.failed":
            raise RuntimeError(f"The ASGI app's startup failed: {message.get('message', '')}")
        state["queue"] = queue
        self._lifespan = state

    async def _stop_lifespan(self) -> None:
        state = self._lifespan
        if state is None or state["task"].done():
            return
        state["queue"].put_nowait({"type": "lifespan.shutdown"})
        try:
            await asyncio.wait_for(asyncio.shield(state["stopped"]), 10)
        except asyncio.TimeoutError:
            pass

    # Running user code -----------------------------------------------------------------

    async def _in_thread(self, fn, args=(), kwargs=None):
        """A sync callable in the pool, with the caller's request context."""
        call = functools.partial(fn, *args, **(kwargs or {}))
        result = await asyncio.get_running_loop().run_in_executor(self._pool, contextvars.copy_context().run, call)
        if inspect.isawaitable(result):
            result = await result
        return result

    async def _call(self, fn, args, kwargs):
        if inspect.iscoroutinefunction(fn) or inspect.isasyncgenfunction(fn) or inspect.isgeneratorfunction(fn):
            result = fn(*args, **kwargs)
        else:
            result = await self._in_thread(fn, args, kwargs)
        if inspect.isawaitable(result):
            result = await result
        return result

    def _method(self, name: str):
        if self._is_function:
            if name != "__call__":
                raise RayServeException(f"Tried to call a method '{name}' on a function deployment; "
                                        "only '__call__' exists.")
            return self._callable
        method = getattr(self._user, name, None)
        if method is None or not callable(method):
            available = sorted(m for m in dir(self._user) if not m.startswith("_") and callable(getattr(self._user, m)))
            raise RayServeException(f"Tried to call a method '{name}' that does not exist. "
                                    f"Available methods: {available}.")
        return method

    async def _aiterate(self, values):
        """Any generator as an async one; a sync one's steps run in the pool. Closing it, or
        cancelling its consumer, closes the user's generator too, so that its cleanup runs
        now rather than whenever it is collected."""
        if hasattr(values, "__aiter__"):
            try:
                async for value in values:
                    yield value
            finally:
                if hasattr(values, "aclose"):
                    await values.aclose()
            return
        done = object()
        step = None
        try:
            while True:
                step = self._pool.submit(contextvars.copy_context().run, next, values, done)
                value = await asyncio.wrap_future(step)
                if value is done:
                    return
                yield value
        finally:
            close = getattr(values, "close", None)
            if close is not None:
                if step is None or step.done():
                    close()
                else:  # a generator still running in its thread cannot be closed before it yields
                    step.add_done_callback(lambda _: close())

    async def _reconfigure(self, user_config) -> None:
        self._identity["user_config"] = user_config
        if user_config is None:
            return  # as in Ray: a user_config taken away calls nothing
        reconfigure = getattr(self._user, "reconfigure", None)
        if reconfigure is None:
            raise RayServeException(f"user_config is set but {type(self._user).__name__} has no reconfigure method.")
        await self._call(reconfigure, (user_config,), {})

    # The controller's calls ------------------------------------------------------------

    async def __serve_ready__(self) -> str:
        try:
            await self._ensure_started()
        except RayServeException:
            return _json(ok=False, error=self._error)
        return _json(ok=True, pid=os.getpid())

    async def __serve_metrics__(self) -> str:
        """The load the autoscaler reads: requests running here now."""
        return _json(in_flight=self._in_flight)

    async def __serve_health__(self) -> str:
        if self._started is None or not self._started.done():
            return _json(ok=True)  # still starting: the controller waits on __serve_ready__
        if self._error is not None:
            return _json(ok=False, error=self._error)
        check = getattr(self._user, "check_health", None)
        if check is not None:
            try:
                await self._call(check, (), {})
            except BaseException as error:
                return _json(ok=False, error=_traceback(error))
        return _json(ok=True)

    async def __serve_reconfigure__(self, user_config_json: str) -> str:
        try:
            await self._ensure_started()
            if self._is_function:
                return _json(ok=True)
            await self._reconfigure(json.loads(user_config_json))
        except BaseException as error:
            return _json(ok=False, error=self._error or _traceback(error))
        return _json(ok=True)

    async def __serve_stop__(self, wait_loop_s: float, timeout_s: float) -> str:
        self._stopping = True
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max(0.0, float(timeout_s))
        step = max(0.01, float(wait_loop_s))
        while self._in_flight > 0 and loop.time() < deadline:
            await asyncio.sleep(min(step, max(0.0, deadline - loop.time())))
        error = None
        if not self._stopped and self._user is not None:
            self._stopped = True
            try:
                await self._stop_lifespan()
                finalizer = getattr(type(self._user), "__del__", None)
                if finalizer is not None:
                    await self._call(finalizer.__get__(self._user), (), {})
            except BaseException as e:
                error = _traceback(e)
        self._pool.shutdown(wait=False)
        return _json(ok=True, in_flight=self._in_flight, **({"error": error} if error else {}))

    # Requests --------------------------------------------------------------------------

    async def __serve_http__(self, method: str, path: str, query: bytes, headers: list, body: bytes,
                             root_path: str, request_id: str, client: str) -> tuple:
        self._in_flight += 1
        try:
            status, out, data = await _http.collect(
                self._http_response(method, path, query, headers, body, root_path, request_id, client))
        except BaseException as error:  # the user's error is the response
            status, out, data = _http.error_response(_traceback(error))
        finally:
            self._in_flight -= 1
        return status, _http.with_request_id(out, request_id), data

    async def __serve_http_stream__(self, method: str, path: str, query: bytes, headers: list, body: bytes,
                                    root_path: str, request_id: str, client: str):
        """`__serve_http__` sent as it is made. A response whose body is made with its head
        (a plain return, an ASGI body in one message) is one item, `(status, headers, body)`,
        so that it reaches the client whole or not at all; else `(status, headers)` at once,
        then each piece of the body. The request counts as in flight until the stream ends
        or is closed."""
        self._in_flight += 1
        events = self._http_response(method, path, query, headers, body, root_path, request_id, client)
        started = False
        try:
            async for event in events:
                if not started:
                    started = True
                    status, out = event[:2]
                    yield (status, _http.with_request_id(out, request_id)) + tuple(bytes(b) for b in event[2:])
                elif event:
                    yield bytes(event)
        except Exception as error:
            text = _traceback(error)
            if started:
                # Too late for an error response: the stream fails, and the proxy aborts the
                # connection so that the client sees the body cut short, as with Ray.
                print(f"Serve request {request_id} failed after its response started:\n{text}",
                      file=sys.stderr, flush=True)
                raise
            else:
                status, out, data = _http.error_response(text)
                yield status, _http.with_request_id(out, request_id), data
        finally:
            try:
                await events.aclose()
            finally:
                self._in_flight -= 1

    async def _http_response(self, method, path, query, headers, body, root_path, request_id, client):
        """The response to an HTTP request as it is made: (status, headers), then the body's
        chunks. The user's errors are raised."""
        await self._ensure_started()
        raw = [(bytes(k).lower(), bytes(v)) for k, v in headers]
        scope = _http.build_scope(method, path, query, raw, root_path, client)
        model_id = _http.header_value(raw, b"serve_multiplexed_model_id", b"serve-multiplexed-model-id")
        token = _context.set_request(_context.RequestContext(request_id, model_id, self._app_name,
                                                             scope["root_path"] or "/"))
        try:
            if self._asgi is not None:
                events = _http.stream_asgi(self._asgi, scope, body)
            else:
                events = self._respond(scope, body)
            async with aclosing(events):
                async for event in events:
                    yield event
        finally:
            _reset_request(token)

    async def _respond(self, scope, body: bytes):
        request = _http.build_request(scope, body)
        result = await self._call(self._method("__call__"), (request,), {})
        if _http.is_asgi_response(result):
            async with aclosing(_http.stream_asgi(result, scope, b"")) as events:
                async for event in events:
                    yield event
        elif inspect.isgenerator(result) or inspect.isasyncgen(result):
            async with aclosing(self._aiterate(result)) as values:
                yield 200, [(b"content-type", _http.TEXT_UTF8)]
                async for value in values:
                    yield _http.chunk_bytes(value)
        else:
            status, out, data = _http.encode(result)
            yield status, out, _http.LastChunk(data)

    async def handle_request(self, method_name: str, args: tuple, kwargs: dict, meta: dict):
        from oxray.object_ref import ObjectRef

        meta = meta or {}
        context = _context.RequestContext(meta.get("request_id", ""), meta.get("multiplexed_model_id") or "",
                                          self._app_name)
        self._in_flight += 1
        counted = True
        token = _context.set_request(context)
        try:
            await self._ensure_started()
            # Responses passed as arguments came as their ObjectRefs; their values are meant.
            args = tuple([await a if isinstance(a, ObjectRef) else a for a in args])
            kwargs = {k: (await v if isinstance(v, ObjectRef) else v) for k, v in kwargs.items()}
            method = self._method(method_name)
            if meta.get("stream"):
                counted = False
                return self._stream(method, args, kwargs, context)
            result = await self._call(method, args, kwargs)
            if inspect.isgenerator(result) or inspect.isasyncgen(result):
                raise TypeError(f"Method '{method_name}' returned a generator. You must use "
                                "`handle.options(stream=True)` to call generators on a deployment.")
            return result
        finally:
            _context.reset_request(token)
            if counted:
                self._in_flight -= 1

    async def _stream(self, method, args, kwargs, context):
        """The values of a streaming call; the request counts as in flight until the last."""
        token = _context.set_request(context)
        try:
            if not (inspect.isgeneratorfunction(method) or inspect.isasyncgenfunction(method)):
                result = await self._call(method, args, kwargs)
                if not (inspect.isgenerator(result) or inspect.isasyncgen(result)):
                    raise TypeError(f"Method '{getattr(method, '__name__', method)}' did not return a generator; "
                                    "call it without `stream=True`.")
            else:
                result = method(*args, **kwargs)
            async for value in self._aiterate(result):
                yield value
        finally:
            self._in_flight -= 1
            _reset_request(token)
