"""A short chaos soak (`bench/chaos.py`, `make chaos` runs ten minutes of it): tasks with
retries, objects across nodes, actor calls, jobs and (with torch) training runs while
workers, agents and the head are SIGKILLed. Nothing is lost and nothing hangs."""

import json
import os
import subprocess
import sys

from conftest import OXRAY_BIN, REPO


def test_a_short_chaos_soak_loses_nothing_and_nothing_hangs(tmp_path):
    figures_file, root = tmp_path / "chaos.json", tmp_path / "cluster"
    try:
        out = subprocess.run([sys.executable, str(REPO / "bench" / "chaos.py"), "--duration", "45", "--kill-every",
                              "3", "--hang-s", "90", "--json", str(figures_file), "--root", str(root)],
                             env=dict(os.environ, OXRAY_BIN=OXRAY_BIN), capture_output=True, text=True, timeout=1200)
    finally:  # a soak that timed out leaves no cluster behind
        env = {k: v for k, v in os.environ.items() if not k.startswith("OXRAY_")}
        subprocess.run([OXRAY_BIN, "stop", "--force"], env=dict(env, OXRAY_HOME=str(root / "home")),
                       capture_output=True, timeout=120)
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
