"""A worker process: the node agent starts it with `python -m oxray._private.worker_main`;
it runs the tasks pushed to it one at a time. Once it received an actor's creation call, it
is that actor. What a task prints goes to the worker's log and, prefixed with the task's
name, process and node, back to the caller, which prints it as Ray's drivers do."""

import io
import os
import sys
import threading
import time
import traceback

from oxray import _native
from oxray._private import generators, runtime_env, serialization
from oxray._private.actor_runner import ActorExit, ActorRunner
from oxray.exceptions import ActorDiedError, TaskCancelledError
from oxray.runtime_context import _current as current_context


class _Tee(io.TextIOBase):
    """Writes to the worker's own stream and keeps a copy for the caller."""

    def __init__(self, stream):
        self.stream = stream
        self.captured = []
        # Threaded and async actors print from several threads at once.
        self.lock = threading.Lock()

    def write(self, text):
        with self.lock:
            self.captured.append(text)
        return self.stream.write(text)

    def flush(self):
        self.stream.flush()

    def take(self):
        with self.lock:
            text, self.captured = "".join(self.captured), []
        return text


def _prefixed(text, name):
    if not text:
        return ""
    # An actor's output is its own, whichever of its calls it came during (as Ray shows it).
    actor = current_context.get("actor_class")
    name = actor or name
    prefix = f"({name} pid={os.getpid()}, ip={os.environ.get('OXRAY_NODE_IP', '?')}) "
    return "".join(prefix + line + "\n" for line in text.rstrip("\n").split("\n"))


_VISIBLE_AT_START = os.environ.get("CUDA_VISIBLE_DEVICES")


def _use_gpus(ids: str) -> None:
    """A task or actor sees the GPUs of its lease, as in Ray; a task that holds none sees
    what the worker saw when it started."""
    wanted = ids or _VISIBLE_AT_START
    if os.environ.get("CUDA_VISIBLE_DEVICES") == wanted:
        return  # the common case, on every task: nothing to change
    if wanted is None:
        del os.environ["CUDA_VISIBLE_DEVICES"]
    else:
        os.environ["CUDA_VISIBLE_DEVICES"] = wanted


def _decode(task):
    """(args, kwargs, extra) of a task: `extra` is the placement group of a task, the call's
    own options (`.options(concurrency_group=...)`) of an actor call."""
    if not task.args:  # a call the core makes itself (`__ray_terminate__` of an actor out of scope)
        return (), {}, None
    values = {object_id: serialization.loads(data) for object_id, data in task.dependencies}
    return serialization.loads_args(task.args, values)


def _run(task, state, decoded=None):
    """Returns (result, is_error, returns)."""
    function, actor_creation, actor_method = task.function, task.actor_creation, task.actor_method
    if not actor_method:
        _use_gpus(task.gpu_ids)
    call_args, call_kwargs, extra = decoded or _decode(task)
    if actor_creation:
        try:
            current_context["actor_restarts"] = task.restarts
            _become_actor(state, *serialization.load_blueprint(function), call_args, call_kwargs)
        except BaseException as error:
            state["creation_error"] = error
            raise
        return None
    if actor_method:
        if state.get("actor") is None:
            raise ActorDiedError(f"the actor could not be created: {state.get('creation_error')!r}")
        current_context["task_function"] = (type(state["actor"]), actor_method)  # named when asked
        return state["runner"].call(actor_method, call_args, call_kwargs, extra)
    current_context["placement_group"] = extra
    fn = state["functions"].get(function)
    if fn is None:
        fn = state["functions"][function] = serialization.loads(function)
    current_context["resources"] = getattr(fn, "resources", None)
    current_context["task_function"] = (getattr(fn, "function", fn), None)
    _count_call(state, function, getattr(fn, "max_calls", 0))
    return fn(*call_args, **call_kwargs)


def _become_actor(state, cls, options, call_args, call_kwargs):
    # An actor is inside its group for its whole life.
    current_context["placement_group"] = options.get("placement_group")
    current_context["resources"] = options.get("resources")
    state["options"] = options
    state["actor"] = cls(*call_args, **call_kwargs)
    state["runner"] = ActorRunner(state["actor"], options.get("max_concurrency"), options.get("concurrency_groups"),
                                  options.get("max_task_retries"))
    current_context["actor_id"] = options.get("actor_id")
    current_context["actor_class"] = cls.__name__
    current_context["actor_name"] = options.get("name")
    current_context["actor"] = options


def _count_call(state, function, max_calls):
    """With `max_calls`, the process ends once the call that reaches it is answered."""
    if not max_calls:
        return
    calls = state.setdefault("calls", {})
    calls[function] = calls.get(function, 0) + 1
    if calls[function] >= max_calls:
        state["exit_after_reply"] = True


def _preload(names: str) -> None:
    """Imports the modules a library asked its workers to load (Train: torch) in the
    background, while the worker starts (a worker forked by its kind's zygote has them
    already)."""
    from oxray._private.zygote import preload

    if names:
        threading.Thread(target=preload, args=(names,), name="preload", daemon=True).start()


def main() -> None:
    # A driver that reaches oxray as `ray` has its tasks unpickled under that name too.
    from oxray._as_ray import install_from_env

    install_from_env()
    runtime_env.add_driver_sys_path()
    _preload(os.environ.get("OXRAY_WORKER_PRELOAD", ""))
    executor = _native.TaskExecutor(os.environ["OXRAY_AGENT_ADDRESS"], os.environ["OXRAY_WORKER_ID"],
                                    os.environ["OXRAY_AUTH_TOKEN"])
    state = {"functions": {}}
    out, err = _Tee(sys.stdout), _Tee(sys.stderr)
    sys.stdout, sys.stderr = out, err
    while True:
        try:
            task = executor.next_task()
        except KeyboardInterrupt:  # a cancel that came as the task ended: nothing to stop
            continue
        if task is None:
            return
        current_context["task_id"], current_context["task_name"] = task.task_id, task.name
        _run_one(executor, task, state, out, err)
        if state.get("exit_after_reply"):
            return _exit_worker()
        runner = state.get("runner")
        if runner is not None and runner.is_async:
            return _serve_async(executor, runner, state, out, err)
        if runner is not None and runner.grouped:
            return _serve_grouped(executor, runner, state, out, err)
        if runner is not None and runner.threads:
            return _serve_threaded(executor, runner, state, out, err)


def _exit_worker():
    """Ends this worker process once what it printed and its metrics are out (`max_calls`
    reached)."""
    metrics = sys.modules.get("oxray.util.metrics")
    if metrics is not None:
        metrics.flush()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


# Whether task state goes to the state API (where a task's log range is shown).
_REPORTING = os.environ.get("OXRAY_TASK_EVENTS_REPORT_INTERVAL_MS", "").strip() != "0"

# Where the last task's output ended, and when. A task that comes right after it starts
# there: a busy worker looks where its files end once a task, not twice (each look is two
# system calls). After a pause it looks again, so that what other threads printed while
# the worker was idle is not put down to the next task.
_last_end = [None, 0.0]
_BACK_TO_BACK_S = 0.01


def _log_offsets():
    """Where this worker's stdout and stderr files end now (None when they are not files)."""
    try:
        return os.lseek(1, 0, os.SEEK_CUR), os.lseek(2, 0, os.SEEK_CUR)
    except OSError:
        return None


def _task_log_start():
    end, at = _last_end
    if end is not None and time.monotonic() - at < _BACK_TO_BACK_S:
        return end
    return _log_offsets()


def _task_log_end():
    end = _log_offsets()
    _last_end[0], _last_end[1] = end, time.monotonic()
    return end


def _error_text(error):
    """A task's error as the state API shows it: its traceback without oxray's own frames
    (the worker loop's), cut to a readable size."""
    tb = error.__traceback__
    while tb is not None and _is_ours(tb.tb_frame.f_code.co_filename):
        tb = tb.tb_next
    text = "".join(traceback.format_exception(type(error), error, tb))
    return text if len(text) <= 8192 else text[:4096] + "\n...\n" + text[-4096:]


def _is_ours(filename):
    return os.path.abspath(filename).startswith(_PACKAGE)


_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep


def exit_decision(error: SystemExit, in_actor: bool):
    """What a SystemExit out of a call means, as in Ray: exit_actor() and an actor's
    `sys.exit(0)` end the actor on purpose ("actor", it is not restarted); any other exit
    ends the worker process with its code ("process", exit code), which its owner sees as
    a crash (a task is retried, an actor restarted as their options allow)."""
    if isinstance(error, ActorExit):
        return "actor", 0
    code = error.code
    if code is None:
        code = 0
    elif not isinstance(code, int):
        code = 1  # sys.exit("message"): Python prints it and exits with 1
    if in_actor and code == 0:
        return "actor", 0
    return "process", code


def _exit_of(error: SystemExit, in_actor: bool, name: str) -> ActorExit:
    """The ActorExit an exit out of `name` amounts to; an exit that ends the process does
    it here, with what was printed written out first."""
    kind, code = exit_decision(error, in_actor)
    if kind == "actor":
        return error if isinstance(error, ActorExit) else ActorExit(f"the actor exited with exit code 0 in {name}")
    if not isinstance(error.code, (int, type(None))):
        print(error.code, file=sys.stderr)
    print(f"the worker exits with exit code {code}: sys.exit() in {name}", file=sys.stderr)
    metrics = sys.modules.get("oxray.util.metrics")
    if metrics is not None:
        metrics.flush()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _died_by_exit(name, error):
    """What the caller of the call that ended the actor gets, as in Ray: its death."""
    actor_id = current_context.get("actor_id")
    return serialization.dumps(ActorDiedError(f"the actor {actor_id} exited intentionally in {name}: {error}",
                                              actor_id))


def _refuse(executor, task):
    """A call that came after exit_actor(): it does not run, its caller sees the death."""
    actor_id = current_context.get("actor_id")
    error = ActorDiedError(f"the actor {actor_id} exited intentionally before {task.name} ran", actor_id)
    executor.finish(task.task_id, serialization.dumps(error), True)


def _shutdown_hook(instance):
    """Runs the actor's `__ray_shutdown__`, as Ray does when an actor ends gracefully (not
    when it is killed); what it raises is printed and the actor ends all the same."""
    hook = getattr(instance, "__ray_shutdown__", None)
    if hook is None:
        return
    try:
        hook()
    except BaseException:
        traceback.print_exc()
        print("__ray_shutdown__ raised; the actor ends anyway", file=sys.stderr)


def _exit_actor(state, own=""):
    """Ends this actor for good once the call that asked for it (`own`) is answered, and the
    calls running beside it on other threads too, as in Ray: its atexit handlers run, its
    name is freed, and its owner marks it dead without restarting it (an intentional exit
    is not a failure), failing the calls still queued."""
    import atexit

    runner = state.get("runner")
    if runner is not None and not runner.is_async:  # an async actor's loop waited already
        runner.wait_for_others(own)

    _shutdown_hook(state.get("actor"))
    try:
        atexit._run_exitfuncs()
    except BaseException:  # the actor ends whatever its handlers do
        pass
    options = state.get("options") or {}

    def tell_owner():
        from oxray._private import worker

        client = worker.client()
        if options.get("name"):
            client.remove_actor(options["name"], options.get("namespace") or "default")
        client.kill_actor(options["actor_id"], "", options.get("owner"), True)

    # The owner retires this worker; should it not answer, the process ends anyway.
    teller = threading.Thread(target=tell_owner, name="exit-actor", daemon=True)
    teller.start()
    teller.join(timeout=10)
    _exit_worker()


def _run_one(executor, task, state, out, err, decoded=None):
    """Runs a task in this thread and hands back its reply."""
    task_id, name, num_returns = task.task_id, task.name, task.num_returns
    exiting = False
    error_text = ""
    # A normal task runs alone in its worker: what it printed is a range of the worker's logs.
    before = _task_log_start() if _REPORTING and not (task.actor_creation or task.actor_method) else None
    try:
        result = _run(task, state, decoded)
        if task.streaming:  # streaming: each value goes as it comes, the reply says it ended
            generators.stream(executor, task_id, result)
            result = None
        reply = _encode(name, result, num_returns, task.result_store, task_id)
    except KeyboardInterrupt:  # `cancel` interrupted it
        reply = (serialization.dumps(TaskCancelledError(f"task {name} was cancelled while it ran")), True, [], [])
    except SystemExit as error:  # exit_actor() or sys.exit(): the caller sees the death
        error = _exit_of(error, bool(task.actor_creation or task.actor_method), name)
        reply = (_died_by_exit(name, error), True, [], [])
        if task.actor_method:
            state["runner"].exiting = True  # calls that come from now on do not run
            # Of calls exiting at once on several threads, the first ends the actor.
            exiting = state.setdefault("exiting_call", task_id) == task_id
    except BaseException as error:  # the task's failure is its result
        reply = (serialization.dumps_error(name, error), True, [], [])
        error_text = _error_text(error)
    out.flush()
    err.flush()
    after = before and _task_log_end()
    offsets = [before[0], after[0], before[1], after[1]] if after else []
    output = _prefixed(out.take(), name) + _prefixed(err.take(), name)
    executor.finish(task_id, reply[0], reply[1], reply[2], output, reply[3], bool(state.get("exit_after_reply")),
                    error_text, offsets)
    if exiting:
        _exit_actor(state, task_id)


def _run_counted(executor, runner, task, state, out, err, decoded=None):
    """Runs a call of an actor that runs several at once, known as running meanwhile so
    that an exit waits for it; once the actor is exiting, a new call is refused. (Added
    before the check: an exit that starts in between still sees it.)"""
    runner.running.add(task.task_id)
    if runner.exiting:
        runner.running.discard(task.task_id)
        return _refuse(executor, task)
    _run_one(executor, task, state, out, err, decoded)
    runner.running.discard(task.task_id)


def _serve_threaded(executor, runner, state, out, err):
    """A threaded actor: each of its `max_concurrency` threads takes the next call itself
    and runs it, so a call reaches the thread that runs it with no handoff in between."""

    def take_calls():
        while (task := executor.next_task(True)) is not None:
            current_context["task_id"], current_context["task_name"] = task.task_id, task.name
            _run_counted(executor, runner, task, state, out, err)

    threads = [threading.Thread(target=take_calls, name=f"actor-{i}", daemon=True) for i in range(runner.threads)]
    for thread in threads:
        thread.start()
    for thread in threads:
        while thread.is_alive():
            try:
                thread.join()
            except KeyboardInterrupt:  # a cancel meant for a call: calls here run to their end
                continue


def _serve_grouped(executor, runner, state, out, err):
    """An actor with concurrency groups: this thread takes each call and queues it for its
    group, whose own threads run it, so a group that is busy holds up no other group."""
    import queue

    queues = {}

    def run_group(calls):
        while True:
            task, decoded = calls.get()
            current_context["task_id"], current_context["task_name"] = task.task_id, task.name
            _run_counted(executor, runner, task, state, out, err, decoded)

    def queue_of(group):
        if group not in queues:
            queues[group] = queue.SimpleQueue()
            for i in range(runner.group_sizes()[group]):
                threading.Thread(target=run_group, args=(queues[group],), name=f"actor-{group}-{i}",
                                 daemon=True).start()
        return queues[group]

    while True:
        try:
            task = executor.next_task(True)
        except KeyboardInterrupt:  # a cancel meant for a call: calls here run to their end
            continue
        if task is None:
            return
        try:
            decoded = _decode(task)
            group = runner.group(task.actor_method, decoded[2])
        except BaseException as error:  # a bad group or arguments: the call's own failure
            executor.finish(task.task_id, serialization.dumps_error(task.name, error), True, error_text=_error_text(error))
            continue
        queue_of(group).put((task, decoded))


def _serve_async(executor, runner, state, out, err):
    """An async actor: its event loop runs in this thread and starts each call as it
    arrives (the native side writes a byte to a pipe the loop watches), so a call reaches
    its coroutine with no other thread in between."""
    wake_read, wake_write = os.pipe()
    os.set_blocking(wake_read, False)
    os.set_blocking(wake_write, False)
    executor.notify_fd(wake_write)
    loop = runner.loop

    def arrived():
        try:
            os.read(wake_read, 4096)
        except BlockingIOError:
            pass
        try:
            while (task := executor.try_next_task()) is not None:
                current_context["task_id"], current_context["task_name"] = task.task_id, task.name
                if task.actor_method:
                    _submit_concurrent(executor, runner, task, state, out, err)
                else:
                    _run_one(executor, task, state, out, err)
        except EOFError:
            loop.stop()

    loop.add_reader(wake_read, arrived)
    loop.call_soon(arrived)  # calls that came before the pipe was watched
    while True:
        try:
            loop.run_forever()
            return
        except KeyboardInterrupt:  # a cancel that came as a call ended: nothing to stop
            continue


def _encode(name, result, num_returns, result_store="", task_id=""):
    """`(result, is_error, returns, contained)` for `finish`. The ObjectRefs inside the
    values are held at their owners for the caller before the reply leaves. Large results
    may go to the node store the caller named (`result_store`)."""
    if num_returns > 1:
        values = list(result)
        # Fewer values fill the refs they can (the caller fails the rest); more is an error.
        if len(values) > num_returns:
            raise ValueError(f"{name} returned {len(values)} values, but num_returns={num_returns}")
    else:
        values = [result]
    encoded = [serialization.dumps_result(v, result_store, task_id) for v in values]
    nested = [(ref.hex(), index) for index, (_, refs) in enumerate(encoded) for ref in refs]
    contained = []
    if nested:
        from oxray._private import worker

        owners = worker.client().hold_for_caller([object_id for object_id, _ in nested])
        contained = [(object_id, owner, index) for (object_id, owner), (_, index) in zip(owners, nested)]
    if num_returns > 1:
        return b"", False, [data for data, _ in encoded], contained
    return encoded[0][0], False, [], contained


def _submit_concurrent(executor, runner, task, state, out, err):
    """Starts a call of an async actor and goes back for the next one."""
    task_id, name, method = task.task_id, task.name, task.actor_method
    num_returns, result_store = task.num_returns, task.result_store
    if runner.exiting:
        return _refuse(executor, task)
    try:
        call_args, call_kwargs, call_options = _decode(task)
    except BaseException as error:
        executor.finish(task_id, serialization.dumps_error(name, error), True, error_text=_error_text(error))
        return
    runner.running.add(task_id)

    def done(result, error):
        runner.running.discard(task_id)
        # Calls running at once share the streams: what was printed goes with the call
        # that ends first.
        out.flush()
        err.flush()
        output = _prefixed(out.take(), name) + _prefixed(err.take(), name)
        if isinstance(error, SystemExit):
            error = _exit_of(error, True, name)
            executor.finish(task_id, _died_by_exit(name, error), True, [], output)
            return _exit_async_actor(runner, state)
        if error is None:
            try:
                data, is_error, returns, contained = _encode(name, result, num_returns, result_store, task_id)
                executor.finish(task_id, data, is_error, returns, output, contained)
                return
            except BaseException as e:  # the result does not serialize
                error = e
        executor.finish(task_id, serialization.dumps_error(name, error), True, [], output,
                        error_text=_error_text(error))

    consume = (lambda values: generators.stream_async(executor, task_id, values)) if task.streaming else None
    runner.submit(method, call_args, call_kwargs, done, call_options, consume)


def _exit_async_actor(runner, state):
    """exit_actor() on an async actor: new calls are refused, the ones running go on on the
    loop until they end (or the grace time is over), then the actor ends."""
    if runner.exiting:
        return  # another call asked first and ends it
    runner.exiting = True

    async def when_idle():
        await runner.wait_for_others_async()
        _exit_actor(state)

    # Held, as the loop keeps only a weak reference to its tasks.
    state["exit_task"] = runner.loop.create_task(when_idle())


if __name__ == "__main__":
    main()
