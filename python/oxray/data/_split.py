"""`streaming_split`: one execution per epoch, run by a coordinator actor that deals its
output to n consumers as pieces (a block reference and a row range), so no block is copied
to be shared out.

With `equal=True` every consumer gets exactly floor(rows / n) rows: a consumer may take at
most floor(produced / n) rows of what the execution has produced so far, which always
leaves enough in the buffer for the others to catch up, and the remainder is dropped."""

import collections
import threading
from typing import Deque, List, Optional, Tuple

import oxray
from oxray.data._plan import Piece
from oxray.data.iterator import DataIterator


def deal(buffer: Deque[Piece], allowance: Optional[int]) -> Tuple[List[Piece], int]:
    """Pieces from the front of `buffer` up to `allowance` rows (None: one whole piece), the
    last one cut; the rows dealt."""
    out, dealt = [], 0
    if allowance is None:
        if buffer:
            piece = buffer.popleft()
            return [piece], piece.rows
        return out, 0
    while buffer and dealt < allowance:
        piece = buffer[0]
        take = min(piece.rows, allowance - dealt)
        if take == piece.rows:
            buffer.popleft()
            out.append(piece)
        else:
            out.append(piece.cut(0, take))
            buffer[0] = piece.cut(take, piece.rows)
        dealt += take
    return out, dealt


def equal_allowance(produced: int, given: int, n: int) -> int:
    return produced // n - given


class SplitCoordinator:
    """The actor behind `streaming_split` (threaded: one call per consumer at a time)."""

    def __init__(self, dataset, n: int, equal: bool, locality_hints=None):
        self.dataset, self.n, self.equal = dataset, n, equal
        self.lock = threading.Condition()
        self.epoch, self.arrived = -1, set()
        self.execution = None
        self.buffer: Deque[Piece] = collections.deque()
        self.given = [0] * n
        self.produced = 0
        self.finished = False
        self.error: Optional[BaseException] = None
        self.pulling = False
        self.budget = dataset._context.budget_bytes()

    def start_epoch(self, index: int, epoch: int) -> None:
        """Returns once every consumer has asked for `epoch` (the epoch barrier)."""
        with self.lock:
            if epoch > self.epoch + 1 or epoch < self.epoch:
                raise ValueError(f"split {index} asked for epoch {epoch} while the splits are in epoch {self.epoch}")
            if epoch == self.epoch + 1:
                self.arrived.add(index)
                if len(self.arrived) == self.n:
                    self._begin(epoch)
                    self.lock.notify_all()
            while self.epoch < epoch:
                self.lock.wait(1.0)

    def _begin(self, epoch: int) -> None:
        if self.execution is not None:
            self.execution.close()
        self.epoch, self.arrived = epoch, set()
        self.buffer.clear()
        self.given, self.produced, self.finished, self.error = [0] * self.n, 0, False, None
        self.execution = self.dataset._execute(progress_name=f"split of {self.dataset._describe()}")

    def next(self, index: int, epoch: int) -> Optional[List[Piece]]:
        """The next pieces for consumer `index`, or None when its share of the epoch is done."""
        with self.lock:
            while True:
                if epoch != self.epoch:
                    raise ValueError(f"split {index} is in epoch {epoch}, the coordinator in {self.epoch}")
                if self.error is not None:
                    raise self.error
                allowance = equal_allowance(self.produced, self.given[index], self.n) if self.equal else None
                if allowance is None or allowance > 0:
                    pieces, rows = deal(self.buffer, allowance)
                    if pieces:
                        self.given[index] += rows
                        return pieces
                if self.finished:
                    return None
                # Another consumer is pulling, or the others must catch up first (unless one
                # has left the epoch already: its share is not waited for).
                if self.pulling or (self._buffered_too_much() and not self.arrived):
                    self.lock.wait(0.5)
                    continue
                self._pull()

    def _buffered_too_much(self) -> bool:
        return self.budget is not None and sum(p.nbytes for p in self.buffer) > self.budget

    def _pull(self) -> None:
        """Takes the execution's next piece into the buffer, without holding the lock."""
        self.pulling = True
        execution = self.execution
        self.lock.release()
        try:
            piece, error = next(execution, None), None
        except BaseException as e:  # reaches every consumer
            piece, error = None, e
        finally:
            self.lock.acquire()
            self.pulling = False
        if execution is not self.execution:
            return
        if error is not None:
            self.error = error
        elif piece is None:
            self.finished = True
        else:
            self.buffer.append(piece)
            self.produced += piece.rows
        self.lock.notify_all()

    def shutdown(self) -> None:
        with self.lock:
            if self.execution is not None:
                self.execution.close()


class StreamSplitIterator(DataIterator):
    """Consumer `index` of a streaming split."""

    def __init__(self, coordinator, index: int, n: int):
        self._coordinator, self._index, self._n = coordinator, index, n
        self._epoch = 0

    def _pieces(self):
        epoch = self._epoch
        self._epoch += 1
        oxray.get(self._coordinator.start_epoch.remote(self._index, epoch))
        while True:
            pieces = oxray.get(self._coordinator.next.remote(self._index, epoch))
            if pieces is None:
                return
            yield from pieces

    @property
    def coordinator(self):
        """The actor dealing the splits' rows (a trainer ends it with its worker group)."""
        return self._coordinator

    def world_size(self) -> int:
        return self._n

    def __repr__(self):
        return f"StreamSplitDataIterator(index={self._index}, n={self._n})"


def streaming_split(dataset, n: int, equal: bool, locality_hints=None) -> List[StreamSplitIterator]:
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise ValueError(f"streaming_split: n must be a positive integer, got {n!r}")
    if locality_hints is not None and len(locality_hints) != n:
        raise ValueError(f"streaming_split: {len(locality_hints)} locality hints for {n} splits")
    coordinator = oxray.remote(SplitCoordinator).options(num_cpus=0, max_concurrency=n + 4).remote(
        dataset, n, equal, locality_hints)
    return [StreamSplitIterator(coordinator, i, n) for i in range(n)]
