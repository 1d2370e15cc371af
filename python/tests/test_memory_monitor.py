"""The memory monitor: a task that fills its node's memory past the threshold has its worker
ended before the kernel's OOM killer picks a process; the task fails with OutOfMemoryError or
runs again as its retries allow, and the node goes on working."""

import os
import time
from contextlib import contextmanager, nullcontext
from pathlib import Path

import pytest

import oxray
from oxray.exceptions import OutOfMemoryError

from conftest import Cluster, driver_of

HEADROOM = 1 << 30  # what a task may take before the monitor acts
STEP = 100 << 20


def _meminfo(name):
    line = next(l for l in Path("/proc/meminfo").read_text().splitlines() if l.startswith(name))
    return int(line.split()[1]) * 1024


def _used_and_total():
    """Where no cgroup of its own can be made: the memory cgroup's at the mount's root when it
    is limited below the machine's memory (a container's), else the machine's."""
    total = _meminfo("MemTotal:")
    machine = (total - _meminfo("MemAvailable:"), total)
    for limit, current, stat, key in (
            ("memory.max", "memory.current", "memory.stat", "inactive_file"),
            ("memory/memory.limit_in_bytes", "memory/memory.usage_in_bytes", "memory/memory.stat", "total_inactive_file")):
        try:
            read = [Path("/sys/fs/cgroup", f).read_text() for f in (limit, current, stat)]
            cap = int(read[0])
        except (OSError, ValueError):
            continue
        if cap < total:
            inactive = next((int(l.split()[1]) for l in read[2].splitlines() if l.startswith(key + " ")), 0)
            return int(read[1]) - inactive, cap
    return machine


# Far above what the hog reaches before the monitor acts, and below the machine's memory
# (else the agent reads the machine's, not the cgroup's).
CGROUP_LIMIT = min(8 << 30, _meminfo("MemTotal:") // 2)


def _own_v1_memory_cgroup():
    """The folder of this process's memory cgroup (v1), or None."""
    own = next((l.split(":", 2)[2] for l in Path("/proc/self/cgroup").read_text().splitlines()
                if "memory" in l.split(":")[1].split(",")), None)
    return Path("/sys/fs/cgroup/memory", own.lstrip("/")) if own else None


def _v1_memory_cgroup():
    """A new memory cgroup (v1) under this process's own, or None where none can be made."""
    own = _own_v1_memory_cgroup()
    if own is None:
        return None
    folder = own / f"oxray-test-{os.getpid()}"
    try:
        folder.mkdir(exist_ok=True)
    except OSError:
        return None
    try:
        (folder / "memory.limit_in_bytes").write_text(str(CGROUP_LIMIT))
    except OSError:
        folder.rmdir()
        return None
    return folder


@contextmanager
def _inside(cgroup):
    """This process in `cgroup` meanwhile, so that what it starts is counted there."""
    own = _own_v1_memory_cgroup()
    (cgroup / "cgroup.procs").write_text(str(os.getpid()))
    try:
        yield
    finally:
        (own / "cgroup.procs").write_text(str(os.getpid()))


@pytest.fixture(scope="module")
def tight(tmp_path_factory):
    """A cluster whose memory monitor acts once a task takes about HEADROOM. Where a memory
    cgroup can be made, the cluster runs in one and the monitor reads it, so that memory
    others use on the machine (a VM's balloon, other tests) moves nothing; else the machine's
    use now plus HEADROOM is the threshold."""
    cgroup = _v1_memory_cgroup() if HEADROOM / CGROUP_LIMIT < 0.5 else None
    if cgroup:
        threshold = HEADROOM / CGROUP_LIMIT
    else:
        used, total = _used_and_total()
        threshold = (used + HEADROOM) / total
        if threshold > 0.9:
            pytest.skip("this machine has too little free memory to fill past a threshold safely")
    cluster = Cluster(tmp_path_factory.mktemp("memory"))
    try:
        with _inside(cgroup) if cgroup else nullcontext():
            cluster.oxray("start", "--head", "--port", "0", "--dashboard-port", "0", "--num-cpus", "2",
                          "--node-ip-address", "127.0.0.1", "--memory-usage-threshold", f"{threshold:.4f}",
                          "--memory-monitor-refresh-ms", "100")
        with driver_of(cluster):
            yield
    finally:
        cluster.stop()
        if cgroup:
            _remove(cgroup)


def _remove(cgroup):
    """Removes the cgroup once the cluster's processes have left it."""
    for _ in range(100):
        try:
            cgroup.rmdir()
            return
        except OSError:
            time.sleep(0.1)


@oxray.remote(max_retries=0)
def hog(limit, marker=None):
    """Takes memory in steps, every page written, up to `limit` bytes (4x the headroom: the
    monitor acts long before); with `marker`, only on the first attempt."""
    import time

    if marker:
        if os.path.exists(marker):
            return "ran again"
        open(marker, "w").close()
    held = []
    while sum(map(len, held)) < limit:
        held.append(b"x" * STEP)
        time.sleep(0.02)
    return "survived"


@oxray.remote
def one():
    return 1


def test_a_task_past_the_threshold_fails_with_out_of_memory_and_the_node_lives_on(tight):
    with pytest.raises(OutOfMemoryError, match="ended to free memory.*memory use.*threshold"):
        oxray.get(hog.remote(4 * HEADROOM), timeout=120)
    assert oxray.get([one.remote() for _ in range(4)], timeout=60) == [1] * 4


def test_a_task_ended_for_memory_runs_again_as_its_retries_allow(tight, tmp_path):
    marker = str(tmp_path / "first-attempt")
    assert oxray.get(hog.options(max_retries=1).remote(4 * HEADROOM, marker), timeout=120) == "ran again"
