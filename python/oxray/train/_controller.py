"""Drives a training run from the driver's process: starts a worker group (a placement
group, one `TrainWorker` actor per bundle), joins the workers' reports into committed
checkpoints, and when a worker, its process or its node fails, stops the whole group and
starts a new one from the newest committed checkpoint, up to `max_failures`.

It polls each worker with a long poll that returns as soon as that worker reports, so a
report is joined (and its checkpoint committed) within milliseconds of the last rank's."""

import json
import os
import time
from typing import Any, Callable, Dict, List, Optional

import oxray
from oxray.exceptions import RayActorError, RayError
from oxray.train import _ranks, _session
from oxray.train._checkpoint import Checkpoint
from oxray.train._checkpoints import SNAPSHOT, CheckpointManager
from oxray.train._errors import (ControllerError, InsufficientClusterResourcesError, WorkerGroupError,
                                 WorkerHealthCheckFailedError, WorkerHealthCheckTimeoutError)
from oxray.train._result import REPORTS, Result, load
from oxray.train._session import TrainContext
from oxray.train._storage import Storage
from oxray.train._worker import Sync, TrainWorker

POLL_S = 1.0
HEALTH_TIMEOUT_S = 600.0
WAITING_NOTICE_S = 30.0


def _say(label: str, text: str) -> None:
    print(f"({label}) {text}", flush=True)


class Group:
    """One attempt's worker group: its placement group, sync actor and workers, in rank order."""

    def __init__(self, pg, sync, workers: List):
        self.pg, self.sync, self.workers = pg, sync, workers
        self.helpers: List = []  # the dataset splits' coordinators, which end with the group

    def shutdown(self, graceful: bool) -> None:
        """Ends the group: after a failure at once (a survivor may be stuck in a collective
        with the dead), else after the workers closed their process groups (5 s at most)."""
        if graceful:
            try:
                oxray.wait([w.shutdown.remote() for w in self.workers], num_returns=len(self.workers), timeout=5)
            except Exception:  # workers already gone are what a shutdown is for
                pass
        for actor in self.workers + [self.sync] + self.helpers:
            try:
                oxray.kill(actor)
            except Exception:
                pass
        try:
            oxray.util.remove_placement_group(self.pg)
        except Exception:
            pass


class Controller:
    def __init__(self, label: str, fn: Callable, fn_args: tuple, scaling, run_config, backend,
                 datasets: Optional[Dict[str, Any]], data_config):
        self.label, self.fn, self.fn_args = label, fn, fn_args
        self.scaling, self.run_config, self.backend = scaling, run_config, backend
        self.datasets, self.data_config = datasets or {}, data_config
        self.storage = Storage(run_config.storage_path, run_config.name, run_config.storage_filesystem)
        self.storage.create()
        snapshot = self.storage.read_text(SNAPSHOT)
        config = run_config.checkpoint_config
        if snapshot is None:
            self.checkpoints = CheckpointManager(config)
        else:
            try:
                self.checkpoints = CheckpointManager.restore(config, snapshot)
            except (ValueError, KeyError) as e:
                raise ControllerError(f"the run at {self.storage.experiment_path} has a snapshot oxray cannot read "
                                      f"({e}); give the run a new name") from None
            missing = [c["dir_name"] for c in self.checkpoints.checkpoints if not self.storage.exists(c["dir_name"])]
            if missing:
                raise ControllerError(f"the run at {self.storage.experiment_path} lists checkpoints that are gone "
                                      f"({', '.join(missing)}); give the run a new name")
            if self.checkpoints.latest is not None:
                _say(label, f"resuming run {run_config.name!r} from its checkpoint "
                            f"{self.checkpoints.latest['dir_name']} (a new RunConfig(name=...) starts afresh)")
        self.failures = 0
        self.started = time.monotonic()

    # ----- the run

    def run(self) -> Result:
        max_failures = self.run_config.failure_config.max_failures
        if self.scaling.local_mode:
            try:
                return_value = self._run_local()
            except WorkerGroupError as error:
                self._after_exception(error)
                raise
            return self._finish(return_value)
        size, tried = None, False
        while True:
            group, graceful = None, False
            try:
                size = self._decide_size(size)
                first, tried = not tried, True
                group = self._start_group(size, first)
                outcome = self._drive(group)
                graceful = True
                if outcome[0] == "done":
                    return self._finish(outcome[1])
                _say(self.label, f"{outcome[1]} workers fit now (the group has {size}): restarting the group "
                                 "at that size from the newest checkpoint")
                size = outcome[1]
            except WorkerGroupError as error:
                self._after_exception(error)
                self.failures += 1
                if max_failures != -1 and self.failures > max_failures:
                    raise
                latest = self.checkpoints.latest
                _say(self.label, f"{error.args[0]}\n  restarting the worker group ({self.failures} of "
                                 f"{'unlimited' if max_failures == -1 else max_failures} failures allowed), from "
                                 f"{'checkpoint ' + latest['dir_name'] if latest else 'the start'}")
                size = None
            finally:
                if group is not None:
                    group.shutdown(graceful)

    def _finish(self, return_value) -> Result:
        result = load(self.storage, return_value)
        reports = len(result._reports)
        _say(self.label, f"run {self.run_config.name!r} finished in {time.monotonic() - self.started:.1f} s: "
                         f"{reports} report{'s' * (reports != 1)}, metrics {result.metrics}, checkpoint "
                         f"{result.checkpoint.path if result.checkpoint else None}")
        return result

    # ----- the worker group

    def _decide_size(self, current: Optional[int]) -> int:
        """The fixed size, or (elastic) as many as fit now and at least min: waits for that."""
        if not self.scaling.elastic:
            return self.scaling.num_workers
        if current is not None:
            return current
        per_worker = self.scaling.worker_resources()
        last_notice = 0.0
        while True:
            fit = _ranks.workers_that_fit(per_worker, _free_by_node(), self.scaling.max_workers,
                                          self.scaling.worker_selectors(self.scaling.max_workers))
            if fit >= self.scaling.min_workers:
                return fit
            if time.monotonic() - last_notice > WAITING_NOTICE_S:
                last_notice = time.monotonic()
                _say(self.label, f"waiting for room for at least {self.scaling.min_workers} workers of {per_worker} "
                                 f"({fit} fit now)")
            time.sleep(1.0)

    def _start_group(self, size: int, first: bool) -> Group:
        """The group of `size` workers, once the cluster holds it. A first group larger than
        the whole cluster is refused; a group started again after a failure waits, as
        the nodes that held it may come back."""
        from oxray.util.placement_group import placement_group
        from oxray.util.scheduling_strategies import NodeAffinitySchedulingStrategy, PlacementGroupSchedulingStrategy

        per_worker = self.scaling.worker_resources()
        short = _ranks.never_fits({k: v * size for k, v in per_worker.items()}, oxray.cluster_resources())
        if short and first:
            raise InsufficientClusterResourcesError(
                f"{size} workers of {per_worker} can never fit in this cluster ({'; '.join(short)}): use fewer "
                "workers or smaller resources_per_worker, or add nodes")
        if short:
            _say(self.label, f"the cluster has too little for {size} workers of {per_worker} now "
                             f"({'; '.join(short)}): waiting for nodes to join")
        pg = placement_group([dict(per_worker) for _ in range(size)], strategy=self.scaling.placement_strategy,
                             bundle_label_selector=self.scaling.worker_selectors(size))
        try:
            self._wait_placed(pg, per_worker, size)
        except BaseException:
            oxray.util.remove_placement_group(pg)
            raise
        here = oxray.get_runtime_context().get_node_id()
        sync = oxray.remote(Sync).options(
            num_cpus=0, max_concurrency=size + 2,
            scheduling_strategy=NodeAffinitySchedulingStrategy(here, soft=True) if here else None).remote(size)
        options = _actor_resources(per_worker)
        env = _worker_runtime_env(self.run_config.worker_runtime_env, self.backend.preload)
        workers = [oxray.remote(TrainWorker).options(
            max_concurrency=4, runtime_env=env,
            scheduling_strategy=PlacementGroupSchedulingStrategy(pg, i), **options).remote() for i in range(size)]
        group = Group(pg, sync, workers)
        try:
            self._set_up(group)
        except BaseException:
            group.shutdown(graceful=False)
            raise
        return group

    def _wait_placed(self, pg, per_worker, size) -> None:
        began = time.monotonic()
        selectors = self.scaling.worker_selectors(size)
        while not pg.wait(timeout_seconds=WAITING_NOTICE_S):
            free = [n["free"] for n in _free_by_node()]
            _say(self.label, f"waiting {time.monotonic() - began:.0f} s for room for {size} workers of {per_worker} "
                             f"({self.scaling.placement_strategy}"
                             f"{f', on nodes labelled {selectors}' if selectors else ''}); free now: {free}")

    def _set_up(self, group: Group) -> None:
        """Ranks by node and GPU, the environment torchrun gives, the run's checkpoint and
        the backend's setup, then the training function starts on every worker."""
        metas = self._gather([w.metadata.remote() for w in group.workers], "starting")
        ranks = _ranks.assign_ranks(metas)
        order = sorted(range(len(metas)), key=lambda i: ranks[i]["world_rank"])
        group.workers = [group.workers[i] for i in order]
        metas = [metas[i] for i in order]
        ranks = [ranks[i] for i in order]
        size = len(group.workers)
        port = self._gather([group.workers[0].free_port.remote()], "starting")[0]
        visible = _ranks.shared_visible_devices(metas) if any(m["gpu_ids"] for m in metas) else None
        latest = self.checkpoints.latest
        checkpoint = Checkpoint(self.storage.path(latest["dir_name"]), self.storage.fs) if latest else None
        shards = self._dataset_shards(size, metas)
        group.helpers = [c for parts in shards.values() if (c := getattr(parts[0], "coordinator", None)) is not None]
        calls = []
        for rank, (worker, r) in enumerate(zip(group.workers, ranks)):
            env = {
                "RANK": str(rank), "WORLD_SIZE": str(size), "LOCAL_RANK": str(r["local_rank"]),
                "LOCAL_WORLD_SIZE": str(r["local_world_size"]), "NODE_RANK": str(r["node_rank"]),
                "MASTER_ADDR": metas[0]["node_ip"], "MASTER_PORT": str(port),
            }
            if visible is not None:
                env["CUDA_VISIBLE_DEVICES"] = visible[rank]
                env["OXRAY_TRAIN_GPU_IDS"] = ",".join(metas[rank]["gpu_ids"])  # its own, within the shared list
            context = TrainContext(world_rank=rank, world_size=size, local_rank=r["local_rank"],
                                   local_world_size=r["local_world_size"], node_rank=r["node_rank"],
                                   experiment_name=self.run_config.name, storage=self.storage)
            info = {"context": context, "checkpoint": checkpoint, "report_index": self.checkpoints.report_index,
                    "dataset_shards": {name: parts[rank] for name, parts in shards.items()}}
            calls.append(worker.init_session.remote(info, env, group.sync, self.backend))
        self._gather(calls, "setting up")
        fn = oxray.put(self.fn)
        self._gather([w.run.remote(fn, self.fn_args) for w in group.workers], "starting")
        _say(self.label, f"started {size} worker{'s' * (size != 1)} "
                         f"({', '.join(sorted({m['node_ip'] for m in metas}))}); MASTER_ADDR={metas[0]['node_ip']} "
                         f"MASTER_PORT={port}")

    def _dataset_shards(self, size: int, metas: List[Dict]) -> Dict[str, List[Any]]:
        shards = {}
        for name, dataset in self.datasets.items():
            if callable(dataset) and not hasattr(dataset, "iter_batches"):
                dataset = dataset()  # a factory: a fresh dataset for every group
            if self.data_config.splits(name) and size > 1:
                hints = [m["node_id"] for m in metas] if self.data_config.enable_shard_locality else None
                shards[name] = dataset.streaming_split(size, equal=True, locality_hints=hints)
            else:
                shards[name] = [dataset.iterator() if hasattr(dataset, "iterator") else dataset] * size
        return shards

    def _gather(self, refs: List, what: str) -> List[Any]:
        """The values of calls to the group's workers, taken as they come; the first worker
        that fails fails the group at once: the others may be waiting for it (the process
        group's rendezvous waits for every rank) and would never answer."""
        position = {ref: i for i, ref in enumerate(refs)}
        values, failures, pending = [None] * len(refs), {}, list(refs)
        while pending and not failures:
            ready, pending = oxray.wait(pending, num_returns=1)
            for ref in ready:
                try:
                    values[position[ref]] = oxray.get(ref)
                except RayError as error:
                    failures[position[ref]] = error
        if failures:
            raise _group_error(failures, f"the worker group failed while {what}")
        return values

    # ----- a running group

    def _drive(self, group: Group):
        """Until the function returned on every worker (`("done", rank 0's value)`), an
        elastic group should change size (`("resize", n)`), or a worker failed (raises)."""
        size = len(group.workers)
        polls = {rank: w.poll.remote(POLL_S) for rank, w in enumerate(group.workers)}
        answered = {rank: time.monotonic() for rank in polls}
        queued: Dict[int, List[Dict]] = {rank: [] for rank in polls}
        finished: Dict[int, Any] = {}
        started = last_resize_check = time.monotonic()
        while True:
            ready, _ = oxray.wait(list(polls.values()), num_returns=1, timeout=POLL_S * 2)
            failures = {}
            for rank, ref in list(polls.items()):
                if ref not in ready:
                    if time.monotonic() - answered[rank] > HEALTH_TIMEOUT_S:
                        failures[rank] = WorkerHealthCheckTimeoutError(
                            f"worker {rank} did not answer for {HEALTH_TIMEOUT_S:.0f} s")
                    continue
                del polls[rank]
                answered[rank] = time.monotonic()
                try:
                    status = oxray.get(ref)
                except (RayActorError, RayError) as error:
                    failures[rank] = WorkerHealthCheckFailedError(f"worker {rank} is gone: {error}")
                    continue
                if "error" in status:
                    error, trace = status["error"]
                    failures[rank] = _with_trace(error, trace)
                    continue
                if "report" in status:
                    queued[rank].append(status["report"])
                if status.get("done"):
                    finished[rank] = status.get("return_value")
                else:
                    polls[rank] = group.workers[rank].poll.remote(POLL_S)
            if failures:
                raise _group_error(failures, "training failed")
            while all(queued[r] for r in range(size)):
                self._join([queued[r].pop(0) for r in range(size)])
            if len(finished) == size:
                left = sum(len(q) for q in queued.values())
                if left:
                    _say(self.label, f"{left} reports were dropped: every worker must call report() as many times")
                return ("done", finished.get(0))
            if self.scaling.elastic and size < self.scaling.max_workers:
                interval = self.scaling.elastic_resize_monitor_interval_s
                if time.monotonic() - max(started, last_resize_check) >= interval:
                    last_resize_check = time.monotonic()
                    wanted = self.scaling.worker_selectors(self.scaling.max_workers)
                    more = _ranks.workers_that_fit(self.scaling.worker_resources(), _free_by_node(),
                                                   self.scaling.max_workers - size, wanted and wanted[size:])
                    if more > 0:
                        return ("resize", size + more)

    def _join(self, reports: List[Dict]) -> None:
        """One round: rank 0's metrics are the run's; the checkpoint any rank gave (all in
        rank 0's directory) is committed now, the snapshot written before old ones go."""
        metrics = reports[0]["metrics"]
        dir_name = next((r["checkpoint_dir_name"] for r in reports if r["checkpoint_dir_name"]), None)
        if dir_name is not None:
            dropped = self.checkpoints.register(dir_name, metrics)
        else:
            dropped = []
        self.checkpoints.advance()
        self.storage.append_line(REPORTS, json.dumps(metrics, default=repr))
        self.storage.write_text(SNAPSHOT, self.checkpoints.snapshot())
        for name in dropped:
            self.storage.delete(name)
        checkpoint = Checkpoint(self.storage.path(dir_name), self.storage.fs) if dir_name else None
        _say(self.label, f"report {self.checkpoints.report_index}: {metrics}"
                         + (f", checkpoint {checkpoint.path}" if checkpoint else ""))
        for callback in self.run_config.callbacks:
            hook = getattr(callback, "after_report", None)
            if hook is not None:
                hook(run_context=None, metrics=[r["metrics"] for r in reports], checkpoint=checkpoint)

    def _after_exception(self, error: WorkerGroupError) -> None:
        for callback in self.run_config.callbacks:
            hook = getattr(callback, "after_exception", None)
            if hook is not None:
                hook(run_context=None, worker_exceptions=dict(error.worker_failures))

    # ----- local mode

    def _run_local(self) -> Any:
        """`num_workers=0`: the function runs here, as one worker of a group of one."""
        latest = self.checkpoints.latest
        checkpoint = Checkpoint(self.storage.path(latest["dir_name"]), self.storage.fs) if latest else None
        context = TrainContext(experiment_name=self.run_config.name, storage=self.storage)
        shards = {name: (d() if callable(d) and not hasattr(d, "iter_batches") else d)
                  for name, d in self.datasets.items()}
        session = _session.Session(context, checkpoint, lambda report: self._join([report]), lambda v: v,
                                   {n: d.iterator() if hasattr(d, "iterator") else d for n, d in shards.items()},
                                   self.checkpoints.report_index)
        _session.install(session)
        try:
            return_value = self.fn(*self.fn_args)
            session.finish()
            return return_value
        except Exception as error:
            raise WorkerGroupError(f"the training function failed: {error!r}", {0: error}) from error
        finally:
            session.abandon()  # after a failure, no queued report may still join the run
            _session.install(None)


def _worker_runtime_env(user: Dict[str, Any], preload) -> Optional[Dict[str, Any]]:
    """The user's worker_runtime_env, and the modules the workers load: each node loads
    them once, in a zygote that forks the group's workers, so neither the group nor one
    started again after a failure waits for torch in every worker (OXRAY_TRAIN_WARM_WORKERS=0:
    each worker loads them itself)."""
    env = dict(user or {})
    if preload and os.environ.get("OXRAY_TRAIN_WARM_WORKERS", "1") != "0":
        env["env_vars"] = {**env.get("env_vars", {}), "OXRAY_WORKER_PRELOAD": ",".join(preload)}
    return env or None


def _actor_resources(per_worker: Dict[str, float]) -> Dict[str, Any]:
    options = {"num_cpus": per_worker.get("CPU", 0.0), "num_gpus": per_worker.get("GPU", 0.0)}
    if "memory" in per_worker:
        options["memory"] = per_worker["memory"]
    custom = {k: v for k, v in per_worker.items() if k not in ("CPU", "GPU", "memory")}
    if custom:
        options["resources"] = custom
    return options


def _free_by_node() -> List[Dict[str, Any]]:
    """Per alive node, `{"free": its free resources, "labels": its labels}`."""
    from oxray._private import worker

    return [{"free": n["resources_available"], "labels": n.get("labels") or {}}
            for n in json.loads(worker.client().nodes_json()) if n["state"] == "ALIVE"]


def _with_trace(error: BaseException, trace: str) -> BaseException:
    if trace:
        try:
            error.__oxray_remote_traceback__ = trace
        except AttributeError:
            pass
    return error


def _group_error(failures: Dict[int, BaseException], what: str) -> WorkerGroupError:
    lines = [f"{what}:"]
    for rank, error in sorted(failures.items()):
        trace = getattr(error, "__oxray_remote_traceback__", "")
        lines.append(f"  worker {rank}: {type(error).__name__}: {error}")
        if trace:
            lines.append("    " + trace.rstrip().replace("\n", "\n    "))
    return WorkerGroupError("\n".join(lines), failures)


