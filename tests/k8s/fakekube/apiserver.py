"""An in-memory Kubernetes API server over plain HTTP, for tests that cannot run Kubernetes.

In a test:

    server = FakeApiServer().start()
    server.write_kubeconfig(path)        # kubectl / kube-rs: KUBECONFIG=path
    ...
    server.stop()

As a process: `python -m tests.k8s.fakekube.apiserver --port 0 --port-file F [--kubeconfig K]`.
"""

import argparse
import os
import signal
import socket
import sys
import threading
from http.server import ThreadingHTTPServer

from .handler import Handler
from .store import Store


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128


class FakeApiServer:
    def __init__(self, host="127.0.0.1", port=0, history=10000, bookmark_interval=5.0,
                 log_path=None):
        """history: how many events watches can replay before they get 410 Gone.
        log_path: where to append one line per request (None: no request log)."""
        self.host = host
        self.requested_port = port
        self.store = Store(history=history)
        self.bookmark_interval = bookmark_interval
        self.log_path = log_path
        # (namespace, pod name) -> log text, for `kubectl logs`; a Kubelet started with this
        # server object sets it.
        self.pod_log_source = None
        self._log_lock = threading.Lock()
        self._httpd = None
        self._thread = None
        self._conns = set()
        self._conns_lock = threading.Lock()

    # --- lifecycle -----------------------------------------------------------------------

    def start(self):
        self._httpd = _HTTPServer((self.host, self.requested_port), Handler)
        self._httpd.api = self
        self._thread = threading.Thread(target=self._httpd.serve_forever,
                                        kwargs={"poll_interval": 0.2},
                                        name="fakekube-apiserver", daemon=True)
        self._thread.start()
        return self

    def stop(self):
        if self._httpd is None:
            return
        self.store.close()
        self._httpd.shutdown()
        self._httpd.server_close()
        with self._conns_lock:
            conns = list(self._conns)
        for conn in conns:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        self._thread.join(timeout=5)
        self._httpd = None

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    def track(self, conn, open_):
        with self._conns_lock:
            (self._conns.add if open_ else self._conns.discard)(conn)

    def log(self, line):
        if self.log_path:
            with self._log_lock, open(self.log_path, "a") as f:
                f.write(line + "\n")

    # --- addresses -----------------------------------------------------------------------

    @property
    def port(self):
        return self._httpd.server_address[1]

    @property
    def url(self):
        return f"http://{self.host}:{self.port}"

    def kubeconfig(self, namespace="default"):
        return kubeconfig_text(self.url, namespace)

    def write_kubeconfig(self, path, namespace="default"):
        with open(path, "w") as f:
            f.write(self.kubeconfig(namespace))
        return str(path)

    def compact(self):
        """Forgets the event history: watches resuming from before now get 410 Gone."""
        self.store.compact()


def kubeconfig_text(url, namespace="default"):
    return f"""apiVersion: v1
kind: Config
clusters:
- name: fakekube
  cluster:
    server: {url}
users:
- name: fakekube
  user: {{}}
contexts:
- name: fakekube
  context:
    cluster: fakekube
    user: fakekube
    namespace: {namespace}
current-context: fakekube
preferences: {{}}
"""


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--port-file", help="write the port the server listens on here")
    p.add_argument("--kubeconfig", help="write a kubeconfig for the server here")
    p.add_argument("--history", type=int, default=10000)
    p.add_argument("--log", help="append a line per request to this file")
    args = p.parse_args(argv)
    server = FakeApiServer(args.host, args.port, history=args.history,
                           log_path=args.log).start()
    if args.kubeconfig:
        server.write_kubeconfig(args.kubeconfig)
    if args.port_file:
        tmp = args.port_file + ".tmp"
        with open(tmp, "w") as f:
            f.write(str(server.port))
        os.replace(tmp, args.port_file)
    print(f"fake API server listening on {server.url}", file=sys.stderr, flush=True)
    done = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: done.set())
    done.wait()
    server.stop()


if __name__ == "__main__":
    main()
