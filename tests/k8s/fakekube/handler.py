"""HTTP request handling: URL routing onto resources, bodies, query parameters, errors."""

import json
import socket
import sys
import traceback
from http.server import BaseHTTPRequestHandler
from urllib.parse import parse_qs, unquote, urlsplit

import yaml

from . import discovery
from .errors import REASONS, ApiError, bad_request, status_object
from .selection import fields_match, labels_match, parse_field_selector, parse_label_selector
from .watch import stream_watch

PATCH_TYPES = {
    "application/json-patch+json": "json",
    "application/merge-patch+json": "merge",
    "application/strategic-merge-patch+json": "strategic",
    "application/apply-patch+yaml": "apply",
    "application/apply-patch+cbor": None,
}


class _YamlLoader(yaml.SafeLoader):
    """Safe YAML without timestamp parsing: timestamps stay strings, as JSON has them."""


_YamlLoader.yaml_implicit_resolvers = {
    ch: [(tag, rx) for tag, rx in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for ch, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()}


def _not_found_path():
    return ApiError(404, "the server could not find the requested resource", "NotFound",
                    details={})


def _flag(value):
    return str(value).lower() in ("true", "1")


class Route:
    __slots__ = ("rt", "version", "ns", "name", "sub", "watch")

    def __init__(self, rt, version, ns, name, sub, watch):
        self.rt, self.version, self.ns, self.name, self.sub, self.watch = \
            rt, version, ns, name, sub, watch


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "fakekube"
    sys_version = ""

    def log_message(self, format, *args):  # noqa: A002 - the base class's signature
        api = self.server.api
        if api.log_path:
            api.log("%s %s" % (self.address_string(), format % args))

    def setup(self):
        super().setup()
        # Headers and body go out in separate writes; without this, Nagle's algorithm and
        # delayed ACKs add 40 ms to every response on a kept-alive connection.
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.server.api.track(self.connection, True)

    def finish(self):
        try:
            super().finish()
        finally:
            self.server.api.track(self.connection, False)

    def do_GET(self):
        self._handle("GET")

    def do_POST(self):
        self._handle("POST")

    def do_PUT(self):
        self._handle("PUT")

    def do_PATCH(self):
        self._handle("PATCH")

    def do_DELETE(self):
        self._handle("DELETE")

    def do_HEAD(self):
        self._read_body()
        self.send_error(405)

    do_OPTIONS = do_HEAD

    def send_error(self, code, message=None, explain=None):
        """Protocol errors (bad request lines, unknown methods) as Status objects too."""
        self.close_connection = True
        try:
            text = message or self.responses.get(code, ("error",))[0]
            data = json.dumps(status_object(code, REASONS.get(code, "Unknown"), text)).encode()
            self.send_response(code, message)
            self.send_header("Content-Type", "application/json")
            self.send_header("Connection", "close")
            if self.command != "HEAD" and code >= 200 and code not in (204, 304):
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
            else:
                self.end_headers()
        except OSError:
            pass

    # --- plumbing ------------------------------------------------------------------------

    def _handle(self, method):
        self.streaming = False
        try:
            raw = self._read_body()
            self._route(method, raw)
        except ApiError as e:
            if not self.streaming:
                self.send_json(e.code, e.status())
            else:
                self.close_connection = True
        except (BrokenPipeError, ConnectionResetError, TimeoutError):
            self.close_connection = True
        except Exception:  # noqa: BLE001 - a bug here must not kill the connection thread
            traceback.print_exc(file=sys.stderr)
            if self.streaming:
                self.close_connection = True
            else:
                try:
                    self.send_json(500, status_object(500, "InternalError",
                                                      "internal error in the fake API server"))
                except OSError:
                    self.close_connection = True

    def _read_body(self):
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            chunks = []
            while True:
                line = self.rfile.readline(65537)
                try:
                    size = int(line.split(b";")[0].strip() or b"0", 16)
                except ValueError:
                    self.close_connection = True
                    raise bad_request("malformed chunked body")
                if size == 0:
                    while self.rfile.readline(65537) not in (b"\r\n", b"\n", b""):
                        pass
                    return b"".join(chunks)
                chunks.append(self.rfile.read(size))
                self.rfile.readline(65537)
        length = self.headers.get("Content-Length")
        if not length:
            return b""
        try:
            n = int(length)
        except ValueError:
            self.close_connection = True
            raise bad_request("invalid Content-Length")
        return self.rfile.read(n) if n > 0 else b""

    def send_json(self, code, obj):
        data = json.dumps(obj, separators=(",", ":")).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Cache-Control", "no-cache, private")
        self.end_headers()
        self.wfile.write(data)

    def _decode(self, raw, content_type):
        if "protobuf" in content_type or "cbor" in content_type:
            # Only kubectl's typed generators (`kubectl create configmap ...`) send protobuf;
            # `kubectl apply -f` and `create -f` send JSON.
            raise ApiError(415, "the body of the request was in an unknown format - accepted "
                           "media types include: application/json, application/yaml",
                           "UnsupportedMediaType")
        if not raw.strip():
            raise bad_request("the body of the request was empty")
        try:
            return json.loads(raw)
        except ValueError:
            pass
        if "yaml" in content_type:
            try:
                doc = yaml.load(raw.decode(), Loader=_YamlLoader)  # noqa: S506 - safe loader
                # Tagged YAML (!!binary, !!set) has no JSON form.
                return json.loads(json.dumps(doc))
            except (yaml.YAMLError, UnicodeDecodeError, TypeError, ValueError) as e:
                raise bad_request(f"error decoding YAML: {str(e).splitlines()[0]}")
        raise bad_request("the body of the request was in an unknown format: "
                          "expected JSON")

    # --- routing -------------------------------------------------------------------------

    def _route(self, method, raw):
        api = self.server.api
        url = urlsplit(self.path)
        q = {k: v[0] for k, v in parse_qs(url.query, keep_blank_values=True).items()}
        segs = [unquote(s) for s in url.path.split("/") if s]
        if not segs:
            return self.send_json(200, {"paths": ["/api", "/api/v1", "/apis", "/version"]})
        head = segs[0]
        if head in ("healthz", "livez", "readyz"):
            data = b"ok"
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", "2")
            self.end_headers()
            return self.wfile.write(data)
        if method != "GET" and head in ("version", "openapi") or (
                method != "GET" and len(segs) <= (2 if head == "api" else 3)
                and head in ("api", "apis")):
            raise ApiError(405, "the server does not allow this method on the requested "
                           "resource", "MethodNotAllowed")
        if head == "version":
            return self.send_json(200, discovery.VERSION)
        if head == "openapi":
            return self._openapi(segs)
        if head == "api":
            if len(segs) == 1:
                return self.send_json(200, discovery.api_versions(
                    f"127.0.0.1:{self.server.server_address[1]}"))
            group, version, rest = "", segs[1], segs[2:]
        elif head == "apis":
            if len(segs) == 1:
                return self.send_json(200, discovery.api_group_list(api.store))
            if len(segs) == 2:
                doc = discovery.api_group(api.store, segs[1])
                if doc is None:
                    raise _not_found_path()
                return self.send_json(200, doc)
            group, version, rest = segs[1], segs[2], segs[3:]
        else:
            raise _not_found_path()
        if not rest:
            doc = discovery.resource_list(api.store, group, version)
            if doc is None:
                raise _not_found_path()
            return self.send_json(200, doc)
        watch = False
        if rest[0] == "watch":
            watch, rest = True, rest[1:]
        if (len(rest) >= 3 and rest[0] == "namespaces"
                and not (len(rest) == 3 and rest[2] in ("status", "finalize"))):
            ns, rest = rest[1], rest[2:]
        else:
            ns = None
        if not rest or len(rest) > 3:
            raise _not_found_path()
        rt = api.store.find_type(group, version, rest[0])
        if rt is None or (ns is not None and not rt.namespaced):
            raise _not_found_path()
        name = rest[1] if len(rest) > 1 else None
        sub = rest[2] if len(rest) > 2 else None
        if rt.namespaced and name is not None and ns is None:
            raise _not_found_path()
        if sub not in (None, "status", "binding", "log") or (
                sub == "status" and not rt.has_status(version)) or (
                sub in ("binding", "log") and rt.key != ("", "pods")):
            raise _not_found_path()
        route = Route(rt, version, ns, name, sub, watch or _flag(q.get("watch", "")))
        return getattr(self, f"_{method.lower()}")(route, q, raw)

    def _openapi(self, segs):
        store = self.server.api.store
        if segs[1:2] != ["v3"]:
            raise _not_found_path()
        if len(segs) == 2:
            return self.send_json(200, discovery.openapi_index(store))
        rest = segs[2:]
        if rest[0] == "api" and len(rest) == 2:
            group, version = "", rest[1]
        elif rest[0] == "apis" and len(rest) == 3:
            group, version = rest[1], rest[2]
        else:
            raise _not_found_path()
        if discovery.resource_list(store, group, version) is None:
            raise _not_found_path()
        return self.send_json(200, discovery.openapi_document(store, group, version))

    # --- verbs ---------------------------------------------------------------------------

    def _matcher(self, route, q):
        labels = parse_label_selector(q.get("labelSelector", ""))
        fields = parse_field_selector(q.get("fieldSelector", ""))
        ns = route.ns if route.rt.namespaced else None
        if route.name is not None:
            fields = fields + [("metadata.name", "=", route.name)]

        def match(obj):
            meta = obj["metadata"]
            return ((ns is None or meta.get("namespace") == ns)
                    and labels_match(labels, meta.get("labels"))
                    and fields_match(fields, obj))
        return match

    def _form(self):
        """What the client asked objects to be rendered as: "table", "meta" or "object"."""
        for part in self.headers.get("Accept", "").split(","):
            if "g=meta.k8s.io" in part and "as=Table" in part:
                return "table"
            if "g=meta.k8s.io" in part and "as=PartialObjectMetadata" in part:
                return "meta"
            if "as=" not in part and ("json" in part or "*/*" in part):
                return "object"
        return "object"

    def _get(self, route, q, raw):
        api, rt = self.server.api, route.rt
        form = self._form()
        include = q.get("includeObject", "Metadata")
        if route.sub == "log":
            return self._pod_log(route, q)
        if route.watch:
            return stream_watch(self, route, q, self._matcher(route, q), form)
        if route.name is not None:
            obj = api.store.get(rt, route.version, route.ns, route.name)
            if form == "table":
                obj = discovery.table(rt, route.version, [obj], include)
            elif form == "meta":
                obj = discovery.partial(obj)
            return self.send_json(200, obj)
        try:
            limit = int(q.get("limit") or 0)
        except ValueError:
            raise bad_request(f"invalid limit {q.get('limit')!r}")
        items, rv, token, remaining = api.store.list(
            rt, route.version, route.ns, self._matcher(route, q), max(limit, 0),
            q.get("continue") or None)
        if form == "table":
            doc = discovery.table(rt, route.version, items, include, rv)
        elif form == "meta":
            doc = {"kind": "PartialObjectMetadataList", "apiVersion": "meta.k8s.io/v1",
                   "metadata": {"resourceVersion": str(rv)},
                   "items": [discovery.partial(o) for o in items]}
        else:
            doc = {"kind": f"{rt.kind}List", "apiVersion": rt.api_version(route.version),
                   "metadata": {"resourceVersion": str(rv)}, "items": items}
        if token:
            doc["metadata"]["continue"] = token
            doc["metadata"]["remainingItemCount"] = remaining
        return self.send_json(200, doc)

    def _pod_log(self, route, q):
        api = self.server.api
        source = api.pod_log_source
        api.store.get(route.rt, route.version, route.ns, route.name)
        if source is None:
            raise bad_request("no kubelet serves logs for this server: start the Kubelet with "
                              "the FakeApiServer object to get `kubectl logs`")
        text = source(route.ns, route.name) or ""
        if q.get("tailLines", "").isdigit():
            lines = text.splitlines(keepends=True)
            text = "".join(lines[-int(q["tailLines"]):]) if int(q["tailLines"]) else ""
        data = text.encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _write_flags(self, q):
        return (q.get("dryRun") == "All", q.get("fieldValidation", "").lower() == "strict")

    def _post(self, route, q, raw):
        api, rt = self.server.api, route.rt
        if route.sub == "log":
            raise ApiError(405, "the server does not allow this method on the requested "
                           "resource", "MethodNotAllowed")
        if route.sub == "binding":
            body = self._decode(raw, self.headers.get("Content-Type", ""))
            api.store.bind(rt, route.ns, route.name, body)
            return self.send_json(201, status_object(201, "", "", None))
        if route.name is not None:
            raise ApiError(405, "the server does not allow this method on the requested "
                           "resource", "MethodNotAllowed")
        if rt.namespaced and route.ns is None:
            raise _not_found_path()
        body = self._decode(raw, self.headers.get("Content-Type", ""))
        dry_run, strict = self._write_flags(q)
        obj = api.store.create(rt, route.version, route.ns, body, dry_run, strict)
        return self.send_json(201, obj)

    def _put(self, route, q, raw):
        if route.name is None or route.sub in ("binding", "log"):
            raise ApiError(405, "the server does not allow this method on the requested "
                           "resource", "MethodNotAllowed")
        body = self._decode(raw, self.headers.get("Content-Type", ""))
        dry_run, strict = self._write_flags(q)
        obj = self.server.api.store.replace(route.rt, route.version, route.ns, route.name, body,
                                            route.sub, dry_run, strict)
        return self.send_json(200, obj)

    def _patch(self, route, q, raw):
        if route.name is None or route.sub in ("binding", "log"):
            raise ApiError(405, "the server does not allow this method on the requested "
                           "resource", "MethodNotAllowed")
        ctype = self.headers.get("Content-Type", "").split(";")[0].strip().lower()
        kind = PATCH_TYPES.get(ctype)
        if kind is None:
            accepted = ", ".join(k for k, v in PATCH_TYPES.items() if v)
            raise ApiError(415, "the body of the request was in an unknown format - accepted "
                           f"media types include: {accepted}", "UnsupportedMediaType")
        body = self._decode(raw, ctype)
        if kind == "apply" and not q.get("fieldManager"):
            raise bad_request("PatchOptions.meta.k8s.io \"\" is invalid: fieldManager: Required "
                              "value: is required for apply patch")
        dry_run, strict = self._write_flags(q)
        store = self.server.api.store
        existed = kind == "apply" and route.sub is None and self._exists(route)
        obj = store.patch(route.rt, route.version, route.ns, route.name, kind, body, route.sub,
                          dry_run, strict, q.get("fieldManager"))
        code = 201 if kind == "apply" and route.sub is None and not existed else 200
        return self.send_json(code, obj)

    def _exists(self, route):
        try:
            self.server.api.store.get(route.rt, route.version, route.ns, route.name)
            return True
        except ApiError:
            return False

    def _delete(self, route, q, raw):
        rt, store = route.rt, self.server.api.store
        opts = {}
        if raw.strip():
            opts = self._decode(raw, self.headers.get("Content-Type", ""))
            if not isinstance(opts, dict):
                raise bad_request("DeleteOptions must be an object")
        grace = q.get("gracePeriodSeconds", opts.get("gracePeriodSeconds"))
        try:
            grace = None if grace in (None, "") else int(grace)
        except (TypeError, ValueError):
            raise bad_request(f"invalid gracePeriodSeconds {grace!r}")
        policy = q.get("propagationPolicy") or opts.get("propagationPolicy")
        if opts.get("orphanDependents") is True or _flag(q.get("orphanDependents", "")):
            policy = policy or "Orphan"
        dry = q.get("dryRun") == "All" or "All" in (opts.get("dryRun") or [])
        if route.name is None:
            if rt.namespaced and route.ns is None:
                raise _not_found_path()
            store.delete_collection(rt, route.version, route.ns, self._matcher(route, q), grace,
                                    policy)
            return self.send_json(200, {"kind": f"{rt.kind}List",
                                        "apiVersion": rt.api_version(route.version),
                                        "metadata": {"resourceVersion": str(store.rv)},
                                        "items": []})
        if route.sub:
            raise ApiError(405, "the server does not allow this method on the requested "
                           "resource", "MethodNotAllowed")
        before = store.get(rt, route.version, route.ns, route.name)
        pending = store.delete(rt, route.version, route.ns, route.name, grace, policy,
                               opts.get("preconditions"), dry)
        if pending is not None:
            return self.send_json(200, pending)
        return self.send_json(200, status_object(200, "", "", {
            "name": route.name, "group": rt.group, "kind": rt.plural,
            "uid": before["metadata"]["uid"]}))
