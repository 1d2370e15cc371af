"""A progress line per running pipeline: a tqdm bar when tqdm is installed, else a plain
line on stderr at most every few seconds and at the end."""

import sys
import time
from typing import Optional


class Progress:
    def __init__(self, name: str, total_rows: Optional[int] = None, enabled: bool = True):
        name = short(name)
        self.name, self.total, self.rows, self.blocks = name, total_rows, 0, 0
        self.enabled, self._bar, self._last = enabled, None, 0.0
        if enabled:
            try:
                from tqdm.auto import tqdm

                self._bar = tqdm(total=total_rows, desc=f"Running {name}", unit=" row", file=sys.stderr,
                                 leave=True, dynamic_ncols=True)
            except ImportError:
                self._bar = None

    def update(self, rows: int) -> None:
        self.rows += rows
        self.blocks += 1
        if not self.enabled:
            return
        if self._bar is not None:
            self._bar.update(rows)
            self._bar.set_postfix_str(f"{self.blocks} blocks", refresh=False)
        elif time.monotonic() - self._last > 5:
            self._line()

    def _line(self) -> None:
        self._last = time.monotonic()
        total = f"/{self.total}" if self.total is not None else ""
        print(f"Running {self.name}: {self.rows}{total} rows, {self.blocks} blocks done", file=sys.stderr, flush=True)

    def close(self) -> None:
        if not self.enabled:
            return
        self.enabled = False
        if self._bar is not None:
            self._bar.close()
        else:
            self._line()


def short(name: str, width: int = 60) -> str:
    """A pipeline's name for a progress line: its first and last operators when long."""
    ops = name.split("->")
    return name if len(name) <= width or len(ops) < 3 else f"{ops[0]}->...->{ops[-1]}"
