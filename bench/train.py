#!/usr/bin/env python3
"""The same DDP training loop (an MLP on synthetic data, CPU, gloo, 2 workers) run by plain
`torchrun`, by oxray's TorchTrainer and, when Ray is installed here, by Ray's TorchTrainer.
Prints, for each: the wall time of a run, the time from launch (`fit()`, or torchrun's start)
to the first training step, and the time from killing a worker (SIGKILL, mid-run) to the
first step after the restart; then oxray's ratios to the others.

Usage: .venv/bin/python bench/train.py [--steps N] [--epochs E] [--no-ray]
Targets (issue "Train"): wall time <= 1.05x torchrun's; first step and recovery >= 5x faster
than Ray's."""

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def loop(config):
    """One worker's training: `config["runtime"]` says how it reports and resumes."""
    import torch
    import torch.distributed as dist

    runtime = config["runtime"]
    if runtime == "torchrun":
        dist.init_process_group("gloo")
        rank, world = dist.get_rank(), dist.get_world_size()
    else:
        train = __import__(f"{runtime}.train", fromlist=["train"])
        rank, world = train.get_context().get_world_rank(), train.get_context().get_world_size()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 512), torch.nn.ReLU(), torch.nn.Linear(512, 512),
                                torch.nn.ReLU(), torch.nn.Linear(512, 10))
    start_epoch = 0
    if runtime == "torchrun":
        path = os.path.join(config["dir"], "torchrun-checkpoint.pt")
        state = torch.load(path) if os.path.exists(path) else None
    else:
        checkpoint = train.get_checkpoint()
        state = None
        if checkpoint:
            with checkpoint.as_directory() as d:
                state = torch.load(os.path.join(d, "state.pt"))
    if state:
        model.load_state_dict(state["model"])
        start_epoch = state["epoch"] + 1
    model = torch.nn.parallel.DistributedDataParallel(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    generator = torch.Generator().manual_seed(rank)
    x = torch.randn(config["batch"], 64, generator=generator)
    y = torch.randint(0, 10, (config["batch"],), generator=generator)
    first = True
    for epoch in range(start_epoch, config["epochs"]):
        for _ in range(config["steps"]):
            loss = torch.nn.functional.cross_entropy(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            if first and rank == 0:
                with open(os.path.join(config["dir"], "first-steps"), "a") as f:
                    f.write(f"{time.time()}\n")
                first = False
        kill = config.get("kill_epoch")
        marker = os.path.join(config["dir"], "killed")
        if kill is not None and epoch == kill and rank == 1 and not os.path.exists(marker):
            with open(marker, "w") as f:
                f.write(str(time.time()))
            os.kill(os.getpid(), signal.SIGKILL)
        metrics = {"epoch": epoch, "loss": loss.item()}
        if runtime == "torchrun":
            if rank == 0:
                torch.save({"model": model.module.state_dict(), "epoch": epoch}, path + ".tmp")
                os.replace(path + ".tmp", path)
            dist.barrier()
            continue
        with tempfile.TemporaryDirectory() as d:
            checkpoint = None
            if rank == 0:
                torch.save({"model": model.module.state_dict(), "epoch": epoch}, os.path.join(d, "state.pt"))
                checkpoint = train.Checkpoint.from_directory(d)
            train.report(metrics, checkpoint=checkpoint)
    if runtime == "torchrun":
        dist.destroy_process_group()


def _marks(directory):
    first = [float(t) for t in open(os.path.join(directory, "first-steps")).read().split()]
    killed = os.path.join(directory, "killed")
    return first, float(open(killed).read()) if os.path.exists(killed) else None


def run_torchrun(config):
    """torchrun's own restart sometimes fails to reconnect its gloo group on this machine (or
    hangs): such a run is counted and run again, up to three times."""
    env = dict(os.environ, BENCH_CONFIG=json.dumps(config), PYTHONPATH=HERE)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
           "--max-restarts", "3", "--monitor-interval", "0.1", os.path.abspath(__file__), "--worker"]
    for attempt in range(3):
        for name in ("first-steps", "killed", "torchrun-checkpoint.pt"):
            if os.path.exists(os.path.join(config["dir"], name)):
                os.remove(os.path.join(config["dir"], name))
        began = time.time()
        try:
            done = subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=300,
                                  start_new_session=True)
            if done.returncode == 0:
                return began, time.time()
        except subprocess.TimeoutExpired:
            pass
        print(f"(torchrun run {attempt + 1} failed; running it again)", flush=True)
    raise RuntimeError("torchrun failed three times")


def run_trainer(runtime, config):
    rt = __import__(runtime)
    train = __import__(f"{runtime}.train", fromlist=["train"])
    torch_module = __import__(f"{runtime}.train.torch", fromlist=["torch"])
    run = train.RunConfig(name=f"bench-{os.getpid()}-{time.time_ns()}", storage_path=config["dir"],
                          failure_config=train.FailureConfig(max_failures=1))
    trainer = torch_module.TorchTrainer(loop, train_loop_config=config,
                                        scaling_config=train.ScalingConfig(num_workers=2), run_config=run)
    began = time.time()
    trainer.fit()
    del rt
    return began, time.time()


def measure(runtime, args, kill):
    with tempfile.TemporaryDirectory(prefix=f"bench-train-{runtime}-") as d:
        config = {"runtime": runtime, "dir": d, "epochs": args.epochs, "steps": args.steps, "batch": 256,
                  "kill_epoch": args.epochs // 2 if kill else None}
        began, ended = run_torchrun(config) if runtime == "torchrun" else run_trainer(runtime, config)
        first, killed = _marks(d)
        recovery = (first[-1] - killed) if kill and killed else None
        return {"wall": ended - began, "first_step": first[0] - began, "recovery": recovery}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=150, help="steps per epoch")
    parser.add_argument("--epochs", type=int, default=8, help="a worker is killed after half of them")
    parser.add_argument("--no-ray", action="store_true")
    parser.add_argument("--kill-only", action="store_true", help="only the runs with a worker killed")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        return loop(json.loads(os.environ["BENCH_CONFIG"]))
    runtimes = ["torchrun", "oxray"]
    if not args.no_ray:
        try:
            import ray.train.torch  # noqa: F401

            runtimes.append("ray")
        except ImportError:
            print("(Ray Train is not installed here: its column is left out)")
    results = {}
    for runtime in runtimes:
        if runtime != "torchrun":
            rt = __import__(runtime)
            rt.init(num_cpus=2, **({"include_dashboard": False} if runtime == "ray" else {}))
        # The plain run first: its first step is a cold one (oxray's agents keep warm spares
        # after it, which a second run on the same cluster would start on).
        plain = None if args.kill_only else measure(runtime, args, kill=False)
        killed = measure(runtime, args, kill=True)
        plain = plain or killed
        results[runtime] = {"wall": plain["wall"], "first_step": plain["first_step"], "recovery": killed["recovery"]}
        if runtime != "torchrun":
            rt.shutdown()
        print(runtime, {k: round(v, 2) for k, v in results[runtime].items()}, flush=True)
    rows = [("wall time of a run (s)", "wall"), ("launch to first step (s)", "first_step"),
            ("kill to first step after restart (s)", "recovery")]
    print(f"\n{'':40}" + "".join(f"{r:>12}" for r in runtimes) + "   oxray/torchrun" + ("   ray/oxray" if "ray" in results else ""))
    for label, key in rows:
        line = f"{label:40}" + "".join(f"{results[r][key]:12.2f}" for r in runtimes)
        line += f"{results['oxray'][key] / results['torchrun'][key]:17.2f}x"
        if "ray" in results:
            line += f"{results['ray'][key] / results['oxray'][key]:11.2f}x"
        print(line)


if __name__ == "__main__":
    main()
