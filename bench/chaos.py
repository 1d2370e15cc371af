#!/usr/bin/env python3
"""Chaos soak: a mixed workload on a real cluster (a head and two more nodes on this machine)
while random workers, agents and the head are killed with SIGKILL. A killed agent's node is
replaced by a new one a moment later; a killed head is started again on its database.

The workload, each kind in a thread of this driver: tasks with retries, objects made on one
node and read on another, calls of an actor that restarts, jobs, and (with torch installed)
training runs of two DDP workers that checkpoint every epoch and start again from the newest
checkpoint after a failure. Each unit of work is
submitted, then completed (the right answer), lost (an error, or a wrong answer) or hung (no
answer in --hang-s); "ran twice" counts tasks that finished more than once (at-least-once:
a worker killed between finishing and replying runs its task again).

Usage: bench/chaos.py [--duration 600] [--kill-every 5] [--seed N] [--json FILE]
Target: 0 lost and 0 hung in a 10-minute run (`make chaos`); the test suite runs a short one.
Exits 1 when anything was lost or hung.
"""

import argparse
import collections
import hashlib
import json
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
OXRAY_BIN = os.environ.get("OXRAY_BIN", str(REPO / "target/release/oxray"))
KINDS = ("tasks", "objects", "actor calls", "jobs", "train runs")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cmdline(pid):
    try:
        return [a.decode() for a in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0") if a]
    except OSError:
        return []


def parent(pid):
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        return int(stat[stat.rfind(")") + 2:].split()[1])
    except (OSError, ValueError, IndexError):
        return None


def wait_gone(pid, timeout=30):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
                return
        except FileNotFoundError:
            return
        time.sleep(0.01)


class Cluster:
    """A head with 1 CPU and agents with 2 CPUs each, on loopback, in a home of their own."""

    def __init__(self, root: Path, death_timeout_s: float):
        self.root = root
        self.env = {k: v for k, v in os.environ.items() if not k.startswith(("OXRAY_", "RAY_"))}
        self.env.update(OXRAY_HOME=str(root / "home"), OXRAY_TEMP_DIR=str(root / "sessions"))
        self.port, self.dashboard_port = free_port(), free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.death_timeout_s = death_timeout_s
        self.nodes = 0
        self.head_argv = None
        self.restarted_heads = []

    def oxray(self, *args, check=True):
        out = subprocess.run([OXRAY_BIN, *args], env=self.env, capture_output=True, text=True, timeout=120)
        if check and out.returncode != 0:
            raise RuntimeError(f"oxray {' '.join(args)} exited {out.returncode}: {out.stderr}{out.stdout}")
        return out

    def start(self, agents=2):
        self.oxray("start", "--head", "--port", str(self.port), "--dashboard-port", str(self.dashboard_port),
                   "--num-cpus", "1", "--node-ip-address", "127.0.0.1",
                   "--node-death-timeout-s", str(self.death_timeout_s))
        self.head_argv = cmdline(self.role_pids("head")[0])
        for _ in range(agents):
            self.add_node()

    def add_node(self):
        self.nodes += 1
        self.oxray("start", "--address", self.address, "--num-cpus", "2", "--node-ip-address", "127.0.0.1",
                   "--node-name", f"node-{self.nodes}")

    def role_pids(self, role):
        pids = []
        for record in Path(self.env["OXRAY_HOME"], "procs").glob("*.json"):
            try:
                info = json.loads(record.read_text())
            except (OSError, ValueError):
                continue
            if info.get("role") == role and cmdline(info["pid"]):
                pids.append(info["pid"])
        return pids

    def agents_of_other_nodes(self):
        """The agents of the nodes added (not the head's machine, where the driver runs)."""
        return [pid for pid in self.role_pids("agent") if "--node-name" in cmdline(pid)]

    def workers(self):
        """Worker processes: the agents' children that run worker_main, and the children of
        their zygotes (workers of a kind that preloads modules, as Train's)."""
        agents = set(self.role_pids("agent"))
        pids = [int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit()]
        zygotes = {pid for pid in pids if parent(pid) in agents and "oxray._private.zygote" in cmdline(pid)}
        return [pid for pid in pids if parent(pid) in zygotes
                or (parent(pid) in agents and "oxray._private.worker_main" in cmdline(pid))]

    def restart_head(self):
        pid = self.role_pids("head")[0]
        os.kill(pid, signal.SIGKILL)
        wait_gone(pid)
        log = self.root / f"head-{len(self.restarted_heads)}.log"
        deadline = time.monotonic() + 30
        while True:
            with log.open("w") as err:
                head = subprocess.Popen(self.head_argv, env=self.env, stdout=subprocess.DEVNULL, stderr=err,
                                        start_new_session=True)
            while "head serving" not in log.read_text() and head.poll() is None and time.monotonic() < deadline:
                time.sleep(0.05)
            # Its port may be held a moment by a client's end of a connection to the dead head.
            if head.poll() is None or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        self.restarted_heads.append(head)

    def stop(self):
        subprocess.run([OXRAY_BIN, "stop", "--force"], env=self.env, capture_output=True, timeout=120)
        for head in self.restarted_heads:
            if head.poll() is None:
                head.kill()
            head.wait(timeout=30)


class Tally:
    def __init__(self):
        self.lock = threading.Lock()
        self.counts = {kind: collections.Counter() for kind in KINDS}
        self.errors = collections.defaultdict(list)

    def add(self, kind, what, error=None, n=1):
        with self.lock:
            self.counts[kind][what] += n
            if error is not None and len(self.errors[kind]) < 5:
                self.errors[kind].append(f"{what}: {error}"[:800])


def epochs(config):
    """A TorchTrainer's function: a small DDP regression that checkpoints every epoch and
    goes on from the newest checkpoint."""
    import torch
    from oxray import train
    from oxray.train import Checkpoint
    from oxray.train.torch import prepare_model

    model, start = torch.nn.Linear(1, 1), 0
    checkpoint = train.get_checkpoint()
    if checkpoint:
        with checkpoint.as_directory() as d:
            state = torch.load(os.path.join(d, "model.pt"))
        model.load_state_dict(state["model"])
        start = state["epoch"] + 1
    model = prepare_model(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.rand(64, 1)
    for epoch in range(start, config["epochs"]):
        loss = torch.nn.functional.mse_loss(model(x), 3 * x + 1)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        time.sleep(0.3)
        rank = train.get_context().get_world_rank()
        if rank == 0:
            d = os.path.join(config["scratch"], f"epoch-{epoch}-{uuid.uuid4().hex}")
            os.makedirs(d)
            inner = model.module if hasattr(model, "module") else model
            torch.save({"model": inner.state_dict(), "epoch": epoch}, os.path.join(d, "model.pt"))
            train.report({"epoch": epoch, "loss": loss.item()}, checkpoint=Checkpoint.from_directory(d))
        else:
            train.report({"epoch": epoch, "loss": loss.item()})


def run_workload(cluster, duration, hang_s, marks: Path, tally: Tally, stop: threading.Event):
    import oxray
    from oxray.exceptions import GetTimeoutError
    from oxray.job_submission import JobSubmissionClient

    os.environ["OXRAY_HOME"] = cluster.env["OXRAY_HOME"]
    oxray.init(address=cluster.address)

    @oxray.remote(num_cpus=0.5, max_retries=-1)
    def step(i, marks):
        time.sleep(random.random() * 0.4)
        Path(marks, f"task-{i}-{uuid.uuid4().hex}").touch()
        return i * i

    @oxray.remote(num_cpus=0.5, max_retries=-1)
    def make(i):
        return random.Random(i).randbytes(2 << 20)

    @oxray.remote(num_cpus=0.5, max_retries=-1)
    def digest(blob):
        return hashlib.sha256(blob).hexdigest()

    @oxray.remote(num_cpus=0.5, max_restarts=-1, max_task_retries=-1)
    class Counter:
        def __init__(self):
            self.n = 0

        def add(self, k):
            self.n += k
            return self.n

    def settle(kind, ref, check):
        try:
            value = oxray.get(ref, timeout=hang_s)
        except GetTimeoutError as e:
            return tally.add(kind, "hung", e)
        except Exception as e:  # noqa: BLE001 - every error of a retried unit is a loss
            return tally.add(kind, "lost", f"{type(e).__name__}: {e}")
        tally.add(kind, "completed" if check(value) else "lost", None if check(value) else f"wrong value {value!r}")

    def tasks():
        i = 0
        while not stop.is_set():
            batch = list(range(i, i + 8))
            i += 8
            refs = [step.remote(n, str(marks)) for n in batch]
            tally.add("tasks", "submitted", n=len(refs))
            for n, ref in zip(batch, refs):
                settle("tasks", ref, lambda v, n=n: v == n * n)

    def objects():
        i = 0
        while not stop.is_set():
            made = [make.options(scheduling_strategy="SPREAD").remote(n) for n in range(i, i + 4)]
            digests = [digest.options(scheduling_strategy="SPREAD").remote(m) for m in made]
            for n, ref in zip(range(i, i + 4), digests):
                tally.add("objects", "submitted")
                want = hashlib.sha256(random.Random(n).randbytes(2 << 20)).hexdigest()
                settle("objects", ref, lambda v, want=want: v == want)
            i += 4

    def actor_calls():
        counter = Counter.remote()
        while not stop.is_set():
            refs = [counter.add.remote(1) for _ in range(5)]
            tally.add("actor calls", "submitted", n=len(refs))
            for ref in refs:
                settle("actor calls", ref, lambda v: isinstance(v, int) and v >= 1)

    def jobs():
        client = None
        i = 0
        while not stop.is_set():
            i += 1
            marker = f"chaos-job-{i}-{uuid.uuid4().hex[:6]}"
            began = time.monotonic()
            job_id = None
            while job_id is None and time.monotonic() - began < hang_s:
                try:  # the head may be down for a moment: the client tries again, as a user would
                    client = client or JobSubmissionClient(cluster.dashboard_url)
                    job_id = client.submit_job(entrypoint=f"python -c \"print('{marker}')\"")
                except Exception:  # noqa: BLE001
                    client = None
                    time.sleep(0.5)
            tally.add("jobs", "submitted")
            if job_id is None:
                tally.add("jobs", "hung", "not accepted")
                continue
            status = None
            while time.monotonic() - began < hang_s:
                try:
                    status = str(client.get_job_status(job_id))
                    if status.endswith(("SUCCEEDED", "FAILED", "STOPPED")):
                        break
                except Exception:  # noqa: BLE001
                    client = None
                    try:
                        client = JobSubmissionClient(cluster.dashboard_url)
                    except Exception:  # noqa: BLE001
                        pass
                time.sleep(0.5)
            if status is None or not status.endswith(("SUCCEEDED", "FAILED", "STOPPED")):
                tally.add("jobs", "hung", f"{job_id} still {status}")
            elif status.endswith("SUCCEEDED") and marker in (client.get_job_logs(job_id) or ""):
                tally.add("jobs", "completed")
            else:
                info = client.get_job_info(job_id)
                tally.add("jobs", "lost", f"{job_id} {status}: {getattr(info, 'message', '')}")
            time.sleep(1)

    def train_runs():
        from oxray.train import CheckpointConfig, FailureConfig, RunConfig, ScalingConfig
        from oxray.train.torch import TorchTrainer

        i = 0
        while not stop.is_set():
            i += 1
            scratch = cluster.root / "train-scratch"
            scratch.mkdir(exist_ok=True)
            trainer = TorchTrainer(
                epochs, train_loop_config={"epochs": 8, "scratch": str(scratch)},
                scaling_config=ScalingConfig(num_workers=2),
                run_config=RunConfig(name=f"chaos-{i}", storage_path=str(cluster.root / "train"),
                                     checkpoint_config=CheckpointConfig(num_to_keep=2),
                                     failure_config=FailureConfig(max_failures=-1)))
            outcome = {}

            def fit():
                try:
                    outcome["result"] = trainer.fit()
                except Exception as e:  # noqa: BLE001
                    where = traceback.extract_tb(e.__traceback__)[-3:]
                    outcome["error"] = f"{type(e).__name__}: {e} (at {'; '.join(f'{f.name}:{f.lineno}' for f in where)})"

            tally.add("train runs", "submitted")
            fitting = threading.Thread(target=fit, daemon=True)
            fitting.start()
            fitting.join(timeout=hang_s * 3)
            result = outcome.get("result")
            if fitting.is_alive():
                frame = sys._current_frames().get(fitting.ident)
                where = "; ".join(f"{f.name}:{f.lineno}" for f in traceback.extract_stack(frame)[-6:]) if frame else ""
                tally.add("train runs", "hung", f"chaos-{i} still fitting (at {where})")
                return
            if result is not None and result.error is None and result.metrics.get("epoch") == 7:
                tally.add("train runs", "completed")
            else:
                tally.add("train runs", "lost", outcome.get("error") or getattr(result, "error", None))

    def guarded(stream):
        """Runs `stream` until the soak ends; an error that escapes it is a loss, and it goes on."""
        kind = stream.__name__.replace("_", " ")

        def run():
            while not stop.is_set():
                try:
                    stream()
                except Exception as e:  # noqa: BLE001
                    tally.add(kind, "lost", f"{type(e).__name__}: {e}")
                    time.sleep(0.5)
        return run

    streams = [tasks, objects, actor_calls, jobs]
    try:
        import torch  # noqa: F401

        streams.append(train_runs)
    except ImportError:
        pass
    threads = [threading.Thread(target=guarded(f), name=f.__name__, daemon=True) for f in streams]
    for t in threads:
        t.start()
    return oxray, threads


def kill_loop(cluster, every, rng, stop, kills, log):
    """A worker, an agent and the head first, so that a short run has each; then at random."""
    first = ["worker", "agent", "head"]
    while not stop.wait(every * (0.5 + rng.random())):
        what = first[0] if first else rng.choices(["worker", "agent", "head"], weights=[5, 3, 2])[0]
        try:
            if what == "worker":
                workers = cluster.workers()
                if not workers:
                    continue
                os.kill(rng.choice(workers), signal.SIGKILL)
            elif what == "agent":
                agents = cluster.agents_of_other_nodes()
                if not agents:
                    continue
                os.kill(rng.choice(agents), signal.SIGKILL)
                # A new machine takes the dead one's place after a moment.
                time.sleep(1)
                cluster.add_node()
            else:
                cluster.restart_head()
        except Exception as e:  # noqa: BLE001 - the soak goes on, and says so
            log(f"killing a {what} failed: {type(e).__name__}: {e}")
            continue
        if first and first[0] == what:
            first.pop(0)
        kills[what] += 1


def ran_twice(marks: Path):
    finished = collections.Counter(p.name.rsplit("-", 1)[0] for p in marks.iterdir())
    return sum(1 for n in finished.values() if n > 1)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--duration", type=float, default=600, help="seconds of chaos")
    parser.add_argument("--kill-every", type=float, default=5, help="mean seconds between kills")
    parser.add_argument("--hang-s", type=float, default=120, help="a unit with no answer after this is hung")
    parser.add_argument("--death-timeout-s", type=float, default=3)
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument("--root", type=Path, help="the cluster's home and sessions go here [default: a temporary "
                                                   "folder]; `OXRAY_HOME=ROOT/home oxray stop --force` stops it")
    args = parser.parse_args()
    seed = args.seed if args.seed is not None else random.randrange(1 << 30)
    rng = random.Random(seed)
    log = lambda message: print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)

    with tempfile.TemporaryDirectory(prefix="oxray-chaos-") as tmp:
        root = args.root or Path(tmp)
        marks = root / "marks"
        marks.mkdir(parents=True)
        cluster = Cluster(root, args.death_timeout_s)
        tally, kills = Tally(), collections.Counter()
        stop_work, stop_kills = threading.Event(), threading.Event()
        try:
            cluster.start()
            cluster.dashboard_url = f"http://127.0.0.1:{cluster.dashboard_port}"
            oxray, threads = run_workload(cluster, args.duration, args.hang_s, marks, tally, stop_work)
            killer = threading.Thread(target=kill_loop, args=(cluster, args.kill_every, rng, stop_kills, kills, log),
                                      daemon=True)
            killer.start()
            log(f"chaos for {args.duration:.0f} s, a kill every ~{args.kill_every:.0f} s (seed {seed})")
            time.sleep(args.duration)
            stop_kills.set()
            killer.join()
            # What is under way finishes on a quiet cluster: a unit hangs only past --hang-s.
            stop_work.set()
            # Each stream waits --hang-s at most per unit (a training run three times that).
            deadline = time.monotonic() + args.hang_s * 4 + 60
            for t in threads:
                t.join(timeout=max(0.0, deadline - time.monotonic()))
            stuck = [t.name for t in threads if t.is_alive()]
            for name in stuck:
                tally.add(name.replace("_", " "), "hung", "its thread did not finish")
            twice = ran_twice(marks)
            oxray.shutdown()
        finally:
            cluster.stop()

    totals = {kind: {k: tally.counts[kind][k] for k in ("submitted", "completed", "lost", "hung")} for kind in KINDS}
    totals["tasks"]["ran twice"] = twice
    print(f"chaos soak: {args.duration:.0f} s, seed {seed}; killed {kills['worker']} workers, "
          f"{kills['agent']} agents, {kills['head']} heads (SIGKILL)")
    print(f"{'work':<12} {'submitted':>9} {'completed':>9} {'lost':>5} {'ran twice':>9} {'hung':>5}")
    for kind in KINDS:
        t = totals[kind]
        print(f"{kind:<12} {t['submitted']:>9} {t['completed']:>9} {t['lost']:>5} {t.get('ran twice', '-'):>9} "
              f"{t['hung']:>5}")
    for kind, errors in tally.errors.items():
        for error in errors:
            print(f"  {kind}: {error}")
    if args.json:
        args.json.write_text(json.dumps({"seed": seed, "kills": dict(kills), "work": totals,
                                         "errors": dict(tally.errors)}, indent=1))
    bad = sum(totals[k]["lost"] + totals[k]["hung"] for k in KINDS)
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
