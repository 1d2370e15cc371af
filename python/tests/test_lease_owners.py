"""Resources come back to the node when the process that asked for them goes away, also
while the worker started for it is still starting."""

import subprocess
import sys
import time

from conftest import OXRAY_BIN

DRIVER = '''
import os, signal, time
import oxray

oxray.init()

@oxray.remote(num_cpus=1, runtime_env={{"env_vars": {{"FRESH": "{n}"}}}})
def slow():
    time.sleep(30)

refs = [slow.remote() for _ in range(2)]
time.sleep({wait})  # the requests reached the agent; the new workers are starting
os.kill(os.getpid(), signal.SIGKILL)
'''


def cpus_in_use(cluster):
    out = subprocess.run([OXRAY_BIN, "status"], env=cluster.env, capture_output=True, text=True, timeout=30).stdout
    used = next(line for line in out.splitlines() if line.strip().endswith(" CPU"))
    return float(used.split("/")[0])


def test_a_driver_killed_while_its_workers_start_leaves_the_cpus_free(cluster):
    for n, wait in enumerate((0.05, 0.15, 0.3, 0.6)):
        subprocess.run([sys.executable, "-c", DRIVER.format(n=n, wait=wait)], env=cluster.env, timeout=60)
        deadline = time.monotonic() + 15
        while (used := cpus_in_use(cluster)) > 0:
            assert time.monotonic() < deadline, f"{used} CPUs still taken after the driver died (wait {wait} s)"
            time.sleep(0.2)


def test_a_driver_that_disconnects_and_lives_on_gives_its_workers_back(cluster):
    from conftest import driver_of
    import oxray

    @oxray.remote
    def slow():
        time.sleep(0.5)
        return 1

    with driver_of(cluster):
        refs = [slow.remote() for _ in range(6)]
        oxray.get(refs[:2])  # the others are still running or waiting as it disconnects
    deadline = time.monotonic() + 10
    while (used := cpus_in_use(cluster)) > 0:
        assert time.monotonic() < deadline, f"{used} CPUs still taken by a driver that disconnected"
        time.sleep(0.2)
