"""A short chaos soak (`bench/chaos.py`, `make chaos` runs ten minutes of it): tasks with
retries, objects across nodes, actor calls, jobs and (with torch) training runs while
workers, agents and the head are SIGKILLed. Nothing is lost and nothing hangs."""

import json
import os
import subprocess
import sys

from conftest import OXRAY_BIN, REPO


def test_a_short_chaos_soak_loses_nothing_and_nothing_hangs(tmp_path):
    figures_file = tmp_path / "chaos.json"
    out = subprocess.run([sys.executable, str(REPO / "bench" / "chaos.py"), "--duration", "45", "--kill-every", "3",
                          "--hang-s", "90", "--json", str(figures_file)],
                         env=dict(os.environ, OXRAY_BIN=OXRAY_BIN), capture_output=True, text=True, timeout=1200)
    print(out.stdout)
    report = out.stdout + out.stderr[-4000:]
    assert figures_file.exists(), report
    figures = json.loads(figures_file.read_text())
    assert {"worker", "agent", "head"} <= set(figures["kills"]), figures["kills"]
    for kind, counts in figures["work"].items():
        assert counts["lost"] == 0 and counts["hung"] == 0, (kind, counts, figures["errors"])
        if kind != "train runs":  # a run may take longer than the soak: then it has none yet
            assert counts["completed"] > 0, (kind, counts)
    assert out.returncode == 0, report
