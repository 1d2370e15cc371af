"""A dataset's logical plan (a source and the operators after it, all lazy) and the pure
rules that turn it into physical operators: consecutive maps with the same compute fuse into
one stage, run as one task (or one actor call) per block."""

from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, NamedTuple, Optional, Tuple

from oxray.data._transforms import Stage, Transform


class Piece(NamedTuple):
    """Rows `start:stop` of the block behind `ref` (a store object). Splits and limits hand
    out pieces, so no block is copied to cut it."""

    ref: Any
    start: int
    stop: int
    nbytes: int
    schema: Any = None

    @property
    def rows(self) -> int:
        return self.stop - self.start

    def cut(self, start: int, stop: int) -> "Piece":
        """Rows `start:stop` of this piece (relative to it)."""
        rows = max(1, self.rows)
        return Piece(self.ref, self.start + start, self.start + stop, self.nbytes * (stop - start) // rows, self.schema)


@dataclass(frozen=True)
class ReadTask:
    """One task's share of a read: `read()` returns an iterable of blocks."""

    read: Callable[[], Any]
    rows: Optional[int] = None  # when known without reading (range, from_* sources)
    nbytes: Optional[int] = None


@dataclass(frozen=True)
class ReadSource:
    name: str
    tasks: Tuple[ReadTask, ...]


@dataclass(frozen=True)
class BlocksSource:
    """Blocks already in the store (from_* and materialized datasets)."""

    pieces: Tuple[Piece, ...]


@dataclass(frozen=True)
class UnionSource:
    plans: Tuple["Plan", ...]


@dataclass(frozen=True)
class ActorPoolStrategy:
    """Run a callable class on a pool of actors: a fixed `size`, or between `min_size` and
    `max_size` (growing while every actor is busy)."""

    size: Optional[int] = None
    min_size: Optional[int] = None
    max_size: Optional[int] = None
    max_tasks_in_flight_per_actor: Optional[int] = None

    def __post_init__(self):
        for name in ("size", "min_size", "max_size", "max_tasks_in_flight_per_actor"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or value < 1):
                raise ValueError(f"ActorPoolStrategy {name} must be a positive integer, got {value!r}")
        if self.size is not None and (self.min_size is not None or self.max_size is not None):
            raise ValueError("ActorPoolStrategy takes size, or min_size and max_size, not both")
        if self.min_size is not None and self.max_size is not None and self.min_size > self.max_size:
            raise ValueError(f"ActorPoolStrategy min_size {self.min_size} is above max_size {self.max_size}")

    def bounds(self, default_max: int) -> Tuple[int, int]:
        if self.size is not None:
            return self.size, self.size
        low = self.min_size or 1
        return low, max(low, self.max_size or default_max)


@dataclass(frozen=True)
class MapOp:
    transform: Transform
    compute: Optional[ActorPoolStrategy] = None  # None: tasks
    remote_args: Dict[str, Any] = field(default_factory=dict)
    min_rows: Optional[int] = None  # a batch size: blocks are bundled up to it before a call
    concurrency: Optional[int] = None  # the most tasks at once


@dataclass(frozen=True)
class LimitOp:
    limit: int


@dataclass(frozen=True)
class AllToAllOp:
    """A barrier: its input is executed in full, then `run(pieces) -> pieces`."""

    name: str
    run: Callable[[List[Piece]], List[Piece]]


@dataclass(frozen=True)
class Plan:
    source: Any
    ops: Tuple[Any, ...] = ()

    def then(self, op) -> "Plan":
        return Plan(self.source, self.ops + (op,))


# ---- physical operators ------------------------------------------------------------------

@dataclass
class TaskStage:
    stage: Stage
    remote_args: Dict[str, Any]
    min_rows: Optional[int] = None
    concurrency: Optional[int] = None
    reads: bool = False  # takes the source's read tasks as input


@dataclass
class ActorStage:
    stage: Stage
    strategy: ActorPoolStrategy
    remote_args: Dict[str, Any]
    min_rows: Optional[int] = None


@dataclass
class Limit:
    limit: int


def last_barrier(ops: Tuple[Any, ...]) -> Optional[int]:
    for i in range(len(ops) - 1, -1, -1):
        if isinstance(ops[i], AllToAllOp):
            return i
    return None


def physical(source: Any, ops: Tuple[Any, ...]) -> List[Any]:
    """The physical operators for a plan segment without barriers. Task maps with equal
    remote arguments fuse with each other and with a read before them; an actor map fuses
    with the actor maps after it that share its pool settings."""
    out: List[Any] = []
    if isinstance(source, ReadSource):
        out.append(TaskStage(Stage([], read_name=source.name), {}, reads=True))
    for op in ops:
        last = out[-1] if out else None
        if isinstance(op, LimitOp):
            out.append(Limit(op.limit))
        elif op.compute is None:
            fusable = isinstance(last, TaskStage) and last.remote_args == op.remote_args and \
                last.concurrency == op.concurrency and (op.min_rows is None or not last.stage.transforms)
            if fusable:
                last.stage.transforms.append(op.transform)
                last.min_rows = last.min_rows or op.min_rows
            else:
                out.append(TaskStage(Stage([op.transform]), dict(op.remote_args), op.min_rows, op.concurrency))
        else:
            if isinstance(last, ActorStage) and last.strategy == op.compute and last.remote_args == op.remote_args \
                    and op.min_rows is None:
                last.stage.transforms.append(op.transform)
            else:
                out.append(ActorStage(Stage([op.transform]), op.compute, dict(op.remote_args), op.min_rows))
    return out


def bundle(queue: List[Piece], min_rows: Optional[int], final: bool) -> Optional[int]:
    """How many pieces from the front of `queue` make the next call's input: one, or as
    many as reach `min_rows` (a batch size); None to wait for more (unless `final`)."""
    if not queue:
        return None
    if not min_rows:
        return 1
    rows = 0
    for i, piece in enumerate(queue):
        rows += piece.rows
        if rows >= min_rows:
            return i + 1
    return len(queue) if final else None


def row_ranges(total: int, parts: int) -> List[Tuple[int, int]]:
    """`parts` contiguous ranges covering `total` rows, sizes differing by at most one."""
    base, extra = divmod(total, parts)
    out, at = [], 0
    for i in range(parts):
        size = base + (1 if i < extra else 0)
        out.append((at, at + size))
        at += size
    return out


def apply_limit(pieces: List[Piece], remaining: int) -> Tuple[List[Piece], int]:
    """The pieces within a limit of `remaining` rows (the last one cut), and what is left."""
    out = []
    for piece in pieces:
        if remaining <= 0:
            break
        if piece.rows > remaining:
            piece = piece.cut(0, remaining)
        out.append(piece)
        remaining -= piece.rows
    return out, remaining
