"""DeploymentHandle, DeploymentResponse and DeploymentResponseGenerator, as Ray Serve's."""

import asyncio
import concurrent.futures
import threading
import time
from typing import Any, Dict, Optional

from oxray.serve import _router
from oxray.serve.exceptions import RayServeException, RequestCancelledError

_UNSET = object()


def _in_running_loop() -> bool:
    try:
        asyncio.get_running_loop()
        return True
    except RuntimeError:
        return False


def _translate(request: "_router.Request", error: BaseException) -> BaseException:
    """What the caller sees for an error of the call itself (not the user's)."""
    from oxray import exceptions

    if isinstance(error, exceptions.TaskCancelledError) or (request.cancelled and not isinstance(error, RayServeException)):
        return RequestCancelledError(request.meta.get("request_id"))
    if isinstance(error, exceptions.RayActorError) and request.router is not None:
        request.router.replica_failed(request.replica)
    return error


class _Base:
    def __init__(self, request: "_router.Request"):
        self._request = request

    @property
    def request_id(self) -> str:
        return self._request.meta["request_id"]

    def cancel(self) -> None:
        """Cancels the request: dropped if still queued here, else its call is interrupted."""
        request = self._request
        if request.cancelled:
            return
        request.cancelled = True
        if request.router is not None and request.router.cancel(request):
            return
        if not request.future.done():
            request.fail(RequestCancelledError(request.meta.get("request_id")))
            return
        try:
            sent = request.future.result()
        except BaseException:  # it never went: nothing to stop
            return
        import oxray

        try:
            oxray.cancel(sent.completed() if request.stream else sent)
        except Exception:  # it ended already
            pass

    def cancelled(self) -> bool:
        return self._request.cancelled

    def __reduce__(self):
        raise RayServeException("DeploymentResponse objects cannot be serialized: pass a response as a top-level "
                                "argument of a handle call (it is resolved first), not inside another object.")


class DeploymentResponse(_Base):
    """The result of `handle.remote()`: `.result()` blocks, `await` does not."""

    def _sent(self, timeout_s: Optional[float]):
        try:
            return self._request.future.result(timeout_s)
        except concurrent.futures.TimeoutError:
            raise TimeoutError(f"Timed out waiting for request {self.request_id} to be assigned to a replica "
                               f"after {timeout_s}s.") from None

    def result(self, *, timeout_s: Optional[float] = None, _skip_asyncio_check: bool = False) -> Any:
        from oxray import exceptions
        from oxray._private import worker

        if not _skip_asyncio_check and _in_running_loop():
            raise RuntimeError("Sync methods should not be called from within an `asyncio` event loop. "
                               "Use `await response` instead.")
        start = time.monotonic()
        ref = self._sent(timeout_s)
        left = None if timeout_s is None else max(0.0, timeout_s - (time.monotonic() - start))
        try:
            return worker.get(ref, timeout=left)
        except exceptions.GetTimeoutError:
            raise TimeoutError(f"Timed out waiting for the result of request {self.request_id} "
                               f"after {timeout_s}s.") from None
        except (exceptions.TaskCancelledError, exceptions.RayActorError) as error:
            raise _translate(self._request, error) from None

    async def _result_async(self) -> Any:
        from oxray import exceptions

        ref = await asyncio.wrap_future(self._request.future)
        try:
            return await ref
        except (exceptions.TaskCancelledError, exceptions.RayActorError) as error:
            raise _translate(self._request, error) from None
        except asyncio.CancelledError:
            self.cancel()
            raise

    def __await__(self):
        return self._result_async().__await__()

    async def _to_object_ref(self):
        return await asyncio.wrap_future(self._request.future)

    def _to_object_ref_sync(self, _timeout_s: Optional[float] = None, _allow_running_in_asyncio_loop: bool = False):
        if not _allow_running_in_asyncio_loop and _in_running_loop():
            raise RuntimeError("Sync methods should not be called from within an `asyncio` event loop.")
        return self._sent(_timeout_s)


class DeploymentResponseGenerator(_Base):
    """The values a streaming call yields, as they come (`for` or `async for`)."""

    def __init__(self, request):
        super().__init__(request)
        self._gen = None

    def result(self, *args, **kwargs):
        raise TypeError("`DeploymentResponseGenerator` doesn't support `.result()`; iterate over it instead.")

    def __await__(self):
        raise TypeError("`DeploymentResponseGenerator` cannot be awaited directly. Use `async for` or "
                        "`await response.__anext__()` instead.")

    def __iter__(self):
        return self

    def __next__(self):
        from oxray import exceptions
        from oxray._private import worker

        if _in_running_loop():
            raise RuntimeError("Sync methods should not be called from within an `asyncio` event loop. "
                               "Use `async for` instead.")
        if self._gen is None:
            self._gen = self._request.future.result()
        ref = next(self._gen)
        try:
            return worker.get(ref)
        except (exceptions.TaskCancelledError, exceptions.RayActorError) as error:
            raise _translate(self._request, error) from None

    def __aiter__(self):
        return self

    async def __anext__(self):
        from oxray import exceptions

        if self._gen is None:
            self._gen = await asyncio.wrap_future(self._request.future)
        ref = await self._gen.__anext__()
        try:
            return await ref
        except (exceptions.TaskCancelledError, exceptions.RayActorError) as error:
            raise _translate(self._request, error) from None


class DeploymentHandle:
    """Calls a deployment from anywhere (driver, task, actor, replica); pickles as its names."""

    def __init__(self, deployment_name: str, app_name: str, *, method_name: str = "__call__",
                 multiplexed_model_id: str = "", stream: bool = False, session_id: Optional[str] = None):
        self._deployment_name = deployment_name
        self._app_name = app_name
        self._method_name = method_name
        self._multiplexed_model_id = multiplexed_model_id
        self._stream = stream
        self._session_id = session_id

    @property
    def deployment_name(self) -> str:
        return self._deployment_name

    @property
    def app_name(self) -> str:
        return self._app_name

    @property
    def handle_options(self) -> Dict[str, Any]:
        return {"method_name": self._method_name, "multiplexed_model_id": self._multiplexed_model_id,
                "stream": self._stream, "session_id": self._session_id}

    def options(self, *, method_name=_UNSET, multiplexed_model_id=_UNSET, stream=_UNSET, session_id=_UNSET,
                use_new_handle_api=_UNSET, _prefer_local_routing=_UNSET, **unknown) -> "DeploymentHandle":
        if unknown:
            raise TypeError(f"DeploymentHandle.options() got unknown option(s) {sorted(unknown)}")
        pick = lambda given, current: current if given is _UNSET else given  # noqa: E731
        if stream is not _UNSET and not isinstance(stream, bool):
            raise TypeError(f"stream must be a bool, got {stream!r}")
        if method_name is not _UNSET and (not isinstance(method_name, str) or not method_name):
            raise TypeError(f"method_name must be a non-empty string, got {method_name!r}")
        if multiplexed_model_id is not _UNSET and not isinstance(multiplexed_model_id, str):
            raise TypeError(f"multiplexed_model_id must be a string, got {multiplexed_model_id!r}")
        return DeploymentHandle(self._deployment_name, self._app_name,
                                method_name=pick(method_name, self._method_name),
                                multiplexed_model_id=pick(multiplexed_model_id, self._multiplexed_model_id),
                                stream=pick(stream, self._stream), session_id=pick(session_id, self._session_id))

    def __getattr__(self, name: str):
        if name.startswith("_"):
            raise AttributeError(name)
        return self.options(method_name=name)

    def remote(self, *args, **kwargs):
        """Sends the call; returns at once (the call may wait in this process's queue)."""
        from oxray.serve import _context

        for value in (*args, *kwargs.values()):
            if isinstance(value, DeploymentResponseGenerator):
                raise TypeError("A DeploymentResponseGenerator cannot be passed to another handle call.")
        model_id = self._multiplexed_model_id
        if not model_id and _context.current_replica() is not None:
            # A call made while serving a multiplexed request keeps its model, as in Ray.
            model_id = _context.current_request().multiplexed_model_id
        meta = {"request_id": _router.new_request_id(), "multiplexed_model_id": model_id or "",
                "stream": self._stream}
        if self._session_id:
            meta["session_id"] = self._session_id
        request = _router.Request(self._method_name, args, kwargs, meta)
        router = _router.router_for(self._app_name, self._deployment_name)
        pending = [v for v in (*args, *kwargs.values()) if isinstance(v, DeploymentResponse)]
        if pending:
            _submit_when_resolved(router, request, pending)
        else:
            router.submit(request)
        return DeploymentResponseGenerator(request) if self._stream else DeploymentResponse(request)

    def __reduce__(self):
        return (_restore_handle, (self._deployment_name, self._app_name, self._method_name,
                                  self._multiplexed_model_id, self._stream, self._session_id))

    def __repr__(self):
        return f"DeploymentHandle(deployment='{self._deployment_name}', app='{self._app_name}')"

    def __eq__(self, other):
        return (isinstance(other, DeploymentHandle) and other._deployment_name == self._deployment_name
                and other._app_name == self._app_name and other.handle_options == self.handle_options)

    def __hash__(self):
        return hash((self._deployment_name, self._app_name, self._method_name))


def _restore_handle(deployment_name, app_name, method_name, model_id, stream, session_id):
    return DeploymentHandle(deployment_name, app_name, method_name=method_name, multiplexed_model_id=model_id,
                            stream=stream, session_id=session_id)


def _submit_when_resolved(router, request, pending) -> None:
    """Responses passed as arguments go as their ObjectRefs (the replica reads their values),
    once each was sent; the request is submitted then, in order with no thread blocked."""
    left = [len(pending)]
    lock = threading.Lock()

    def substitute(value):
        if isinstance(value, DeploymentResponse):
            return value._request.future.result()
        return value

    def one_done(_future):
        with lock:
            left[0] -= 1
            if left[0]:
                return
        for response in pending:
            error = response._request.future.exception()
            if error is not None:
                request.fail(error)
                return
        request.args = tuple(substitute(a) for a in request.args)
        request.kwargs = {k: substitute(v) for k, v in request.kwargs.items()}
        router.submit(request)

    for response in pending:
        response._request.future.add_done_callback(one_done)
