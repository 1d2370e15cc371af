"""Actors: `@oxray.remote` on a class. The actor lives in a worker process of its own
(holding its resources while it lives); calls go straight to it and run one at a time, in
the order each caller made them."""

import functools
import inspect
import os
import types
from typing import Any, Dict, Optional

from oxray._private import generators, serialization, worker
from oxray.remote_function import check_arguments, check_options, env_vars, resource_request, signature_of
from oxray.util import _labels, scheduling_strategies


def method(*, num_returns: Optional[int] = None, concurrency_group: Optional[str] = None, max_task_retries: Optional[int] = None,
           retry_exceptions=None):
    """As `ray.method`: how many ObjectRefs a call of the decorated actor method returns, the
    concurrency group its calls run in, and how its calls are retried (over the actor's
    `max_task_retries`)."""
    if num_returns is not None:  # else as the method is: a stream for a generator, else one value
        check_options({"num_returns": num_returns})
    check_call_options(concurrency_group, max_task_retries, retry_exceptions)

    def decorate(function):
        function.__oxray_num_returns__ = num_returns
        function.__oxray_concurrency_group__ = concurrency_group
        function.__oxray_max_task_retries__ = max_task_retries
        function.__oxray_retry_exceptions__ = retry_exceptions
        return function

    return decorate


def check_call_options(concurrency_group, max_task_retries, retry_exceptions) -> None:
    """The per-method options, checked where they are given, as Ray does."""
    if concurrency_group is not None and (not isinstance(concurrency_group, str) or not concurrency_group):
        raise TypeError(f"concurrency_group must be a group's name, got {concurrency_group!r}")
    if max_task_retries is not None:
        _retries_option({"max_task_retries": max_task_retries}, "max_task_retries")
    check_retry_exceptions(retry_exceptions)


def check_retry_exceptions(value) -> None:
    if value is None or isinstance(value, bool):
        return
    if isinstance(value, (list, tuple)) and all(isinstance(e, type) and issubclass(e, BaseException) for e in value):
        return
    raise TypeError(f"retry_exceptions must be a bool or a list of exception types, got {value!r}")


def check_concurrency_groups(groups) -> Dict[str, int]:
    if groups is None:
        return {}
    if not isinstance(groups, dict):
        raise TypeError(f"concurrency_groups must be a dict of group name to size, got {type(groups).__name__}")
    for name, size in groups.items():
        if not isinstance(name, str) or not name:
            raise TypeError(f"concurrency_groups: a group's name must be a non-empty string, got {name!r}")
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise ValueError(f"concurrency_groups: group {name!r} needs a positive integer size, got {size!r}")
    return dict(groups)


def exit_actor() -> None:
    """As `ray.actor.exit_actor`: ends the actor this runs in once the current call is
    answered (its caller sees the actor's death); it is not restarted, and later calls
    fail with ActorDiedError."""
    from oxray._private.actor_runner import ActorExit
    from oxray.runtime_context import _current

    if _current.get("actor_id") is None:
        raise TypeError("exit_actor() is called outside an actor: it ends the actor it runs in; "
                        "use oxray.kill(handle) to end another")
    raise ActorExit("the actor exited: exit_actor() was called")


# Methods every actor has, as in Ray: `__ray_ready__` answers once the actor is created,
# `__ray_call__(fn, *args)` runs `fn(actor, *args)` in the actor, `__ray_terminate__` ends
# it once the calls before it ran.
_BUILT_IN = frozenset(("__ray_ready__", "__ray_call__", "__ray_terminate__"))

class ActorMethod:
    def __init__(self, handle: "ActorHandle", name: str, num_returns: int, call_options=None):
        self._handle = handle
        self._name = name
        self._num_returns = num_returns
        # What this call asks beyond its method's defaults (concurrency group, retries).
        self._call_options = call_options or {}

    def options(self, *, num_returns: int = None, concurrency_group: str = None, max_task_retries: int = None,
                retry_exceptions=None, **unknown) -> "ActorMethod":
        if unknown:
            raise ValueError(f"unknown actor method option(s) {sorted(unknown)}; known: "
                             "concurrency_group, max_task_retries, num_returns, retry_exceptions")
        if num_returns is not None:
            check_options({"num_returns": num_returns})
        check_call_options(concurrency_group, max_task_retries, retry_exceptions)
        given = {"concurrency_group": concurrency_group, "max_task_retries": max_task_retries,
                 "retry_exceptions": retry_exceptions}
        call_options = {**self._call_options, **{k: v for k, v in given.items() if v is not None}}
        return ActorMethod(self._handle, self._name, num_returns or self._num_returns, call_options)

    def remote(self, *args, **kwargs):
        h = self._handle
        signatures = h.__dict__.get("_signatures")
        if signatures:
            check_arguments(signatures.get(self._name), self._name, args, kwargs)
        # The call's own options travel with its arguments, where the actor's worker reads them.
        payload, dependencies, contained = serialization.dumps_args(args, kwargs, self._call_options or None)
        streaming = self._num_returns == generators.STREAMING
        num_returns = 1 if streaming else self._num_returns
        client = worker.client()
        retries = self._call_options.get("max_task_retries")
        if retries is None:
            retries = h._method_retries.get(self._name, h._max_task_retries)
        ids = client.call_actor(h._actor_id, h._address, h._owner, self._name, payload, dependencies, contained,
                                retries, num_returns, streaming)
        refs = [worker.new_ref(i) for i in ids]
        if streaming:
            return generators.ObjectRefGenerator(refs[0], client)
        return refs if num_returns > 1 else refs[0]

    def __call__(self, *args, **kwargs):
        raise TypeError(f"Actor method {self._name} cannot be called directly; use .{self._name}.remote(...)")


class ActorHandle:
    """A reference to an actor; it can be passed to tasks and other actors."""

    def __init__(self, actor_id: str, address: str, class_name: str, methods, lease_id: str = None,
                 agent_address: str = None, name: str = None, namespace: str = None, owner: str = None,
                 max_task_retries: int = 0):
        self._actor_id = actor_id
        # The object server of the process that created the actor (None: this one), which
        # restarts it and knows where it runs after a restart.
        self._owner = owner
        self._max_task_retries = max_task_retries
        self._address = address
        self._class_name = class_name
        # Method names, as "name:N" for those that return N > 1 values, "|r=R" for those
        # whose own max_task_retries is R.
        parsed = [_parse_method(m) for m in methods]
        self._methods = {name: n for name, n, _ in parsed}
        self._method_retries = {name: r for name, _, r in parsed if r is not None}
        # Where the actor's worker is leased: what `kill` needs, from any process.
        self._lease_id = lease_id
        self._agent_address = agent_address
        self._name = name
        self._namespace = namespace

    def __getattr__(self, name):
        if name in _BUILT_IN:
            return ActorMethod(self, name, 1)
        if name.startswith("_") and name not in self._methods:
            raise AttributeError(name)
        if name not in self._methods:
            raise AttributeError(f"'{self._class_name}' actor has no method '{name}'")
        return ActorMethod(self, name, self._methods[name])

    def __repr__(self):
        return f"Actor({self._class_name}, {self._actor_id})"

    def __reduce__(self):
        owner = self._owner or worker.client().owner_address()
        # The creation object travels with the handle: the process it goes to borrows it, so
        # the actor lives while a handle to it does anywhere.
        return (_restore_handle, (self._actor_id, self._address, self._class_name,
                                  _method_list(self._methods, self._method_retries),
                                  self._lease_id, self._agent_address, self._name, self._namespace, owner,
                                  self._max_task_retries, getattr(self, "_created", None)))

    def __eq__(self, other):
        return isinstance(other, ActorHandle) and other._actor_id == self._actor_id

    def __hash__(self):
        return hash(self._actor_id)


class ActorClass:
    def __init__(self, cls, options: Dict[str, Any]):
        check_options(options)
        self._cls = cls
        self._options = options
        self.__name__ = cls.__name__
        names = [m for m in dir(cls) if callable(getattr(cls, m, None)) and not m.startswith("__")]
        self._methods = _method_list({m: _returns_of(getattr(cls, m)) for m in names},
                                     {m: _declared_retries(getattr(cls, m)) for m in names})
        self._groups = check_concurrency_groups(options.get("concurrency_groups"))
        _labels.check(options)
        _check_method_groups(cls, names, self._groups)
        # Arguments are checked at the call, as Ray does: the constructor's here, the
        # methods' by the handles this process makes (`self` bound away).
        self._signature = signature_of(cls)
        self._method_signatures = {m: _method_signature(cls, m) for m in _names(self._methods)}

    def __call__(self, *args, **kwargs):
        raise TypeError(f"Actor class {self.__name__} cannot be instantiated directly; use {self.__name__}.remote(...)")

    def __getattr__(self, name):
        # The decorated class's own attributes (class attributes, classmethods, static
        # methods) stay reachable through the actor class, as in Ray.
        cls = self.__dict__.get("_cls")
        if cls is None or name.startswith("__"):
            raise AttributeError(name)
        try:
            value = getattr(cls, name)
        except AttributeError:
            raise AttributeError(f"actor class {self.__name__} has no attribute {name!r}") from None
        # A plain function (a static method, or a method read from the class) comes wrapped:
        # were it the very object, cloudpickle would find it under the module's name for the
        # class and send methods by reference to workers that cannot import the module.
        return functools.partial(value) if isinstance(value, types.FunctionType) else value

    def __mro_entries__(self, bases):
        from oxray.exceptions import ActorClassInheritanceException

        raise ActorClassInheritanceException(
            f"Attempted to define a subclass of actor class {self.__name__!r}: inheriting from actor classes is "
            "not supported. Inherit from the plain class instead and make the subclass an actor with @oxray.remote.")

    def options(self, **options) -> "ActorClass":
        return ActorClass(self._cls, {**self._options, **options})

    def remote(self, *args, **kwargs) -> ActorHandle:
        check_arguments(self._signature, self.__name__, args, kwargs)
        client = worker.client()
        name = self._options.get("name")
        namespace = self._options.get("namespace") or worker.namespace() or "default"
        lifetime = self._options.get("lifetime")
        if lifetime not in (None, "detached", "non_detached"):
            raise ValueError(f"lifetime must be 'detached' or None, got {lifetime!r}")
        if name and self._options.get("get_if_exists"):
            try:
                return get_actor(name, namespace)
            except ValueError:
                pass
        max_restarts = _retries_option(self._options, "max_restarts")
        max_task_retries = _retries_option(self._options, "max_task_retries")
        chosen = self._strategy()
        payload, dependencies, contained = serialization.dumps_args(args, kwargs)
        # As in Ray: an actor needs a CPU to be placed only if it asks for one.
        resources = resource_request(self._options, default_cpus=0)
        max_concurrency = self._options.get("max_concurrency")
        if max_concurrency is not None and (not isinstance(max_concurrency, int) or max_concurrency < 1):
            raise ValueError(f"max_concurrency must be a positive integer, got {max_concurrency!r}")
        actor_id = os.urandom(16).hex()
        # What the actor's worker needs to be the actor, to end it (its owner), and to make
        # handles to itself (`get_runtime_context().current_actor`).
        blueprint = serialization.dumps((self._cls, {
            "max_concurrency": max_concurrency, "actor_id": actor_id, "name": name, "namespace": namespace,
            "placement_group": scheduling_strategies.placement(chosen), "concurrency_groups": self._groups,
            "max_task_retries": max_task_retries, "owner": client.owner_address(), "class_name": self.__name__,
            "methods": self._methods, "resources": resources}))
        # As in Ray, the handle comes back at once: the actor is placed when resources allow.
        # A named actor is in the head's directory with its worker, so it waits for one. An
        # actor that is neither named nor detached ends with its last handle.
        created = client.create_actor(
            actor_id, self.__name__, blueprint, payload, dependencies, contained, resources,
            env_vars(self._options, resources["CPU"]), scheduling_strategies.native(chosen), lifetime == "detached",
            max_restarts, max_task_retries, not name and lifetime != "detached", namespace=namespace)
        created = worker.new_ref(created)
        address = lease_id = agent = None
        if name:
            try:
                placed = client.actor_placement(actor_id)
            except RuntimeError as e:
                raise ValueError(f"cannot place actor {self.__name__}: {e}") from None
            address, lease_id, agent = placed.worker_address, placed.lease_id, placed.agent_address
            try:
                client.register_actor(name, namespace, actor_id, address, agent, lease_id, self.__name__,
                                      sorted(self._methods), lifetime == "detached", max_task_retries)
            except ValueError:
                client.kill_actor_at(agent, lease_id)
                raise
            worker.own_actor(actor_id, name, namespace, detached=lifetime == "detached")
        handle = ActorHandle(actor_id, address or "", self.__name__, self._methods, lease_id, agent,
                             name, namespace if name else None, None, max_task_retries)
        handle._created = created
        handle._signatures = self._method_signatures
        return handle


    def _strategy(self):
        """Where the actor goes: a node its label selector (or a fallback) matches, once one
        does, when it has one."""
        return _labels.strategy(self._options, scheduling_strategies.effective(self._options.get("scheduling_strategy")))


def get_actor(name: str, namespace: str = None) -> ActorHandle:
    """The handle of a named actor, from any process of the cluster."""
    namespace = namespace or worker.namespace() or "default"
    client = worker.client()
    a = client.get_actor(name, namespace)
    owner = None if not a.owner or client.is_owner(a.owner) else a.owner
    return ActorHandle(a.actor_id, a.worker_address, a.class_name, a.methods, a.lease_id, a.agent_address, name,
                       namespace, owner, a.max_task_retries)


def _restore_handle(actor_id, address, class_name, methods, lease_id, agent, name, namespace, owner,
                    max_task_retries, created=None):
    """A handle read from bytes; in its owner's own process it is the owner's handle."""
    if owner and worker.client().is_owner(owner):
        owner = None
    handle = ActorHandle(actor_id, address, class_name, methods, lease_id, agent, name, namespace, owner,
                         max_task_retries)
    if created is not None:
        handle._created = created
        worker.client().mark_actor_handle(created.hex())
    return handle


def _returns_of(method):
    """How many values a call of the method returns: `@method(num_returns=...)`, else a
    stream for a generator method (as in Ray), else one."""
    declared = getattr(method, "__oxray_num_returns__", None)
    if declared is not None:
        return declared
    streams = inspect.isgeneratorfunction(method) or inspect.isasyncgenfunction(method)
    return generators.STREAMING if streams else 1


def _method_signature(cls, name: str):
    """A method's signature as its callers see it (no `self`)."""
    attr = inspect.getattr_static(cls, name, None)
    if isinstance(attr, staticmethod):
        return signature_of(attr.__func__)
    if isinstance(attr, classmethod):
        return signature_of(getattr(cls, name))
    if inspect.isfunction(attr):
        return signature_of(functools.partial(attr, None))
    return None


def _names(methods: list):
    return [_parse_method(m)[0] for m in methods]


def _parse_method(entry: str):
    """(name, num_returns, max_task_retries or None) of an entry of a method list."""
    entry, _, retries = entry.partition("|r=")
    name, _, num_returns = entry.partition(":")
    num_returns = int(num_returns) if num_returns.isdigit() else (num_returns or 1)
    return name, num_returns, int(retries) if retries else None


def _method_list(methods: Dict[str, int], retries: Dict[str, Optional[int]] = None):
    """Methods as the strings that name them in the head's directory and in pickled handles."""
    retries = retries or {}

    def entry(name, n):
        text = name if n == 1 else f"{name}:{n}"
        return text if retries.get(name) is None else f"{text}|r={retries[name]}"

    return sorted(entry(name, n) for name, n in methods.items())


def _declared_retries(method) -> Optional[int]:
    return getattr(method, "__oxray_max_task_retries__", None)


def _check_method_groups(cls, names, groups: Dict[str, int]) -> None:
    """A method's `concurrency_group` must be one the class declares, as Ray checks."""
    for name in names:
        group = getattr(getattr(cls, name), "__oxray_concurrency_group__", None)
        if group is not None and group not in groups:
            raise ValueError(f"{cls.__name__}.{name}: concurrency group {group!r} is not in the class's "
                             f"concurrency_groups {sorted(groups)}")


def _retries_option(options, name):
    value = options.get(name, 0)
    if isinstance(value, bool) or not isinstance(value, int) or value < -1:
        raise ValueError(f"{name} must be an integer >= -1 (-1: without limit), got {value!r}")
    return value
