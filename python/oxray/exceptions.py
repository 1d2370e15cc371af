"""Ray's exceptions, with Ray's names and meaning."""


class RayError(Exception):
    """Base of every oxray error."""


class RaySystemError(RayError):
    """The system, not the task's code, failed."""


class WorkerCrashedError(RayError):
    """The worker running a task died or became unreachable."""


class OutOfMemoryError(RayError):
    """The task's worker was ended by its node's memory monitor: the node's memory use passed
    the threshold (`--memory-usage-threshold`) and the task had no retries left."""


class GetTimeoutError(RayError, TimeoutError):
    """`get` ran out of time."""


class ObjectLostError(RayError):
    """An object is gone (freed, or owned by a process that ended)."""


class ObjectStoreFullError(RayError):
    """No room for the object: neither the node's shared memory nor its spill directory
    could hold it."""


class OwnerDiedError(ObjectLostError):
    """The process that owned the object (the one that made it) has ended."""


class RayTaskError(RayError):
    """A task raised. `get` raises it as an instance of the original exception's type too,
    so `except ValueError` still catches a remote ValueError."""

    def __init__(self, function_name, traceback_str, cause):
        self.function_name = function_name
        self.traceback_str = traceback_str
        self.cause = cause
        super().__init__(f"{function_name} raised {type(cause).__name__}: {cause}\n\n{traceback_str}")

    def __str__(self):
        return self.args[0]

    def as_instanceof_cause(self):
        cause_cls = type(self.cause)
        if issubclass(cause_cls, RayTaskError):
            return self
        try:
            cls = type(f"RayTaskError({cause_cls.__name__})", (RayTaskError, cause_cls), {})
            err = cls.__new__(cls)
            RayTaskError.__init__(err, self.function_name, self.traceback_str, self.cause)
            return err
        except TypeError:  # a type that cannot be a base (final, or with a conflicting layout)
            return self

    def __reduce__(self):
        return (RayTaskError, (self.function_name, self.traceback_str, self.cause))


class RuntimeEnvSetupError(RayError):
    """The task's or actor's runtime_env could not be prepared on its node (a package that
    does not install, its setup timeout passed)."""


class TaskCancelledError(RayError):
    """The task was cancelled with `cancel` before or while it ran."""


class RayActorError(RayError):
    """An actor could not run a call (Ray's base of actor failures)."""


class ActorClassInheritanceException(TypeError):
    """A class was defined with an actor class as its base, which Ray does not allow either:
    inherit from the plain class and decorate the subclass."""


class ActorDiedError(RayActorError):
    """The actor a call went to is dead (killed, crashed, or its creation failed).
    `actor_id` names it when the reason does."""

    def __init__(self, message: str = "", actor_id: str = None):
        super().__init__(message)
        if actor_id is None:
            import re

            found = re.search(r"\bactor ([0-9a-f]{16,})\b", str(message))
            actor_id = found.group(1) if found else None
        self.actor_id = actor_id

    def __reduce__(self):
        return (type(self), (str(self), self.actor_id))
