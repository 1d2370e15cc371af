"""Streaming execution: every physical operator runs at once, blocks flow between them as
store objects, and only the driver of the execution (the process iterating, or a split
coordinator) holds their references. The head is not on this path.

Backpressure: new data enters the pipeline (the first operator launches) only while the
bytes of blocks produced and not yet consumed, with an estimate for those being made, stay
under the budget (by default half the cluster's object store); later operators always run,
since they turn blocks into blocks. A slow consumer therefore slows the reads."""

import collections
import time
from typing import Any, Deque, Dict, Iterator, List, Optional

import oxray
from oxray import exceptions
from oxray.data import _plan
from oxray.data._plan import ActorStage, Limit, Piece, TaskStage
from oxray.data._transforms import StageActor, StageTask


class _Launch:
    """One call of an operator: its input and, once launched, its two result refs."""

    __slots__ = ("inputs", "block", "meta", "actor", "result", "launched")

    def __init__(self, inputs):
        self.inputs = inputs  # a ReadTask, or a list of Pieces
        self.block = self.meta = self.actor = self.result = None
        self.launched = time.monotonic()


class OpStats:
    def __init__(self, name: str):
        self.name, self.tasks, self.rows, self.bytes, self.wall_s, self.cpu_s = name, 0, 0, 0, 0.0, 0.0
        self.max_bytes = 0

    def add(self, meta: Dict[str, Any]) -> None:
        self.tasks += 1
        self.rows += meta["rows"]
        self.bytes += meta["bytes"]
        self.max_bytes = max(self.max_bytes, meta["bytes"])
        self.wall_s += meta["wall_s"]
        self.cpu_s += meta["cpu_s"]


class _Operator:
    def __init__(self, spec, resources: Dict[str, float]):
        self.spec = spec
        self.queue: Deque[Any] = collections.deque()  # inputs: Pieces, or ReadTasks
        self.running: Deque[_Launch] = collections.deque()  # in launch order
        self.upstream_done = False
        self.actors: List[Dict[str, Any]] = []
        self.remote_args = dict(getattr(spec, "remote_args", {}))
        self.cap, self.pool, self.per_actor = 0, (0, 0), 0
        if isinstance(spec, Limit):
            self.stats = OpStats(f"Limit[{spec.limit}]")
            return
        self.stats = OpStats(spec.stage.name)
        if isinstance(spec, TaskStage):
            self.cap = task_cap(float(self.remote_args.get("num_cpus", 1) or 0), resources, spec.concurrency)
        else:
            self.pool = spec.strategy.bounds(pool_max(self.remote_args, resources))
            self.per_actor = spec.strategy.max_tasks_in_flight_per_actor or 4
            self.cap = self.pool[1] * self.per_actor

    @property
    def idle(self) -> bool:
        return not self.queue and not self.running

    @property
    def done(self) -> bool:
        return self.upstream_done and self.idle


def task_cap(cpus_per_task: float, resources: Dict[str, float], concurrency: Optional[int]) -> int:
    """How many of a task operator's tasks may run at once: as many as the cluster's CPUs
    hold, and one more to keep them busy between tasks; `concurrency` caps it."""
    cpus = max(1.0, float(resources.get("CPU", 1)))
    fits = int(cpus // cpus_per_task) if cpus_per_task > 0 else int(cpus) * 2
    cap = max(1, fits) + 1
    return min(cap, concurrency) if concurrency else cap


def pool_max(remote_args: Dict[str, Any], resources: Dict[str, float]) -> int:
    """The largest pool an autoscaling actor operator grows to: as many actors as fit."""
    gpus = float(remote_args.get("num_gpus", 0) or 0)
    if gpus:
        return max(1, int(float(resources.get("GPU", 0)) // gpus))
    cpus = float(resources.get("CPU", 1))
    per = float(remote_args.get("num_cpus", 1) or 0)
    return max(1, int(cpus // per)) if per else max(1, int(cpus))


class Execution:
    """An iterator of the output pieces of a plan, in order. `close()` stops it and cancels
    what is running."""

    def __init__(self, plan: _plan.Plan, budget_bytes: Optional[int] = None, progress=None, stats=None,
                 scheduling_strategy: Any = "SPREAD"):
        self.plan, self.progress, self.stats_sink = plan, progress, stats
        self.budget, self.scheduling = budget_bytes, scheduling_strategy
        self._closed = False
        self._iter = self._run()

    def __iter__(self):
        return self

    def __next__(self) -> Piece:
        return next(self._iter)

    def close(self) -> None:
        self._closed = True
        self._iter.close()

    # ---- the plan, segment by segment --------------------------------------------------

    def _run(self) -> Iterator[Piece]:
        began = time.perf_counter()
        try:
            yield from self._segment(self.plan)
        finally:
            if self.stats_sink is not None:
                self.stats_sink.finish(time.perf_counter() - began)
            if self.progress is not None:
                self.progress.close()

    def _segment(self, plan: _plan.Plan) -> Iterator[Piece]:
        barrier = _plan.last_barrier(plan.ops)
        if barrier is not None:
            upstream = list(self._segment(_plan.Plan(plan.source, plan.ops[:barrier])))
            op = plan.ops[barrier]
            began = time.perf_counter()
            pieces = op.run(upstream)
            if self.stats_sink is not None:
                self.stats_sink.barrier(op.name, pieces, time.perf_counter() - began)
            source, ops = _plan.BlocksSource(tuple(pieces)), plan.ops[barrier + 1:]
        else:
            source, ops = plan.source, plan.ops
        yield from self._stream(source, ops)

    def _source_items(self, source) -> Iterator[Any]:
        if isinstance(source, _plan.ReadSource):
            yield from source.tasks
        elif isinstance(source, _plan.BlocksSource):
            yield from source.pieces
        elif isinstance(source, _plan.UnionSource):
            for child in source.plans:
                # Each input runs as an execution of its own, one after the other.
                yield from Execution(child, self.budget, stats=self.stats_sink, scheduling_strategy=self.scheduling)
        else:
            raise TypeError(f"unknown source {source!r}")

    # ---- one segment: the streaming loop -----------------------------------------------

    def _stream(self, source, ops) -> Iterator[Piece]:
        resources = oxray.cluster_resources()
        operators = [_Operator(spec, resources) for spec in _plan.physical(source, ops)]
        if self.stats_sink is not None:
            for op in operators:
                self.stats_sink.operator(op.stats)
        items = self._source_items(source)
        output: Deque[Piece] = collections.deque()
        self._output, self._source_stopped = output, False
        source_done = False
        try:
            while not self._closed:
                if not source_done:
                    source_done = self._admit(operators, items, output)
                if source_done and operators:
                    operators[0].upstream_done = True
                self._propagate(operators)
                for op in reversed(operators):
                    self._launch_ready(op, operators)
                while output:
                    piece = output.popleft()
                    if self.progress is not None:
                        self.progress.update(piece.rows)
                    if piece.rows > 0:
                        yield piece
                if source_done and all(op.done for op in operators):
                    return
                if any(op.running for op in operators):
                    self._wait(operators)
        finally:
            self._shutdown(operators)
            if hasattr(items, "close"):
                items.close()

    def _admit(self, operators, items, output) -> bool:
        """Feeds the first operator from the source while it has room and the pipeline is
        under its budget; whether the source is exhausted (or no longer needed)."""
        first = operators[0] if operators else None
        while not self._source_stopped:
            if first is not None and not self._may_admit(operators, first):
                return False
            item = next(items, None)
            if item is None:
                return True
            if first is None:
                output.append(item)  # one at a time: the consumer may stop after any
                return False
            first.queue.append(item)
            self._launch_ready(first, operators)
        return True

    def _propagate(self, operators) -> None:
        for index in range(len(operators) - 1):
            if operators[index].done:
                operators[index + 1].upstream_done = True

    def _queued_bytes(self, operators) -> int:
        total = 0
        for op in operators:
            total += sum(p.nbytes for p in op.queue if isinstance(p, Piece))
            if op.running:
                made = op.stats.bytes / op.stats.tasks if op.stats.tasks else 0
                total += int(made * len(op.running))
        return total

    def _may_admit(self, operators, first) -> bool:
        """Whether new data may enter: the first operator has room, and the pipeline is
        under its budget or has nothing running (so a block above the budget still flows)."""
        if isinstance(first.spec, (TaskStage, ActorStage)) and len(first.running) >= first.cap:
            return False
        if self.budget is None or not any(op.running for op in operators):
            return True
        return self._queued_bytes(operators) < self.budget

    # ---- launching -------------------------------------------------------------------------

    def _launch_ready(self, op: _Operator, operators) -> bool:
        """Launches what the operator can; whether it took everything queued."""
        spec = op.spec
        if isinstance(spec, Limit):
            self._pass_limit(op, operators)
            return True
        while op.queue and len(op.running) < op.cap:
            if isinstance(spec, TaskStage) and spec.reads:
                launch = _Launch(op.queue.popleft())
            else:
                queue = list(op.queue)
                count = _plan.bundle(queue, spec.min_rows, op.upstream_done)
                if count is None:
                    return False
                launch = _Launch([op.queue.popleft() for _ in range(count)])
            if isinstance(spec, TaskStage):
                self._launch_task(op, launch)
            elif not self._launch_on_actor(op, launch):
                op.queue.extendleft(reversed(launch.inputs))
                return False
            op.running.append(launch)
        return not op.queue

    def _task_function(self, op: _Operator):
        fn = getattr(op, "_remote", None)
        if fn is None:
            options = {"num_returns": 2, "scheduling_strategy": self.scheduling, **op.remote_args}
            fn = op._remote = oxray.remote(StageTask(op.spec.stage)).options(**options)
        return fn

    def _launch_task(self, op: _Operator, launch: _Launch) -> None:
        fn = self._task_function(op)
        if op.spec.reads:
            launch.block, launch.meta = fn.remote(launch.inputs.read, [])
        else:
            bounds = [(p.start, p.stop) for p in launch.inputs]
            launch.block, launch.meta = fn.remote(None, bounds, *[p.ref for p in launch.inputs])

    def _launch_on_actor(self, op: _Operator, launch: _Launch) -> bool:
        (low, high), per = op.pool, op.per_actor
        while len(op.actors) < low:
            self._start_actor(op)
        actor = min(op.actors, key=lambda a: a["busy"])
        if actor["busy"] >= per:
            if len(op.actors) >= high:
                return False
            actor = self._start_actor(op)
        bounds = [(p.start, p.stop) for p in launch.inputs]
        launch.block, launch.meta = actor["handle"].run.options(num_returns=2).remote(bounds,
                                                                                   *[p.ref for p in launch.inputs])
        launch.actor = actor
        actor["busy"] += 1
        return True

    def _start_actor(self, op: _Operator) -> Dict[str, Any]:
        cls = getattr(op, "_actor_class", None)
        if cls is None:
            args = {k: v for k, v in op.remote_args.items() if k not in ("max_retries", "retry_exceptions")}
            args.setdefault("num_cpus", 1)
            args.setdefault("scheduling_strategy", self.scheduling)
            cls = op._actor_class = oxray.remote(StageActor).options(**args)
        actor = {"handle": cls.remote(op.spec.stage), "busy": 0}
        op.actors.append(actor)
        return actor

    # ---- completions -----------------------------------------------------------------------

    def _wait(self, operators) -> None:
        pending = {l.meta: l for op in operators for l in op.running if l.result is None}
        if pending:
            ready, _ = oxray.wait(list(pending), num_returns=1, timeout=0.5, fetch_local=False)
            ready_set = set(ready)
            for ref in list(pending):
                if ref in ready_set:
                    self._finish(pending[ref], operators)
        for index, op in enumerate(operators):
            while op.running and op.running[0].result is not None:
                launch = op.running.popleft()
                piece = Piece(launch.block, 0, launch.result["rows"], launch.result["bytes"], launch.result["schema"])
                self._emit(operators, index, piece)

    def _finish(self, launch: _Launch, operators) -> None:
        op = next(op for op in operators if launch in op.running)
        try:
            meta = oxray.get(launch.meta)
        except exceptions.RayActorError:
            if launch.actor is None:
                raise
            # A pool actor died: replace it, and run its call again on another.
            if launch.actor in op.actors:
                op.actors.remove(launch.actor)
            for other in op.running:
                if other.actor is launch.actor and other.result is None:
                    other.actor = None
            self._relaunch_orphans(op)
            return
        if launch.actor is not None:
            launch.actor["busy"] -= 1
        launch.result = meta
        op.stats.add(meta)

    def _relaunch_orphans(self, op: _Operator) -> None:
        for launch in op.running:
            if launch.result is None and launch.actor is None:
                if not self._launch_on_actor(op, launch):
                    self._start_actor(op)
                    self._launch_on_actor(op, launch)

    def _emit(self, operators, index: int, piece: Piece) -> None:
        if index + 1 < len(operators):
            operators[index + 1].queue.append(piece)
        else:
            self._output.append(piece)

    def _pass_limit(self, op: _Operator, operators) -> None:
        index = operators.index(op)
        remaining = getattr(op, "_remaining", op.spec.limit)
        pieces, op._remaining = _plan.apply_limit(list(op.queue), remaining)
        op.queue.clear()
        op.stats.rows += sum(p.rows for p in pieces)
        for piece in pieces:
            self._emit(operators, index, piece)
        if op._remaining <= 0:
            self._source_stopped = True
            # Enough rows: nothing before the limit needs to run any more.
            for upstream in operators[:index]:
                upstream.running.clear()  # their results are dropped as they come
                upstream.queue.clear()
                upstream.upstream_done = True
            op.upstream_done = True

    # ---- stopping --------------------------------------------------------------------------

    def _shutdown(self, operators) -> None:
        """Drops what is queued and running (tasks that run on finish and their results are
        freed: interrupting them could stop a worker in the middle of an import) and ends
        the actor pools."""
        for op in operators:
            op.queue.clear()
            op.running.clear()
            for actor in op.actors:
                try:
                    oxray.kill(actor["handle"])
                except Exception:  # already dead
                    pass
            op.actors.clear()
