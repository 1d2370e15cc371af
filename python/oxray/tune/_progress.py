"""The compact status table printed while a run goes: trial counts by status and the best
result so far."""

import collections
import time
from typing import List, Optional

from oxray.tune._metrics import flatten, is_number


def best_line(trials: List, metric: Optional[str], mode: Optional[str]) -> str:
    if not metric or mode not in ("min", "max"):
        return ""
    scored = [(flatten(t.last_result).get(metric), t) for t in trials]
    scored = [(v, t) for v, t in scored if is_number(v)]
    if not scored:
        return ""
    value, trial = (max if mode == "max" else min)(scored, key=lambda vt: vt[0])
    return f" | best {metric}={value:.6g} ({trial.trial_id})"


def status_line(trials: List, metric: Optional[str], mode: Optional[str], elapsed_s: float) -> str:
    counts = collections.Counter(t.status for t in trials)
    parts = ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))
    return f"== Tune: {len(trials)} trials ({parts}) after {elapsed_s:.1f}s{best_line(trials, metric, mode)}"


class Reporter:
    """Prints at most every `interval_s`, and once at the end."""

    def __init__(self, verbose: int, metric: Optional[str], mode: Optional[str], interval_s: float = 5.0):
        self.verbose, self.metric, self.mode, self.interval_s = verbose, metric, mode, interval_s
        self.started = self.last = time.monotonic()

    def maybe_print(self, trials: List, final: bool = False) -> None:
        now = time.monotonic()
        if self.verbose < 1 or not (final or now - self.last >= self.interval_s):
            return
        self.last = now
        print(status_line(trials, self.metric, self.mode, now - self.started), flush=True)
