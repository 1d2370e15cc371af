"""Worker logs rotate at their size cap, as Ray's do: past OXRAY_LOG_ROTATION_MAX_BYTES a
worker's `worker-<id>.out` becomes `.out.1` (older ones move up to the backup count) and the
worker goes on writing to a fresh file; the newest output stays readable through the log API."""

import tempfile
import time
from pathlib import Path

import pytest

import oxray

from conftest import Cluster, driver_of


@pytest.fixture(scope="module")
def small_logs():
    with tempfile.TemporaryDirectory(prefix="oxray-py-") as tmp:
        cluster = Cluster(Path(tmp))
        cluster.env.update(OXRAY_LOG_ROTATION_MAX_BYTES="20000", OXRAY_LOG_ROTATION_BACKUP_COUNT="2")
        cluster.start()
        try:
            with driver_of(cluster):
                yield cluster
        finally:
            cluster.stop()


@oxray.remote
class Chatty:
    def talk(self, i):
        print(f"line {i:04d} " + "x" * 5000, flush=True)
        return i


def test_a_worker_log_past_its_cap_rotates_and_keeps_the_backup_count(small_logs):
    chatty = Chatty.remote()
    for i in range(40):  # 200 KB over about 8 s: several checks of the cap
        oxray.get(chatty.talk.remote(i))
        time.sleep(0.2)
    time.sleep(2.5)  # one more check after the last line
    sessions = Path(small_logs.env["OXRAY_TEMP_DIR"])
    rotated = list(sessions.rglob("worker-*.out.1"))
    assert len(rotated) == 1, sorted(p.name for p in sessions.rglob("worker-*"))
    current = Path(str(rotated[0])[:-2])
    assert current.exists() and Path(f"{current}.2").exists() and not Path(f"{current}.3").exists()
    assert current.stat().st_size <= 20000 + 2 * 5100 * 3, "a full log does not grow for long"
    # The newest output is in the current file, the older in the backups, nothing in between lost.
    newest = current.read_text() or Path(f"{current}.1").read_text()
    assert "line 0039" in newest or "line 0039" in Path(f"{current}.1").read_text()
    backups = Path(f"{current}.1").read_text() + Path(f"{current}.2").read_text() + current.read_text()
    numbers = sorted(int(line.split()[1]) for line in backups.splitlines() if line.startswith("line "))
    assert numbers == list(range(numbers[0], 40)), "the files hold an unbroken run of the last lines"
