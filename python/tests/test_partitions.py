"""Three hosts in network namespaces (`netns`): a head with no CPUs and two worker hosts, a
and b, each with its own address, hostname and /dev/shm. Objects move between the hosts; a
link cut for less than the death timeout loses nothing; a host cut for longer is declared
dead, its task runs again on the other host, and once the link heals the cut host's agent
ends what it still ran (the task does not go on a second time) and joins as a new node."""

import json
import time

import pytest

from netns import Network, cluster, wait_for

NET = Network("oxpt", "10.202.0", ["h", "a", "b"])
# Long enough that a heartbeat held back by TCP's retransmission backoff after a short cut
# still arrives in time.
DEATH_TIMEOUT_S = 6


@pytest.fixture(scope="module")
def hosts(tmp_path_factory):
    root = tmp_path_factory.mktemp("partitions")
    with cluster(NET, root, "--num-cpus", "0", "--node-death-timeout-s", str(DEATH_TIMEOUT_S)) as started:
        for name in ("a", "b"):
            started.join(name, "--num-cpus", "2")
        yield started.hosts


PRELUDE = """
import json, os, socket, sys, time
import oxray
from oxray.util.scheduling_strategies import NodeAffinitySchedulingStrategy as On
oxray.init(address="{head}:6379")
node = {{n["NodeManagerAddress"]: n["NodeID"] for n in oxray.nodes() if n["Alive"]}}
A, B = node["{a}"], node["{b}"]
"""


def driver(hosts, body):
    return PRELUDE.format(head=NET.address["h"], a=NET.address["a"], b=NET.address["b"]) + body


def nodes(head):
    """(ip, state, node id) of every node the head knows."""
    rows = json.loads(head.oxray("list", "nodes", "--format", "json").stdout)
    return sorted((r["node_ip"], r["state"], r["node_id"]) for r in rows)


def test_objects_move_between_hosts(hosts):
    out = hosts["h"].python(driver(hosts, """
@oxray.remote(num_cpus=1)
def make(n):
    return socket.gethostname(), os.urandom(n)

@oxray.remote(num_cpus=1)
def look(made):
    return socket.gethostname(), made[0], len(made[1])

ref = make.options(scheduling_strategy=On(A, soft=False)).remote(20 << 20)
print(json.dumps([oxray.get(look.options(scheduling_strategy=On(B, soft=False)).remote(ref)),
                  len(oxray.get(ref)[1])]))
"""))
    assert json.loads(out.stdout.strip().splitlines()[-1]) == [["oxpt-b", "oxpt-a", 20 << 20], 20 << 20]


def test_a_cut_shorter_than_the_death_timeout_loses_nothing(hosts, tmp_path):
    before = nodes(hosts["h"])
    marks = tmp_path / "marks"
    run = hosts["h"].popen(driver(hosts, f"""
@oxray.remote(num_cpus=1, max_retries=3)
def step(i):
    with open({str(marks)!r}, "a") as f:
        f.write(f"{{i}}\\n")
    time.sleep(2)
    return i

refs = [step.options(scheduling_strategy=On(A, soft=False)).remote(i) for i in range(6)]
print("submitted", flush=True)
print(json.dumps(oxray.get(refs, timeout=120)))
"""))
    assert run.stdout.readline().strip() == "submitted", run.stdout.read()
    time.sleep(0.5)
    NET.cut("a")
    time.sleep(DEATH_TIMEOUT_S / 2)
    NET.heal("a")
    out, _ = run.communicate(timeout=150)
    assert run.returncode == 0, out
    assert json.loads(out.strip().splitlines()[-1]) == list(range(6))
    assert sorted(marks.read_text().split()) == [str(i) for i in range(6)], "each task ran once"
    assert nodes(hosts["h"]) == before, "no node was declared dead"


def test_a_host_cut_past_the_death_timeout_is_replaced_and_its_old_work_ends_once_healed(hosts, tmp_path):
    ticks = tmp_path / "ticks"
    run = hosts["h"].popen(driver(hosts, f"""
@oxray.remote(num_cpus=1, max_retries=2)
def ticker(seconds):
    end = time.time() + seconds
    while time.time() < end:
        with open({str(ticks)!r}, "a") as f:
            f.write(f"{{socket.gethostname()}} {{time.time()}}\\n")
        time.sleep(0.2)
    return socket.gethostname()

print(oxray.get(ticker.options(scheduling_strategy=On(A, soft=True)).remote(40), timeout=180), flush=True)
"""))

    def ticked(host, since=0.0):
        lines = ticks.read_text().splitlines() if ticks.exists() else []
        return [float(t) for h, t in (line.split() for line in lines) if h == f"oxpt-{host}" and float(t) > since]

    wait_for("the task to run on a", lambda: ticked("a"))
    NET.cut("a")
    try:
        wait_for("a's node declared dead", lambda: (NET.address["a"], "DEAD") in [n[:2] for n in nodes(hosts["h"])],
                 timeout=DEATH_TIMEOUT_S + 20)
        wait_for("the task to run again on b", lambda: ticked("b"), timeout=30)
        assert ticked("a", time.time() - 1), "a, cut off, cannot know it was declared dead: its attempt goes on"
    except AssertionError as e:
        run.kill()
        raise AssertionError(f"{e}; the driver said: {run.communicate()[0]}") from None
    finally:
        NET.heal("a")
    healed = time.time()
    # a learns it was declared dead at its next report, ends its worker, and joins anew.
    wait_for("a to join as a new node",
             lambda: sorted(n[1] for n in nodes(hosts["h"]) if n[0] == NET.address["a"]) == ["ALIVE", "DEAD"],
             timeout=30)
    time.sleep(2)
    late = ticked("a", time.time() - 1.5)
    assert not late, f"a's old attempt still ran {time.time() - healed:.1f} s after the link healed"
    out, _ = run.communicate(timeout=120)
    assert run.returncode == 0, out
    assert out.strip().splitlines()[-1] == "oxpt-b", out
