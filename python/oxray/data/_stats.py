"""What `Dataset.stats()` reports about the last execution: per operator, the calls, rows,
bytes and time its functions took, and the wall time of the whole run."""

from typing import List


class ExecutionStats:
    def __init__(self):
        self.operators: List = []
        self.barriers: List[str] = []
        self.wall_s = None

    def operator(self, op_stats) -> None:
        self.operators.append(op_stats)

    def barrier(self, name: str, pieces, wall_s: float) -> None:
        rows = sum(p.rows for p in pieces)
        self.barriers.append(f"Operator {name}: {len(pieces)} blocks, {rows} rows, {wall_s:.3f}s")

    def finish(self, wall_s: float) -> None:
        self.wall_s = wall_s

    def summary(self) -> str:
        if self.wall_s is None and not self.operators:
            return "The dataset has not been executed yet."
        lines = list(self.barriers)
        for i, op in enumerate(self.operators):
            mean = op.wall_s / op.tasks if op.tasks else 0.0
            lines.append(f"Operator {i} {op.name}: {op.tasks} tasks executed, {op.rows} rows output, "
                         f"{_size(op.bytes)} output")
            if op.tasks:
                lines.append(f"* Remote wall time: {op.wall_s:.3f}s total, {mean * 1000:.1f}ms mean per task")
                lines.append(f"* Remote cpu time: {op.cpu_s:.3f}s total")
                lines.append(f"* Output size per task: {_size(op.bytes // op.tasks)} mean, {_size(op.max_bytes)} max")
        if self.wall_s is not None:
            rows = self.operators[-1].rows if self.operators else 0
            rate = f", {rows / self.wall_s:.0f} rows/s" if self.wall_s > 0 and rows else ""
            lines.append(f"Dataset total execution time: {self.wall_s:.3f}s{rate}")
        return "\n".join(lines)


def _size(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f}{unit}" if unit == "B" else f"{n:.1f}{unit}"
        n /= 1024
    return f"{n}B"
