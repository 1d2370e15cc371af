"""HTTP inside a replica: the ASGI scope of a request the proxy forwarded, the Request a
`__call__` deployment receives, the ASGI app of an ingress deployment run on it, and the
mapping of return values to responses (Ray's rules)."""

import json
from typing import Any, Dict, List, Optional, Tuple

Headers = List[Tuple[bytes, bytes]]

TEXT = b"text/plain"
TEXT_UTF8 = b"text/plain; charset=utf-8"
JSON = b"application/json"


def build_scope(method: str, path: str, query: bytes, headers: Headers, root_path: str,
                client: str = "") -> Dict[str, Any]:
    """An ASGI http scope as Ray's proxy makes it: `path` is the full path, `root_path` the
    route prefix (empty for "/")."""
    host, _, port = (client or "").rpartition(":")
    server_host = "127.0.0.1"
    server_port = 8000
    for name, value in headers:
        if name == b"host":
            h, _, p = value.decode("latin-1").rpartition(":")
            if p.isdigit():
                server_host, server_port = h or server_host, int(p)
    return {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": "1.1",
        "method": method.upper(),
        "scheme": "http",
        "path": path,
        "raw_path": path.encode("utf-8"),
        "query_string": query or b"",
        "root_path": "" if root_path in (None, "/") else root_path.rstrip("/"),
        "headers": [(bytes(k).lower(), bytes(v)) for k, v in headers],
        "client": (host, int(port)) if port.isdigit() else None,
        "server": (server_host, server_port),
        "extensions": {},
        "state": {},
    }


class _Receive:
    """The request's body as one message; then a disconnect, once the response is done (an
    earlier one would cancel a streaming response)."""

    def __init__(self, body: bytes):
        self._body = body
        self._sent = False
        self._finished = None

    def finish(self):
        if self._finished is not None:
            self._finished.set()

    async def __call__(self):
        import asyncio

        if not self._sent:
            self._sent = True
            return {"type": "http.request", "body": self._body, "more_body": False}
        if self._finished is None:
            self._finished = asyncio.Event()
        await self._finished.wait()
        return {"type": "http.disconnect"}


_END = object()


class LastChunk(bytes):
    """The body's last piece: after it the response is whole (what runs after it, such as
    background tasks, sends nothing more). A response whose last piece came with its head
    is one event, `(status, headers, LastChunk)`."""


async def stream_asgi(app, scope: Dict[str, Any], body: bytes):
    """Runs an ASGI app on one request: yields (status, headers) once it starts its response,
    then each body chunk as it sends it. The stream ends when the app returns, not at its
    last body message: background tasks run after it and still belong to the request.
    Closing the stream cancels the app."""
    import asyncio

    receive = _Receive(body)
    messages: asyncio.Queue = asyncio.Queue()

    async def send(message):
        kind = message["type"]
        if kind == "http.response.start":
            messages.put_nowait((int(message["status"]),
                                 [(bytes(k), bytes(v)) for k, v in message.get("headers") or []]))
        elif kind == "http.response.body":
            body = bytes(message.get("body") or b"")
            if message.get("more_body"):
                messages.put_nowait(body)
            else:
                messages.put_nowait(LastChunk(body))
                receive.finish()

    async def run():
        try:
            await app(scope, receive, send)
        finally:
            receive.finish()
            messages.put_nowait(_END)

    # A task of its own, so that the chunks go out while the app is still running.
    task = asyncio.get_running_loop().create_task(run())
    started = False
    try:
        while True:
            message = await messages.get()
            if message is _END:
                break
            if isinstance(message, tuple):
                if started:
                    continue
                started = True
                # A body sent in one message right after the head (a plain Response: its
                # sends never wait) is queued already: the response is whole. A stream's
                # head goes at once.
                following = None if messages.empty() else messages.get_nowait()
                if isinstance(following, LastChunk):
                    yield message + (following,)
                    continue
                yield message
                if following is None:
                    continue
                if following is _END:
                    break
                message = following
            elif not started:
                continue
            yield message
        await task
        if not started:
            raise RuntimeError("The ASGI app returned without starting a response.")
    finally:
        if not task.done():
            task.cancel()
            await asyncio.wait([task])
        if not task.cancelled():
            task.exception()  # raised above, or moot: never "exception was never retrieved"


async def collect(events) -> Tuple[int, Headers, bytes]:
    """A streamed response ((status, headers), then chunks; or one whole event) joined."""
    from contextlib import aclosing

    async with aclosing(events):
        first = await events.__anext__()
        status, headers = first[:2]
        chunks = list(first[2:]) + [chunk async for chunk in events]
    return status, headers, b"".join(bytes(c) for c in chunks)


async def run_asgi(app, scope: Dict[str, Any], body: bytes) -> Tuple[int, Headers, bytes]:
    """Runs an ASGI app on one request; collects its response."""
    return await collect(stream_asgi(app, scope, body))


class _Headers:
    """Case-insensitive, read-only request headers (Starlette's Headers' reading methods)."""

    def __init__(self, raw: Headers):
        self.raw = [(k.lower(), v) for k, v in raw]

    def get(self, key: str, default=None):
        key = key.lower().encode("latin-1")
        for k, v in self.raw:
            if k == key:
                return v.decode("latin-1")
        return default

    def getlist(self, key: str) -> List[str]:
        key = key.lower().encode("latin-1")
        return [v.decode("latin-1") for k, v in self.raw if k == key]

    def __getitem__(self, key: str) -> str:
        value = self.get(key)
        if value is None:
            raise KeyError(key)
        return value

    def __contains__(self, key) -> bool:
        return self.get(key) is not None

    def keys(self):
        return [k.decode("latin-1") for k, _ in self.raw]

    def values(self):
        return [v.decode("latin-1") for _, v in self.raw]

    def items(self):
        return [(k.decode("latin-1"), v.decode("latin-1")) for k, v in self.raw]

    def __iter__(self):
        return iter(self.keys())

    def __len__(self):
        return len(self.raw)

    def __repr__(self):
        return f"Headers({dict(self.items())!r})"


class _QueryParams(dict):
    """The query's parameters: the last value of each key, and `getlist` for all."""

    def __init__(self, query: str):
        from urllib.parse import parse_qsl

        self._pairs = parse_qsl(query, keep_blank_values=True)
        super().__init__(self._pairs)

    def getlist(self, key: str) -> List[str]:
        return [v for k, v in self._pairs if k == key]

    def multi_items(self):
        return list(self._pairs)


class _URL:
    def __init__(self, scope: Dict[str, Any]):
        self.scheme = scope["scheme"]
        host, port = scope.get("server") or ("127.0.0.1", 8000)
        self.hostname = host
        self.port = port
        self.netloc = f"{host}:{port}"
        self.path = scope["path"]
        self.query = scope["query_string"].decode("latin-1")

    def __str__(self):
        return f"{self.scheme}://{self.netloc}{self.path}" + (f"?{self.query}" if self.query else "")

    def __repr__(self):
        return f"URL({str(self)!r})"


class Request:
    """What a `__call__` deployment receives when Starlette is not installed: the parts of
    `starlette.requests.Request` user code reads."""

    def __init__(self, scope: Dict[str, Any], receive):
        self.scope = scope
        self._receive = receive
        self._body: Optional[bytes] = None
        self.method = scope["method"]
        self.url = _URL(scope)
        self.headers = _Headers(scope["headers"])
        self.query_params = _QueryParams(self.url.query)
        self.path_params: Dict[str, Any] = dict(scope.get("path_params") or {})
        self.state = type("State", (), {})()

    @property
    def client(self):
        return scope_client(self.scope)

    @property
    def cookies(self) -> Dict[str, str]:
        from http.cookies import SimpleCookie

        cookie = SimpleCookie()
        cookie.load(self.headers.get("cookie", ""))
        return {k: m.value for k, m in cookie.items()}

    async def body(self) -> bytes:
        if self._body is None:
            chunks = []
            while True:
                message = await self._receive()
                if message["type"] != "http.request":
                    break
                chunks.append(message.get("body") or b"")
                if not message.get("more_body"):
                    break
            self._body = b"".join(chunks)
        return self._body

    async def json(self) -> Any:
        return json.loads(await self.body())

    async def stream(self):
        yield await self.body()


def scope_client(scope):
    client = scope.get("client")
    if client is None:
        return None
    return type("Address", (), {"host": client[0], "port": client[1]})()


def build_request(scope: Dict[str, Any], body: bytes):
    """A starlette Request when Starlette is installed, else the small one above."""
    receive = _Receive(body)
    try:
        from starlette.requests import Request as StarletteRequest
    except ImportError:
        return Request(scope, receive)
    return StarletteRequest(scope, receive)


def _default(value):
    """JSON for what json cannot write itself: numpy values, pydantic models, dataclasses."""
    if hasattr(value, "model_dump"):
        return value.model_dump()
    if hasattr(value, "dict") and callable(value.dict) and type(value).__module__.startswith("pydantic"):
        return value.dict()
    if hasattr(value, "tolist"):
        return value.tolist()
    if hasattr(value, "item"):
        return value.item()
    import dataclasses

    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    if isinstance(value, (set, frozenset)):
        return list(value)
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


def is_asgi_response(value) -> bool:
    """A Starlette (or FastAPI) Response, told by its type's module so Starlette is never
    imported when absent."""
    for cls in type(value).__mro__:
        if cls.__module__.startswith("starlette.") and cls.__name__ == "Response":
            return True
    return False


def encode(value) -> Tuple[int, Headers, bytes]:
    """A plain return value as a response (Ray's rules)."""
    if value is None:
        return 200, [(b"content-type", TEXT)], b""
    if isinstance(value, (bytes, bytearray, memoryview)):
        return 200, [(b"content-type", TEXT)], bytes(value)
    if isinstance(value, str):
        return 200, [(b"content-type", TEXT_UTF8)], value.encode("utf-8")
    body = json.dumps(value, default=_default, separators=(",", ":")).encode()
    return 200, [(b"content-type", JSON)], body


def chunk_bytes(chunk) -> bytes:
    if isinstance(chunk, (bytes, bytearray, memoryview)):
        return bytes(chunk)
    if isinstance(chunk, str):
        return chunk.encode("utf-8")
    return json.dumps(chunk, default=_default, separators=(",", ":")).encode()


def error_response(text: str) -> Tuple[int, Headers, bytes]:
    return 500, [(b"content-type", TEXT_UTF8)], text.encode("utf-8", errors="replace")


def with_request_id(headers: Headers, request_id: str) -> Headers:
    if request_id and not any(k.lower() == b"x-request-id" for k, _ in headers):
        headers = list(headers) + [(b"x-request-id", request_id.encode("latin-1"))]
    return headers


def header_value(headers: Headers, *names: bytes) -> str:
    for k, v in headers:
        if k.lower() in names:
            return v.decode("latin-1")
    return ""
