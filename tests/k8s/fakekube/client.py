"""A small Kubernetes HTTP client for the kubelet and the tests: requests over kept-alive
connections, watch streams, and an informer (list, then watch, relisting on 410)."""

import http.client
import json
import threading
import time
from urllib.parse import urlencode, urlsplit

PATCH_CONTENT_TYPES = {
    "json": "application/json-patch+json",
    "merge": "application/merge-patch+json",
    "strategic": "application/strategic-merge-patch+json",
    "apply": "application/apply-patch+yaml",
}


class KubeError(Exception):
    def __init__(self, code, status):
        self.code = code
        self.status = status if isinstance(status, dict) else {"message": str(status)}
        self.reason = self.status.get("reason", "")
        super().__init__(f"{code} {self.reason}: {self.status.get('message', '')}")


def resource_path(api_version, plural, namespace=None, name=None, sub=None):
    """/api/v1/namespaces/ns/pods/name/status and friends."""
    base = f"/api/{api_version}" if "/" not in api_version else f"/apis/{api_version}"
    parts = [base]
    if namespace:
        parts.append(f"namespaces/{namespace}")
    parts.append(plural)
    if name:
        parts.append(name)
    if sub:
        parts.append(sub)
    return "/".join(parts)


def wait_until(predicate, timeout=10.0, interval=0.05, what="condition"):
    """Polls predicate until it returns something truthy; returns that, or raises."""
    deadline = time.monotonic() + timeout
    last_error = None
    while True:
        try:
            value = predicate()
            if value:
                return value
        except Exception as e:  # noqa: BLE001 - the predicate may fail until it holds
            last_error = e
        if time.monotonic() >= deadline:
            raise TimeoutError(f"timed out after {timeout}s waiting for {what}"
                               + (f" (last error: {last_error})" if last_error else ""))
        time.sleep(interval)


class Watch:
    """An open watch: iterate for event dicts; close() ends it from any thread."""

    def __init__(self, conn, response):
        self.conn, self.response = conn, response
        self.code = response.status

    def __iter__(self):
        try:
            while True:
                line = self.response.readline()
                if not line:
                    return
                line = line.strip()
                if line:
                    yield json.loads(line)
        except (OSError, ValueError, http.client.HTTPException, AttributeError):
            return

    def close(self):
        try:
            if self.conn.sock is not None:
                self.conn.sock.shutdown(2)
        except OSError:
            pass
        self.conn.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class KubeClient:
    def __init__(self, url, timeout=30.0):
        u = urlsplit(url)
        self.host, self.port = u.hostname, u.port or 80
        self.timeout = timeout
        self.url = url
        self._local = threading.local()

    def _conn(self):
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._local.conn = http.client.HTTPConnection(self.host, self.port,
                                                                 timeout=self.timeout)
        return conn

    def raw(self, method, path, body=None, content_type="application/json", query=None,
            headers=None):
        """Returns (status code, decoded body); never raises for HTTP errors."""
        if query:
            path += ("&" if "?" in path else "?") + urlencode(
                {k: v for k, v in query.items() if v is not None})
        data = None
        if body is not None:
            data = body if isinstance(body, (bytes, str)) else json.dumps(body)
            data = data.encode() if isinstance(data, str) else data
        hdrs = {"Accept": "application/json"}
        if data is not None:
            hdrs["Content-Type"] = content_type
        hdrs.update(headers or {})
        for attempt in range(2):
            conn = self._conn()
            try:
                conn.request(method, path, body=data, headers=hdrs)
                resp = conn.getresponse()
                payload = resp.read()
                break
            except (http.client.HTTPException, ConnectionError, BrokenPipeError):
                # A kept-alive connection the server closed: retry once on a new one.
                conn.close()
                self._local.conn = None
                if attempt:
                    raise
        try:
            decoded = json.loads(payload) if payload else None
        except ValueError:
            decoded = payload.decode(errors="replace")
        return resp.status, decoded

    def request(self, method, path, body=None, content_type="application/json", query=None):
        code, obj = self.raw(method, path, body, content_type, query)
        if code >= 400:
            raise KubeError(code, obj)
        return obj

    def get(self, path, **query):
        return self.request("GET", path, query=query)

    def get_or_none(self, path):
        code, obj = self.raw("GET", path)
        if code == 404:
            return None
        if code >= 400:
            raise KubeError(code, obj)
        return obj

    def list(self, path, **query):
        return self.request("GET", path, query=query)

    def create(self, path, obj, **query):
        return self.request("POST", path, obj, query=query)

    def replace(self, path, obj, **query):
        return self.request("PUT", path, obj, query=query)

    def patch(self, path, body, kind="merge", **query):
        return self.request("PATCH", path, body, PATCH_CONTENT_TYPES[kind], query=query)

    def delete(self, path, body=None, **query):
        return self.request("DELETE", path, body, query=query)

    def watch(self, path, timeout=None, **query):
        query = dict(query, watch="true")
        conn = http.client.HTTPConnection(self.host, self.port, timeout=timeout)
        conn.request("GET", path + "?" + urlencode(query), headers={"Accept": "application/json"})
        resp = conn.getresponse()
        if resp.status != 200:
            payload = resp.read()
            conn.close()
            try:
                raise KubeError(resp.status, json.loads(payload))
            except ValueError:
                raise KubeError(resp.status, payload.decode(errors="replace"))
        return Watch(conn, resp)


class Informer:
    """Keeps a cache of one resource's objects (list, then watch; relist on 410 or a broken
    stream) and calls on_change(type, obj) after each change, from its own thread."""

    def __init__(self, client, path, on_change=None, **query):
        self.client, self.path, self.query = client, path, query
        self.on_change = on_change or (lambda *_: None)
        self.cache = {}
        self.lock = threading.Lock()
        self.synced = threading.Event()
        self._stop = threading.Event()
        self._watch = None
        self._thread = threading.Thread(target=self._run, name=f"informer{path}", daemon=True)

    def start(self):
        self._thread.start()
        return self

    def stop(self):
        self._stop.set()
        w = self._watch
        if w is not None:
            w.close()
        self._thread.join(timeout=5)

    def items(self):
        with self.lock:
            return list(self.cache.values())

    @staticmethod
    def key(obj):
        return (obj["metadata"].get("namespace"), obj["metadata"]["name"])

    def _run(self):
        while not self._stop.is_set():
            try:
                rv = self._relist()
                while rv and not self._stop.is_set():
                    rv = self._follow(rv)
            except Exception:  # noqa: BLE001 - retried: the server may be restarting
                pass
            self._stop.wait(0.2)

    def _relist(self):
        listing = self.client.list(self.path, **self.query)
        fresh = {self.key(o): o for o in listing.get("items") or []}
        with self.lock:
            gone = [o for k, o in self.cache.items() if k not in fresh]
            self.cache = fresh
        for obj in gone:
            self.on_change("DELETED", obj)
        for obj in fresh.values():
            self.on_change("SYNC", obj)
        self.synced.set()
        return listing["metadata"]["resourceVersion"]

    def _follow(self, rv):
        """Follows one watch; returns the version to resume from, or None to relist."""
        self._watch = self.client.watch(self.path, resourceVersion=rv, allowWatchBookmarks="true",
                                        timeoutSeconds=300, **self.query)
        if self._stop.is_set():
            self._watch.close()
            return None
        with self._watch as w:
            for ev in w:
                obj = ev.get("object") or {}
                if ev.get("type") == "ERROR":
                    return None
                rv = obj.get("metadata", {}).get("resourceVersion", rv)
                if ev.get("type") == "BOOKMARK":
                    continue
                with self.lock:
                    if ev["type"] == "DELETED":
                        self.cache.pop(self.key(obj), None)
                    else:
                        self.cache[self.key(obj)] = obj
                self.on_change(ev["type"], obj)
        return None if self._stop.is_set() else rv
