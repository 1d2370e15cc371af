"""What a run prints while it goes, in the shape of Ray Tune's output: a status block with a
table of trials (status, varied parameters, iterations, time, metrics) every few seconds and
at the end, and a line when a trial completes or fails. Printed to stdout, so a job's logs
show the same as the terminal. The rendering is pure; `Reporter` decides when."""

import collections
import datetime
import os
import sys
import time
from typing import Any, Callable, Dict, List, Optional, Sequence

from oxray.tune._metrics import flatten, is_number

# Result keys every report carries: not shown as metrics of their own.
AUTO_KEYS = {"training_iteration", "time_this_iter_s", "time_total_s", "timestamp", "date", "done", "trial_id",
             "pid", "hostname", "node_ip", "time_since_restore", "iterations_since_restore", "checkpoint_dir_name",
             "should_checkpoint", "experiment_tag", "warmup_time"}
STATUS_ORDER = ("RUNNING", "PAUSED", "PENDING", "TERMINATED", "ERROR")
ALL_ROWS_UP_TO = 20  # more trials than this: at most ROWS_PER_STATUS of each status
ROWS_PER_STATUS = 5
MAX_PARAMS, MAX_METRICS = 6, 4


def _status_rank(status: str) -> int:
    return STATUS_ORDER.index(status) if status in STATUS_ORDER else len(STATUS_ORDER)


def duration(seconds: float) -> str:
    seconds = int(seconds)
    if seconds < 60:
        return f"{seconds}s"
    hours, rest = divmod(seconds, 3600)
    return f"{hours}hr {rest // 60}min {rest % 60}s" if hours else f"{rest // 60}min {rest % 60}s"


def cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.5g}"
    text = str(value)
    return text if len(text) <= 20 else text[:17] + "..."


def varied_params(configs: Sequence[Dict[str, Any]]) -> List[str]:
    """The flattened config keys whose values differ between trials (all of a lone trial's)."""
    flat = [flatten(c) for c in configs]
    keys: List[str] = []
    for config in flat:
        keys += [k for k in config if k not in keys]
    if len(flat) > 1:
        keys = [k for k in keys if len({repr(c.get(k)) for c in flat}) > 1]
    return keys[:MAX_PARAMS]


def metric_columns(results: Sequence[Dict[str, Any]], metric: Optional[str]) -> List[str]:
    """The run's metric first, then the numbers the trials report, in the order first seen."""
    keys = [metric] if metric else []
    for result in results:
        for key, value in flatten(result, keep_config=False).items():
            if key not in keys and key not in AUTO_KEYS and is_number(value):
                keys.append(key)
    return keys[:MAX_METRICS]


def shown_rows(trials: Sequence) -> List[Any]:
    """Every trial when there are few; else the first few of each status, and a line saying
    how many more there are."""
    by_status: Dict[str, List] = collections.defaultdict(list)
    for trial in trials:
        by_status[trial.status].append(trial)
    rows: List[Any] = []
    for status in sorted(by_status, key=_status_rank):
        group = by_status[status]
        if len(trials) > ALL_ROWS_UP_TO and len(group) > ROWS_PER_STATUS:
            rows += group[:ROWS_PER_STATUS] + [f"... {len(group) - ROWS_PER_STATUS} more {status}"]
        else:
            rows += group
    return rows


def best(trials: Sequence, metric: Optional[str], mode: Optional[str]):
    if not metric or mode not in ("min", "max"):
        return None
    scored = [(flatten(t.last_result).get(metric), t) for t in trials]
    scored = [(v, t) for v, t in scored if is_number(v) and v == v]
    if not scored:
        return None
    return (max if mode == "max" else min)(scored, key=lambda vt: vt[0])


def status_block(trials: Sequence, metric: Optional[str], mode: Optional[str], elapsed_s: float,
                 resources: Optional[str] = None, now: Optional[datetime.datetime] = None) -> str:
    counts = collections.Counter(t.status for t in trials)
    order = sorted(counts, key=_status_rank)
    lines = ["Trial status: " + " | ".join(f"{counts[s]} {s}" for s in order),
             f"Current time: {(now or datetime.datetime.now()).strftime('%Y-%m-%d %H:%M:%S')}. "
             f"Total running time: {duration(elapsed_s)}"]
    if resources:
        lines.append(f"Logical resource usage: {resources}")
    params = varied_params([t.config for t in trials])
    leader = best(trials, metric, mode)
    if leader is not None:
        value, trial = leader
        chosen = {k: v for k, v in flatten(trial.config).items() if k in params}
        lines.append(f"Current best trial: {trial.trial_id} with {metric}={value:.6g} and params={chosen}")
    lines.append(table(trials, params, metric_columns([t.last_result for t in trials], metric)))
    return "\n".join(lines)


def table(trials: Sequence, params: List[str], metrics: List[str]) -> str:
    header = ["Trial name", "status", *params, "iter", "total time (s)", *metrics]
    body: List[List[str]] = []
    notes: List[str] = []
    for row in shown_rows(trials):
        if isinstance(row, str):
            notes.append(row)
            continue
        config, result = flatten(row.config), flatten(row.last_result, keep_config=False)
        body.append([str(row), row.status, *(cell(config.get(p)) for p in params),
                     cell(result.get("training_iteration")), cell(result.get("time_total_s")),
                     *(cell(result.get(m)) for m in metrics)])
    widths = [max(len(h), *(len(r[i]) for r in body)) if body else len(h) for i, h in enumerate(header)]

    def line(cells: List[str]) -> str:
        # Names and statuses read left to right; numbers line up on the right.
        return "| " + "  ".join(c.ljust(w) if i < 2 else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths))) + " |"

    rule = "+" + "-" * (len(line(header)) - 2) + "+"
    return "\n".join([rule, line(header), rule, *(line(r) for r in body), rule, *notes])


def trial_ended(trial, elapsed_s: float, now: Optional[datetime.datetime] = None) -> str:
    iterations = trial.last_result.get("training_iteration", 0)
    at = (now or datetime.datetime.now()).strftime("%Y-%m-%d %H:%M:%S")
    if trial.status == "ERROR":
        return (f"Trial {trial} errored after {iterations} iterations at {at}. Total running time: "
                f"{duration(elapsed_s)}\nError file: {os.path.join(trial.path, 'error.txt')}")
    return f"Trial {trial} completed after {iterations} iterations at {at}. Total running time: {duration(elapsed_s)}"


class Reporter:
    """Prints the status block every `interval_s` (5 s in a terminal, 30 s into a log, as
    Ray's heartbeat) and at the end, and a line per ended trial; nothing with verbose=0."""

    def __init__(self, verbose: int, metric: Optional[str], mode: Optional[str], interval_s: Optional[float] = None):
        self.verbose, self.metric, self.mode = verbose, metric, mode
        self.interval_s = interval_s if interval_s is not None else (5.0 if sys.stdout.isatty() else 30.0)
        self.started = self.last = time.monotonic()

    def begin(self, experiment_path: str) -> None:
        if self.verbose >= 1:
            print(f"View detailed results here: {experiment_path}", flush=True)

    def maybe_print(self, trials: List, final: bool = False, resources: Optional[Callable[[], str]] = None) -> None:
        """`resources`: what says the resource use, asked only when the block is printed."""
        now = time.monotonic()
        if self.verbose < 1 or not (final or now - self.last >= self.interval_s):
            return
        self.last = now
        usage = resources() if resources else None
        print(status_block(trials, self.metric, self.mode, now - self.started, usage) + "\n", flush=True)

    def ended(self, trial) -> None:
        if self.verbose >= 1:
            print(trial_ended(trial, time.monotonic() - self.started), flush=True)
