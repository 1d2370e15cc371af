"""The router of a deployment, in the process that calls it: it learns the RUNNING replicas
from the controller, sends each request to the less loaded of two replicas picked at random
(by its own count of requests in flight to each), never more than `max_ongoing_requests` to
one replica, and holds the rest in a FIFO queue here (no back-off: a request goes the moment
a replica has room)."""

import collections
import concurrent.futures
import itertools
import os
import random
import threading
import time
import uuid
from typing import Any, Callable, Deque, Dict, List, Optional, Tuple

from oxray.serve.exceptions import BackPressureError, DeploymentUnavailableError, RequestCancelledError

# How often the replicas of a deployment are asked for again: always, and while requests
# wait with no replica to go to.
REFRESH_S = 1.0
REFRESH_WAITING_S = 0.1
# Requests waiting here are reported to the controller at most this often.
REPORT_S = 0.5
# How long the watcher waits for one of the calls in flight before taking in new ones.
WATCH_SLICE_S = 0.02

_ids = itertools.count()


class Request:
    """One call through a handle. `future` gets the ObjectRef (or ObjectRefGenerator) once
    the call went to a replica, or the error that kept it from going."""

    def __init__(self, method_name: str, args: tuple, kwargs: Dict[str, Any], meta: Dict[str, Any]):
        self.method_name = method_name
        self.args = args
        self.kwargs = kwargs
        self.meta = meta
        self.future: concurrent.futures.Future = concurrent.futures.Future()
        self.replica: Optional["Slot"] = None
        self.router: Optional["Router"] = None
        self.cancelled = False

    @property
    def stream(self) -> bool:
        return bool(self.meta.get("stream"))

    def fail(self, error: BaseException) -> None:
        if not self.future.done():
            self.future.set_exception(error)


class Slot:
    """A replica as a router sees it."""

    def __init__(self, replica_id: str, actor_name: str, node_id: str = ""):
        self.replica_id = replica_id
        self.actor_name = actor_name
        self.node_id = node_id
        self.actor = None  # its handle, once looked up
        self.in_flight = 0
        self.models: "collections.OrderedDict[str, None]" = collections.OrderedDict()
        self.dead = False

    def send(self, request: Request):
        method = self.actor.handle_request
        if request.stream:
            method = method.options(num_returns="streaming")
        return method.remote(request.method_name, request.args, request.kwargs, request.meta)

    def __repr__(self):
        return f"Slot({self.replica_id}, in_flight={self.in_flight})"


def choose(slots: List[Slot], limit: int, model_id: str = "", local_node: Optional[str] = None,
           rng: random.Random = random) -> Optional[Slot]:
    """Power of two choices among the replicas with room (None: all are full). Replicas that
    already served `model_id`, then replicas on this node, are preferred when they have room."""
    room = [s for s in slots if s.actor is not None and not s.dead and s.in_flight < limit]
    if not room:
        return None
    for prefer in ((lambda s: model_id in s.models) if model_id else None,
                   (lambda s: s.node_id == local_node) if local_node else None):
        if prefer is not None:
            preferred = [s for s in room if prefer(s)]
            if preferred:
                room = preferred
                break
    if len(room) == 1:
        return room[0]
    a, b = rng.sample(room, 2)
    return a if a.in_flight <= b.in_flight else b


class Router:
    def __init__(self, app_name: str, deployment_name: str,
                 watch: Optional[Callable[[Any, Callable[[], None]], None]] = None,
                 kick: Optional[Callable[[], None]] = None):
        self.app_name = app_name
        self.deployment_name = deployment_name
        self.lock = threading.Lock()
        self.slots: Dict[str, Slot] = {}
        self.queue: Deque[Request] = collections.deque()
        self.max_ongoing_requests = 5
        self.max_queued_requests = -1
        # Why requests cannot go now (the app failed or is gone), else None.
        self.unavailable: Optional[str] = None
        self._watch = watch or _watcher().watch
        self._kick = kick or (lambda: _directory().kick())
        self.local_node = None

    def submit(self, request: Request) -> None:
        """Sends the request now if a replica has room and none is waiting, else queues it."""
        request.router = self
        if request.future.done():  # cancelled while its arguments were resolved
            return
        with self.lock:
            if self.unavailable is not None:
                request.fail(DeploymentUnavailableError(self._id(), self.unavailable))
                return
            slot = None if self.queue else self._pick(request)
            if slot is None:
                if 0 < self.max_queued_requests <= len(self.queue):
                    request.fail(BackPressureError(num_queued_requests=len(self.queue),
                                                   max_queued_requests=self.max_queued_requests))
                    return
                self.queue.append(request)
                idle = not any(s.actor is not None for s in self.slots.values())
        if slot is not None:
            self._send(slot, request)
        elif idle:
            self._kick()

    def _id(self) -> str:
        return f"Deployment(name='{self.deployment_name}', app='{self.app_name}')"

    def _pick(self, request: Request) -> Optional[Slot]:
        """Picks a replica and counts the request on it (lock held)."""
        model_id = request.meta.get("multiplexed_model_id") or ""
        slot = choose(list(self.slots.values()), self.max_ongoing_requests, model_id, self.local_node)
        if slot is not None:
            slot.in_flight += 1
            request.replica = slot
            if model_id:
                slot.models[model_id] = None
                slot.models.move_to_end(model_id)
                while len(slot.models) > 16:
                    slot.models.popitem(last=False)
        return slot

    def _send(self, slot: Slot, request: Request) -> None:
        try:
            sent = slot.send(request)
        except BaseException as error:  # arguments that do not pickle, or a replica gone
            self._release(slot)
            request.fail(error)
            return
        done = sent.completed() if request.stream else sent
        if not request.future.done():
            request.future.set_result(sent)
        self._watch(done, lambda: self._release(slot))

    def _release(self, slot: Slot) -> None:
        with self.lock:
            slot.in_flight = max(0, slot.in_flight - 1)
        self.drain()

    def drain(self) -> None:
        """Sends queued requests, oldest first, while replicas have room."""
        while True:
            with self.lock:
                if not self.queue:
                    return
                slot = self._pick(self.queue[0])
                if slot is None:
                    return
                request = self.queue.popleft()
            self._send(slot, request)

    def cancel(self, request: Request) -> bool:
        """Takes a queued request out (True); False when it went to a replica already."""
        with self.lock:
            try:
                self.queue.remove(request)
            except ValueError:
                return False
        request.fail(RequestCancelledError(request.meta.get("request_id")))
        return True

    def replica_failed(self, slot: Optional[Slot]) -> None:
        """A call found its replica dead: no more requests go to it; the controller is asked
        again now."""
        if slot is not None:
            with self.lock:
                slot.dead = True
        self._kick()

    def waiting(self) -> bool:
        with self.lock:
            return bool(self.queue) and not any(s.actor is not None and not s.dead for s in self.slots.values())

    def update(self, app: Optional[Dict[str, Any]], lookup: Callable[[str], Any]) -> None:
        """Takes in the controller's view of this deployment's app (None: the app is gone)."""
        failed: List[Request] = []
        status = (app or {}).get("status")
        deployment = ((app or {}).get("deployments") or {}).get(self.deployment_name)
        if app is None or status in ("DEPLOY_FAILED", "DELETING") or (status == "RUNNING" and deployment is None):
            reason = ("the application does not exist" if app is None else
                      f"the application is {status}: {app.get('message') or ''}".rstrip(": "))
            with self.lock:
                self.unavailable = f"{self._id()} is unavailable: {reason}."
                failed, self.queue = list(self.queue), collections.deque()
            for request in failed:
                request.fail(DeploymentUnavailableError(self._id(), self.unavailable))
            return
        running = {r["replica_id"]: r for r in (deployment or {}).get("replicas") or [] if r.get("state") == "RUNNING"}
        # Handles are looked up outside the lock: each is a call to the head.
        with self.lock:
            new = [rid for rid, r in running.items()
                   if rid not in self.slots or self.slots[rid].actor_name != r.get("actor_name")]
        found: Dict[str, Slot] = {}
        for rid in new:
            r = running[rid]
            slot = Slot(rid, r.get("actor_name") or "", r.get("node_id") or "")
            try:
                slot.actor = lookup(slot.actor_name)
            except Exception:  # not registered yet, or gone already: next refresh
                continue
            found[rid] = slot
        with self.lock:
            self.unavailable = None
            if deployment is not None:
                self.max_ongoing_requests = int(deployment.get("max_ongoing_requests") or self.max_ongoing_requests)
                self.max_queued_requests = int(deployment.get("max_queued_requests") or -1)
            for rid in list(self.slots):
                if rid not in running:
                    del self.slots[rid]
            self.slots.update(found)
        self.drain()


class _Watcher:
    """One thread per process that learns when calls in flight end, to free their slots."""

    def __init__(self):
        self.cond = threading.Condition()
        self.pending: List[Tuple[Any, Callable[[], None]]] = []
        self.thread: Optional[threading.Thread] = None

    def watch(self, ref, done: Callable[[], None]) -> None:
        with self.cond:
            self.pending.append((ref, done))
            if self.thread is None:
                self.thread = threading.Thread(target=self._run, name="serve-watcher", daemon=True)
                self.thread.start()
            self.cond.notify()

    def _run(self) -> None:
        from oxray._private import worker

        watching: Dict[str, Tuple[Any, List[Callable[[], None]]]] = {}
        while True:
            with self.cond:
                while not self.pending and not watching:
                    self.cond.wait()
                for ref, done in self.pending:
                    watching.setdefault(ref.hex(), (ref, []))[1].append(done)
                self.pending = []
            refs = [ref for ref, _ in watching.values()]
            try:
                if worker.was_shut_down():  # waiting would connect the process again
                    raise ConnectionError("not connected")
                ready, _ = worker.wait(refs, num_returns=1, timeout=WATCH_SLICE_S)
            except Exception:  # the connection is gone: nothing will end any more
                ready = refs
            for ref in ready:
                for done in watching.pop(ref.hex(), (None, []))[1]:
                    try:
                        done()
                    except Exception:  # one router's failure must not stop the others' releases
                        pass


class _Directory:
    """One thread per process that asks the controller for the replicas of every deployment
    this process calls, every REFRESH_S (sooner when asked, or while requests wait)."""

    def __init__(self):
        self.routers: Dict[Tuple[str, str], Router] = {}
        self.lock = threading.Lock()
        self.wake = threading.Event()
        self.thread: Optional[threading.Thread] = None
        self.actors: Dict[str, Any] = {}
        self.connection = None
        self.process = uuid.uuid4().hex
        self.reported_at: Optional[float] = None  # when waiting requests were last reported

    def router(self, app_name: str, deployment_name: str) -> Router:
        key = (app_name, deployment_name)
        with self.lock:
            router = self.routers.get(key)
            if router is None:
                router = self.routers[key] = Router(app_name, deployment_name)
                router.local_node = os.environ.get("OXRAY_NODE_ID") or None
                if self.thread is None:
                    self.thread = threading.Thread(target=self._run, name="serve-directory", daemon=True)
                    self.thread.start()
                self.wake.set()
        return router

    def kick(self) -> None:
        self.wake.set()

    def _lookup(self, actor_name: str):
        import oxray

        actor = self.actors.get(actor_name)
        if actor is None:
            actor = self.actors[actor_name] = oxray.get_actor(actor_name, namespace="serve")
        return actor

    def refresh(self) -> None:
        from oxray._private import worker
        from oxray.serve import _controller_client

        with self.lock:
            routers = list(self.routers.values())
        # Replicas looked up through an earlier connection (before a shutdown) are not
        # this one's.
        connection = worker._client
        if connection is not self.connection:
            self.actors.clear()
            self.connection = connection
        apps = _controller_client.get_applications(connect=False).get("applications") or {}
        live = set()
        for router in routers:
            router.update(apps.get(router.app_name), self._lookup)
            for slot in list(router.slots.values()):
                live.add(slot.actor_name)
        for name in [n for n in self.actors if n not in live]:
            del self.actors[name]
        self._report_queued(routers)

    def _report_queued(self, routers) -> None:
        """Tells the controller what waits here for room (at most every REPORT_S), and once
        that nothing does any more."""
        from oxray.serve import _controller_client

        queued = [(r.app_name, r.deployment_name, len(r.queue)) for r in routers if r.queue]
        now = time.monotonic()
        if queued and self.reported_at is not None and now - self.reported_at < REPORT_S:
            return
        if queued or self.reported_at is not None:
            _controller_client.report_queued(self.process, queued)
            self.reported_at = now if queued else None

    def _run(self) -> None:
        while True:
            try:
                self.refresh()
            except Exception:  # the controller is unreachable for now: try again
                pass
            with self.lock:
                waiting = any(r.waiting() for r in self.routers.values())
            self.wake.wait(REFRESH_WAITING_S if waiting else REFRESH_S)
            self.wake.clear()


# The process's one watcher and one directory, made on first use.
_instances: Dict[type, Any] = {}
_lock = threading.Lock()


def _one(kind: type):
    with _lock:
        if kind not in _instances:
            _instances[kind] = kind()
        return _instances[kind]


def _watcher() -> _Watcher:
    return _one(_Watcher)


def _directory() -> _Directory:
    return _one(_Directory)


def router_for(app_name: str, deployment_name: str) -> Router:
    return _directory().router(app_name, deployment_name)


def forget_app(app_name: str) -> None:
    """After the app was deleted here: its routers fail what they hold and start over."""
    directory = _instances.get(_Directory)
    if directory is None:
        return
    with directory.lock:
        for key in [k for k in directory.routers if k[0] == app_name]:
            router = directory.routers.pop(key)
            router.update(None, directory._lookup)


def new_request_id() -> str:
    return f"{os.urandom(8).hex()}{next(_ids):x}"
