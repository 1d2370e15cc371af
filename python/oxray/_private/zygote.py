"""The parent of a node's workers of one kind that preloads modules (Train: torch): it loads
them once, then forks each worker its agent asks for, so that a worker starts with them
loaded in milliseconds instead of seconds (a training group started again after a failure
does not wait for torch to load). As PyTorch's own DataLoader forks its workers, forking
after torch is imported is safe as long as CUDA was not initialized: a zygote that finds it
initialized says so, and its agent starts workers as usual.

It speaks JSON lines with its agent: requests on stdin (`{"fork": id, "env": {...}, "out":
path, "err": path}`), and on its original stdout `{"ready": true}` or `{"unusable": why}`
once, then `{"forked": id, "pid": n}` or `{"failed": id, "error": why}` per request and
`{"exited": pid, "status": wait status}` as its children end. It runs one thread, so that
a fork copies nothing half done; it exits when its agent closes stdin."""

import importlib
import json
import os
import select
import signal
import sys
import warnings

_PR_SET_PDEATHSIG = 1


def preload(names: str) -> list:
    """Imports the modules named (`a,b`), and says which could not be and why: the task that
    needs one reports what is missing."""
    failed = []
    for name in filter(None, (n.strip() for n in names.split(","))):
        try:
            importlib.import_module(name)
        except Exception as error:
            failed.append(f"cannot preload {name}: {error!r}")
    return failed


def _why_not_forkable():
    """Why a fork of this process would not work, if it would not: CUDA was set up while the
    modules loaded (torch's own state, or the driver library loaded, as a device count
    does), and a forked process cannot use it."""
    torch = sys.modules.get("torch")
    cuda = getattr(torch, "cuda", None)
    if cuda is not None and cuda.is_initialized():
        return "CUDA was initialized while the modules loaded, and a forked process cannot use it"
    if _cuda_driver_loaded():
        return "the CUDA driver was loaded while the modules loaded, and a forked process cannot use it"
    return None


def _cuda_driver_loaded() -> bool:
    try:
        with open("/proc/self/maps") as maps:
            return any("/libcuda.so" in line for line in maps)
    except OSError:
        return False


class _Agent:
    """The protocol's two pipes."""

    def __init__(self):
        self.requests = 0
        self.replies = os.fdopen(os.dup(1), "w", buffering=1)
        os.dup2(2, 1)  # what the modules print goes to the log, not into the protocol
        self.pending = b""

    def say(self, **message) -> None:
        self.replies.write(json.dumps(message) + "\n")
        self.replies.flush()

    def read(self):
        """The requests that arrived; None once the agent closed its end."""
        data = os.read(self.requests, 65536)
        if not data:
            return None
        self.pending += data
        *lines, self.pending = self.pending.split(b"\n")
        return [json.loads(line) for line in lines if line.strip()]


def _reap(agent: _Agent) -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        agent.say(exited=pid, status=status)


def _serve():
    """Forks workers until the agent goes away; returns only in a forked worker, with its
    request."""
    agent = _Agent()
    for failure in preload(os.environ.get("OXRAY_WORKER_PRELOAD", "")):
        print(failure, file=sys.stderr, flush=True)
    why = _why_not_forkable()
    if why:
        agent.say(unusable=why)
        sys.exit(0)
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    agent.say(ready=True)
    parent = os.getpid()
    while True:
        try:
            readable, _, _ = select.select([agent.requests, wake_r], [], [])
        except InterruptedError:
            continue
        if wake_r in readable:
            os.read(wake_r, 4096)
            _reap(agent)
        if agent.requests not in readable:
            continue
        requests = agent.read()
        if requests is None:
            return None
        for request in requests:
            sys.stdout.flush()
            sys.stderr.flush()
            try:
                with warnings.catch_warnings():
                    # Python warns of forking with threads; the only other ones here are a
                    # BLAS pool's, which stops itself around a fork.
                    warnings.simplefilter("ignore", DeprecationWarning)
                    pid = os.fork()
            except OSError as error:
                agent.say(failed=request["fork"], error=f"fork failed: {error}")
                continue
            if pid == 0:
                signal.set_wakeup_fd(-1)
                signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                agent.replies.close()
                for fd in (agent.requests, wake_r, wake_w):
                    os.close(fd)
                return request, parent
            agent.say(forked=request["fork"], pid=pid)


def _become_worker(request, parent: int) -> None:
    """In a forked child: dies with the zygote (as a spawned worker does with its agent),
    writes to its own log files, takes its environment."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0 or os.getppid() != parent:
        os._exit(1)  # the zygote is already gone: so is the agent that asked for this worker
    null = os.open(os.devnull, os.O_RDONLY)  # fd 0 itself when the request pipe, closed, was there
    if null != 0:
        os.dup2(null, 0)
        os.close(null)
    for fd, path in ((1, request["out"]), (2, request["err"])):
        opened = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(opened, fd)
        os.close(opened)
    os.environ.update(request["env"])
    numpy_random = sys.modules.get("numpy.random")
    if numpy_random is not None:
        numpy_random.seed()  # each worker its own stream, as a spawned one has (Python's `random` reseeds itself)


def main() -> None:
    forked = _serve()
    if forked is None:
        return
    _become_worker(*forked)
    from oxray._private import worker_main

    worker_main.main()


if __name__ == "__main__":
    main()
