"""Workers of a kind that preloads modules are forked by a zygote that loaded them once, on a
real cluster: what the workers get, a zygote that dies under its workers, and one that
cannot fork (its workers are then started one by one)."""

import os
import signal
import sys
import time
from pathlib import Path

import pytest

import oxray
from oxray._private import zygote
from oxray.exceptions import ActorDiedError

MODULES = Path(__file__).parent / "zygote_modules"


def _kind(module):
    return {"env_vars": {"OXRAY_WORKER_PRELOAD": module, "PYTHONPATH": f"{MODULES}:{MODULES.parent}"}}


def _parent(pid):
    return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()


@oxray.remote
class Probe:
    def describe(self):
        import numpy

        return {"pid": os.getpid(), "ppid": os.getppid(), "parent": _parent(os.getppid()),
                "stdin": os.path.realpath("/proc/self/fd/0"),
                "loaded": "preload_marker" in sys.modules, "random": float(numpy.random.rand()),
                "worker_id": os.environ.get("OXRAY_WORKER_ID")}


@pytest.fixture(scope="module")
def cluster(private_cluster):
    return None


def test_workers_of_a_preloading_kind_are_forked_with_the_modules_loaded(cluster):
    probes = [Probe.options(runtime_env=_kind("numpy,preload_marker"), num_cpus=0).remote() for _ in range(2)]
    first, second = oxray.get([p.describe.remote() for p in probes], timeout=60)
    assert "oxray._private.zygote" in first["parent"] and first["ppid"] == second["ppid"]
    assert first["loaded"] and second["loaded"] and first["stdin"] == second["stdin"] == os.devnull
    assert first["pid"] != second["pid"] and first["worker_id"] != second["worker_id"]
    assert first["random"] != second["random"], "each forked worker has its own numpy random stream"
    for p in probes:
        oxray.kill(p)


def test_a_zygote_killed_under_its_workers_ends_them_and_a_new_one_takes_over(cluster):
    probe = Probe.options(runtime_env=_kind("preload_marker"), num_cpus=0).remote()
    before = oxray.get(probe.describe.remote(), timeout=60)
    os.kill(before["ppid"], signal.SIGKILL)
    with pytest.raises(ActorDiedError):
        for _ in range(100):  # its worker dies with it
            oxray.get(probe.describe.remote(), timeout=30)
            time.sleep(0.1)
    after = oxray.get(Probe.options(runtime_env=_kind("preload_marker"), num_cpus=0).remote().describe.remote(),
                      timeout=60)
    assert "oxray._private.zygote" in after["parent"] and after["ppid"] != before["ppid"] and after["loaded"]


def test_a_zygote_that_cannot_fork_leaves_its_workers_to_start_on_their_own(cluster):
    # The module ends the process that loads it when that is a zygote.
    probe = Probe.options(runtime_env=_kind("zygote_breaker,preload_marker"), num_cpus=0).remote()
    described = oxray.get(probe.describe.remote(), timeout=60)
    assert "oxray._private.zygote" not in described["parent"] and "agent" in described["parent"]
    oxray.kill(probe)


def test_a_zygote_refuses_to_fork_once_cuda_is_set_up(monkeypatch):
    class Cuda:
        @staticmethod
        def is_initialized():
            return True

    monkeypatch.setattr(zygote, "_cuda_driver_loaded", lambda: False)
    monkeypatch.setitem(sys.modules, "torch", type(sys)("torch"))
    monkeypatch.setattr(sys.modules["torch"], "cuda", Cuda, raising=False)
    assert "CUDA" in zygote._why_not_forkable()
    Cuda.is_initialized = staticmethod(lambda: False)
    assert zygote._why_not_forkable() is None
    monkeypatch.setattr(zygote, "_cuda_driver_loaded", lambda: True)
    assert "CUDA driver" in zygote._why_not_forkable()
