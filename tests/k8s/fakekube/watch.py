"""Watch streams: chunked JSON lines of ADDED/MODIFIED/DELETED/BOOKMARK/ERROR events."""

import json
import select
import socket
import time

from . import discovery
from .errors import ApiError, bad_request, status_object

# How often an idle watch checks that its client is still there.
_POLL = 0.5


def _client_gone(conn):
    try:
        readable, _, _ = select.select([conn], [], [], 0)
        if readable:
            return conn.recv(1, socket.MSG_PEEK) == b""
    except (OSError, ValueError):
        return True
    return False


def _transition(event, match):
    """The event type a watcher with this selector sees, or None."""
    now = event.type != "DELETED" and match(event.obj)
    before = event.old is not None and match(event.old)
    if event.type == "ADDED":
        return "ADDED" if now else None
    if event.type == "DELETED":
        return "DELETED" if match(event.obj) or before else None
    if now:
        return "MODIFIED" if before else "ADDED"
    return "DELETED" if before else None


def stream_watch(handler, route, q, match, form):
    api = handler.server.api
    store, rt, version = api.store, route.rt, route.version
    rv_param = q.get("resourceVersion", "")
    initial = q.get("sendInitialEvents", "").lower() == "true"
    bookmarks = q.get("allowWatchBookmarks", "").lower() in ("true", "1")
    try:
        timeout = float(q["timeoutSeconds"]) if q.get("timeoutSeconds") else None
        start = int(rv_param) if rv_param not in ("", "0") else None
    except ValueError:
        raise bad_request(f"invalid resourceVersion or timeoutSeconds: {rv_param!r}")
    if initial and q.get("resourceVersionMatch") != "NotOlderThan":
        raise ApiError(422, "resourceVersionMatch: Forbidden: sendInitialEvents requires "
                       "setting resourceVersionMatch to NotOlderThan", "Invalid")
    deadline = None if timeout is None else time.monotonic() + timeout
    include = q.get("includeObject", "Metadata")

    handler.send_response(200)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Transfer-Encoding", "chunked")
    handler.send_header("Cache-Control", "no-cache, private")
    handler.end_headers()
    handler.streaming = True

    def send(type_, obj):
        if type_ in ("ADDED", "MODIFIED", "DELETED"):
            if form == "table":
                obj = discovery.table(rt, version, [obj], include)
            elif form == "meta":
                obj = discovery.partial(obj)
        line = json.dumps({"type": type_, "object": obj}, separators=(",", ":")).encode() + b"\n"
        handler.wfile.write(f"{len(line):x}\r\n".encode() + line + b"\r\n")
        handler.wfile.flush()

    def bookmark(rv, annotations=None):
        meta = {"resourceVersion": str(rv)}
        if annotations:
            meta["annotations"] = annotations
        send("BOOKMARK", {"kind": rt.kind, "apiVersion": rt.api_version(version),
                          "metadata": meta})

    if start is None or initial:
        objs, last = store.current(rt)
        if start is not None and initial:
            last = max(last, start)
        for obj in sorted(objs, key=lambda o: (o["metadata"].get("namespace") or "",
                                               o["metadata"]["name"])):
            if match(obj):
                send("ADDED", store.view(rt, version, obj))
        if initial and bookmarks:
            bookmark(last, {"k8s.io/initial-events-end": "true"})
    else:
        last = start
    last_bookmark = time.monotonic()
    while True:
        events = store.events_after(last)
        if events is None:
            send("ERROR", status_object(410, "Expired", f"too old resource version: {last} "
                                        f"({store.compacted + 1})"))
            break
        for event in events:
            if event.key == rt.key:
                kind = _transition(event, match)
                if kind:
                    send(kind, store.view(rt, version, event.obj))
            last = event.rv
        now = time.monotonic()
        if deadline is not None and now >= deadline:
            break
        if store.closed or _client_gone(handler.connection):
            handler.close_connection = True
            return
        if bookmarks and now - last_bookmark >= api.bookmark_interval:
            bookmark(last)
            last_bookmark = now
        wait = _POLL if deadline is None else max(0.0, min(_POLL, deadline - now))
        store.wait(last, wait)
    handler.wfile.write(b"0\r\n\r\n")
    handler.wfile.flush()
