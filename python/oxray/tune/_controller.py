"""Runs an experiment from the driver: asks the searcher for configs, starts trials on
pooled workers (at most `max_concurrent_trials` at once), long-polls them for results,
lets the scheduler and stop conditions decide after each one, retries failed trials from
their newest checkpoint, and writes every trial's files as results come.

A paused trial (HyperBand) gives its worker back and waits, PAUSED, until the scheduler
resumes it from its newest checkpoint or ends it. An exploited trial (PBT) stops, takes a
copy of a better trial's checkpoint and a new config, and starts again from that copy."""

import os
import time
import uuid
from typing import Dict, List, Optional

import oxray
from oxray.exceptions import RayActorError, RayError
from oxray.tune import _trial
from oxray.tune._experiment import Experiment
from oxray.tune._exploit import adopt, discard, stage_checkpoint
from oxray.tune._metrics import flatten
from oxray.tune._pool import WorkerPool
from oxray.tune._progress import Reporter
from oxray.tune._stopper import make_stopper
from oxray.tune._trainable import resources_for
from oxray.tune._trial import ERROR, PAUSED, PENDING, RUNNING, TERMINATED, Trial
from oxray.tune.schedulers import TrialScheduler
from oxray.tune.search import BasicVariantGenerator, Searcher
from oxray.tune.search.variants import format_vars

POLL_S = 1.0
# The searcher's state is saved at most this often while trials end, and at the end.
SEARCHER_SAVE_S = 5.0
# Trials made ahead of free workers for a scheduler that waits for the whole population.
MAX_AHEAD = 1000
# A trial whose worker has not started it within this is taken to wait for room.
START_WAIT_S = 3.0


def default_concurrency(resources: Dict[str, float]) -> int:
    """As many trials as the cluster's CPUs (or GPUs) hold, at least one."""
    total = oxray.cluster_resources()
    fits = [total.get(k, 0) // v for k, v in resources.items() if v > 0 and k in ("CPU", "GPU")]
    if not fits:
        return max(1, int(total.get("CPU", 1)))
    return max(1, int(min(fits)))


class Running:
    """A started trial: its worker and the poll in flight."""

    def __init__(self, trial: Trial, actor, poll, started):
        self.trial, self.actor, self.poll = trial, actor, poll
        self.started = started  # the start call: answered once the trial runs in its worker
        self.answered = False  # whether it is known to run
        self.launched = time.monotonic()


class TuneController:
    def __init__(self, trainable, trainable_name: str, experiment: Experiment, searcher: Searcher,
                 scheduler: TrialScheduler, tune_config, run_config, trials: Optional[List[Trial]] = None):
        self.trainable, self.trainable_name = trainable, trainable_name
        self.experiment, self.searcher, self.scheduler = experiment, searcher, scheduler
        self.tune_config, self.run_config = tune_config, run_config
        self.stopper = make_stopper(run_config.stop)
        self.trials: List[Trial] = list(trials or [])
        self.pending: List[Trial] = [t for t in self.trials if t.status == PENDING]
        self.running: Dict[object, Running] = {}  # poll ref -> running trial
        self.paused: Dict[str, Trial] = {}
        self.search_done = False
        self.stop_all = False
        self.prefix = uuid.uuid4().hex[:5]
        self.iteration = 0
        self.reporter = Reporter(run_config.verbose, tune_config.metric, tune_config.mode)
        self.pool = WorkerPool()
        inner = getattr(searcher, "searcher", searcher)
        # A searcher other than the variant generator suggests forever: num_samples bounds it.
        counts_itself = isinstance(inner, BasicVariantGenerator)
        # The variant generator is rebuilt from the trials on restore; others from their state.
        self.searcher_saved_at = None if counts_itself else 0.0
        self.max_trials = None if counts_itself or tune_config.num_samples == -1 else tune_config.num_samples

    # ----- trials

    def _next_trial(self) -> Optional[Trial]:
        if self.pending:
            return self.pending.pop(0)
        return self._new_trial()

    def _new_trial(self) -> Optional[Trial]:
        if self.search_done or self.stop_all:
            return None
        if self.max_trials is not None and len(self.trials) >= self.max_trials:
            self.search_done = True
            return None
        trial_id = f"{self.prefix}_{len(self.trials):05d}"
        config = self.searcher.suggest(trial_id)
        if config == Searcher.FINISHED:
            self.search_done = True
            return None
        if config is None:
            return None
        chosen = self.searcher.chosen_values(trial_id)
        tag = f"{len(self.trials)}" + (f"_{format_vars(chosen)}" if chosen else "")
        name = _trial.dir_name(self.trainable_name, trial_id, tag, _date())
        trial = Trial(trial_id, self.trainable_name, config, tag, self.experiment.path(name),
                      resources_for(self.trainable, config))
        _trial.write_params(trial)
        self.trials.append(trial)
        self.scheduler.on_trial_add(self, trial)
        self.experiment.record(trial)
        return trial

    def _start(self, trial: Trial) -> None:
        self._launch(trial, self.pool.acquire(trial.resources))
        trial.status, trial.stopping, trial.pausing, trial.after_pause = RUNNING, False, False, None
        self.experiment.record(trial)
        for callback in self.run_config.callbacks:
            callback.on_trial_start(self.iteration, self.trials, trial)

    def _launch(self, trial: Trial, actor) -> None:
        resume = trial.resume_from or {}
        checkpoint = (self.experiment.checkpoint(trial.path, trial.latest_checkpoint)
                      if trial.latest_checkpoint else None)
        info = {"trial_id": trial.trial_id, "trial_name": str(trial), "trial_dir": trial.path,
                "storage": self.experiment.trial_storage(trial.path),
                "experiment_name": self.experiment.name, "config": trial.config, "resources": trial.resources.to_json(),
                "iteration": resume.get("training_iteration", 0) if checkpoint else 0,
                "time_total_s": resume.get("time_total_s", 0.0) if checkpoint else 0.0,
                "checkpoint_index": trial.checkpoint_index}
        started = actor.start.remote(info, self.trainable, checkpoint, self.run_config.checkpoint_config)
        poll = actor.poll.remote(POLL_S, None)
        self.running[poll] = Running(trial, actor, poll, started)

    def _limit(self) -> int:
        if self.tune_config.max_concurrent_trials:
            return self.tune_config.max_concurrent_trials
        probe = self.trials[0].resources if self.trials else resources_for(self.trainable, {})
        return default_concurrency(probe.total)

    def _fill(self, limit: int) -> None:
        while len(self.running) < limit:
            trial = self._next_trial()
            if trial is None:
                break
            self._start(trial)
        # A scheduler that waits for the whole population (synchronous PBT) must know it
        # before the first trials reach its barrier: the rest is made now and waits its turn.
        while getattr(self.scheduler, "waits_for_population", False) and len(self.pending) < MAX_AHEAD:
            trial = self._new_trial()
            if trial is None:
                break
            self.pending.append(trial)

    # ----- the loop

    def run(self) -> List[Trial]:
        started = time.monotonic()
        budget = self.tune_config.time_budget_s
        limit = self._limit()
        self.reporter.begin(self.experiment.path())
        self.pool.prewarm(min(limit, 2 * (os.cpu_count() or 1)), resources_for(self.trainable, {}))
        try:
            while True:
                if budget is not None and time.monotonic() - started > budget and not self.stop_all:
                    self.stop_all = True
                    self.pending.clear()
                self._fill(limit)
                if not self.running and self.paused and not self.pending:
                    self._unstall()
                    continue
                if not self.running:
                    if self.pending or (not self.search_done and not self.stop_all):
                        time.sleep(0.01)  # a searcher that has nothing yet
                        continue
                    break
                self._step()
                self._hand_idle_workers()
                self.reporter.maybe_print(self.trials, resources=self._usage)
                self.experiment.sync()
        finally:
            self.pool.shutdown()
            self._save_searcher(force=True)
            self.experiment.sync(force=True)
        self.reporter.maybe_print(self.trials, final=True, resources=self._usage)
        for callback in self.run_config.callbacks:
            callback.on_experiment_end(self.trials)
        return self.trials

    def _save_searcher(self, force: bool = False) -> None:
        if self.searcher_saved_at is None or not (force or time.monotonic() - self.searcher_saved_at >= SEARCHER_SAVE_S):
            return
        self.searcher_saved_at = time.monotonic()
        try:
            self.experiment.save_searcher(self.searcher)
        except Exception as error:  # a searcher whose state does not pickle cannot be restored
            print(f"(tune) the searcher's state was not saved: {error!r}", flush=True)
            self.searcher_saved_at = None

    def _usage(self) -> str:
        """What the running trials hold, against the cluster's totals, as Ray's status says it."""
        held: Dict[str, float] = {}
        for run in self.running.values():
            for name, amount in run.trial.resources.total.items():
                held[name] = held.get(name, 0.0) + amount
        total = oxray.cluster_resources()
        return (f"{held.get('CPU', 0.0):.1f}/{total.get('CPU', 0.0):g} CPUs, "
                f"{held.get('GPU', 0.0):.1f}/{total.get('GPU', 0.0):g} GPUs")

    def _step(self) -> None:
        ready, _ = oxray.wait(list(self.running), num_returns=1, timeout=POLL_S * 2)
        if ready:
            rest = [r for r in self.running if r not in ready]
            if rest:
                more, _ = oxray.wait(rest, num_returns=len(rest), timeout=0)
                ready = list(ready) + list(more)
        for ref in ready:
            run = self.running.pop(ref)
            run.answered = True
            try:
                item = oxray.get(ref)
            except (RayActorError, RayError) as error:
                self.pool.discard(run.actor)
                self._failed(run.trial, error, f"the trial's worker died: {error}")
            else:
                self._handle(run, item)
            self._apply_paused_decisions()

    def _handle(self, run: Running, item: Dict) -> None:
        trial = run.trial
        if not item:  # nothing new yet
            self._poll(run, None)
        elif "result" in item:
            self._poll(run, self._on_result(trial, item["result"]))
        elif "error" in item:
            self.pool.release(run.actor, trial.resources)
            error, trace = item["error"]
            self._failed(trial, error, trace)
        else:  # it ended, or stopped when asked to
            self.pool.release(run.actor, trial.resources)
            if "stopped" in item and trial.pausing:
                self._let_go(trial)
            else:
                self._complete(trial)

    def _hand_idle_workers(self) -> None:
        """A trial whose worker has not started within START_WAIT_S may wait for room that
        idle pooled workers hold (a trial retried after its node died, started while the
        others still ran): an idle worker of its resources takes it over, or one of other
        resources ends to make room."""
        if not any(self.pool.idle.values()):
            return
        now = time.monotonic()
        for run in list(self.running.values()):
            if run.answered or now - run.launched < START_WAIT_S:
                continue
            if oxray.wait([run.started], timeout=0)[0]:
                run.answered = True  # it runs already: never started twice
                continue
            actor = self.pool.take_idle(run.trial.resources)
            if actor is not None:
                del self.running[run.poll]
                self.pool.discard(run.actor)
                self._launch(run.trial, actor)

    def _poll(self, run: Running, decision: Optional[str]) -> None:
        run.poll = run.actor.poll.remote(POLL_S, decision)
        self.running[run.poll] = run

    # ----- decisions

    def _on_result(self, trial: Trial, result: Dict) -> str:
        self.iteration += 1
        trial.last_result = result
        trial.num_results += 1
        _trial.append_result(trial, result)
        if result.get("checkpoint_dir_name"):
            trial.checkpoints.append((result["checkpoint_dir_name"], result))
            trial.checkpoint_index = int(result["checkpoint_dir_name"].rsplit("_", 1)[1]) + 1
            trial.resume_from = {k: result.get(k) for k in ("training_iteration", "time_total_s")}
            _trial.prune_checkpoints(trial, self.run_config.checkpoint_config,
                                     lambda name: self.experiment.delete_checkpoint(trial.path, name))
            self.experiment.record(trial)
        flat = flatten(result)
        self.searcher.on_trial_result(trial.trial_id, flat)
        for callback in self.run_config.callbacks:
            callback.on_trial_result(self.iteration, self.trials, trial, result)
        decision = self.scheduler.on_trial_result(self, trial, flat)
        if decision == TrialScheduler.PAUSE and not self._plan_exploit(trial):
            decision = self._pause_or_continue(trial)
        if self.stopper is not None:
            if self.stopper(trial.trial_id, flat):
                decision = TrialScheduler.STOP
            if self.stopper.stop_all():
                self.stop_all = True
        if self.stop_all or result.get("done"):
            decision = TrialScheduler.STOP
        trial.stopping = decision == TrialScheduler.STOP
        trial.pausing = decision == TrialScheduler.PAUSE
        if not trial.pausing:
            discard(self.experiment, trial)
        return "stop" if trial.stopping or trial.pausing else "continue"

    # ----- pausing and exploiting

    def _plan_exploit(self, trial: Trial) -> bool:
        """Stages the checkpoint a PBT exploit gives this trial; False when there is none."""
        take = getattr(self.scheduler, "take_exploit", None)
        plan = take(trial.trial_id) if take is not None else None
        if plan is None:
            return False
        donor_id, config = plan
        donor = self._by_id(donor_id)
        if donor is None or donor.latest_checkpoint is None:
            return False
        staged = stage_checkpoint(self.experiment, donor, trial)
        trial.exploit = (config, staged, dict(donor.checkpoints[-1][1]))
        return True

    def _pause_or_continue(self, trial: Trial) -> str:
        # A scheduler that never resumes trials would leave a paused one waiting for ever.
        if getattr(self.scheduler, "take_paused_decisions", None) is None:
            return TrialScheduler.CONTINUE
        return TrialScheduler.PAUSE

    def _by_id(self, trial_id: str) -> Optional[Trial]:
        return next((t for t in self.trials if t.trial_id == trial_id), None)

    def _let_go(self, trial: Trial) -> None:
        """The worker of a pausing trial has stopped it: it waits, or goes on at once."""
        trial.pausing = False
        if trial.exploit is not None or trial.after_pause == "resume":
            self._resume(trial)
        elif trial.after_pause == "stop":
            self._complete(trial)
        else:
            trial.status = PAUSED
            self.paused[trial.trial_id] = trial
            self.experiment.record(trial)
        trial.after_pause = None

    def _resume(self, trial: Trial) -> None:
        """A paused trial goes on: from a top trial's checkpoint when the scheduler planned an
        exploit for it (a synchronous PBT plans them as it resumes its trials), else its own."""
        if trial.exploit is not None or self._plan_exploit(trial):
            adopt(self.experiment, trial)
        self._requeue(trial)

    def _requeue(self, trial: Trial) -> None:
        trial.status = PENDING
        self.pending.insert(0, trial)
        self.experiment.record(trial)

    def _apply_paused_decisions(self) -> None:
        take = getattr(self.scheduler, "take_paused_decisions", None)
        while take is not None:
            resume, stop = take()
            if not resume and not stop:
                return
            for trial_id, verdict in [(t, "resume") for t in resume] + [(t, "stop") for t in stop]:
                trial = self.paused.pop(trial_id, None)
                if trial is None:  # still letting go of its worker: decided when it has
                    trial = self._by_id(trial_id)
                    if trial is not None and trial.pausing:
                        trial.after_pause = verdict
                elif verdict == "resume":
                    self._resume(trial)
                else:
                    self._complete(trial)

    def _unstall(self) -> None:
        """Nothing runs and no trial comes: brackets waiting for more trials decide with those
        they have; trials still paused after that end where they are."""
        hook = getattr(self.scheduler, "on_no_more_trials", None)
        if hook is not None and not self.stop_all:
            hook()
            self._apply_paused_decisions()
        if not self.pending:
            for trial in list(self.paused.values()):
                del self.paused[trial.trial_id]
                self._complete(trial)

    def _complete(self, trial: Trial) -> None:
        trial.status = TERMINATED
        if trial.last_result:
            trial.last_result["done"] = True
        self.scheduler.on_trial_complete(self, trial, flatten(trial.last_result))
        self.searcher.on_trial_complete(trial.trial_id, flatten(trial.last_result))
        self.experiment.record(trial)
        self.reporter.ended(trial)
        self._save_searcher()
        for callback in self.run_config.callbacks:
            callback.on_trial_complete(self.iteration, self.trials, trial)

    def _failed(self, trial: Trial, error: BaseException, trace: str) -> None:
        trial.num_failures += 1
        _trial.write_error(trial, error, trace)
        allowed = self.run_config.failure_config.max_failures
        if not self.stop_all and (allowed == -1 or trial.num_failures <= allowed):
            trial.status = PENDING  # again, from its newest checkpoint
            self.pending.insert(0, trial)
            self.experiment.record(trial)
            return
        trial.status, trial.error = ERROR, error
        trial.error_msg = trace or repr(error)
        self.scheduler.on_trial_error(self, trial)
        self.searcher.on_trial_complete(trial.trial_id, None, error=True)
        self.experiment.record(trial)
        self.reporter.ended(trial)
        self._save_searcher()
        for callback in self.run_config.callbacks:
            callback.on_trial_error(self.iteration, self.trials, trial)
        if self.run_config.failure_config.fail_fast:
            self.stop_all = True
            self.pending.clear()


def _date() -> str:
    import datetime

    return datetime.datetime.now().strftime("%Y-%m-%d_%H-%M-%S")
