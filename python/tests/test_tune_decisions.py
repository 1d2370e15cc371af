"""oxray.tune's decisions without a cluster: search spaces, variant generation, searchers,
schedulers on scripted results, stop conditions, checkpoint pruning, result picking."""

import math
import os
import random
import threading

import pytest

from oxray import tune
from oxray.tune import _trial
from oxray.tune._result import Result, ResultGrid
from oxray.tune._stopper import make_stopper
from oxray.tune._pool import key_of
from oxray.tune._trainable import TrialResources, resources_for
from oxray.tune.schedulers import ASHAScheduler, FIFOScheduler, MedianStoppingRule, TrialScheduler, create_scheduler
from oxray.tune.schedulers.asha import quantile
from oxray.tune.search import BasicVariantGenerator, ConcurrencyLimiter, Searcher
from oxray.tune.search.variants import format_vars, generate_variants, grid_points

CONTINUE, STOP = TrialScheduler.CONTINUE, TrialScheduler.STOP


# ----- search spaces

def test_domains_stay_in_their_ranges():
    rng = random.Random(0)
    for _ in range(300):
        assert 1 <= tune.uniform(1, 2).sample(rng=rng) < 2
        assert 1e-4 <= tune.loguniform(1e-4, 1e-1).sample(rng=rng) <= 1e-1
        assert 0 <= tune.randint(0, 3).sample(rng=rng) < 3
        assert tune.qrandint(0, 10, 5).sample(rng=rng) in (0, 5, 10)  # inclusive when q > 1
        assert 1 <= tune.lograndint(1, 100).sample(rng=rng) < 100
        value = tune.quniform(0, 1, 0.25).sample(rng=rng)
        assert value in (0, 0.25, 0.5, 0.75, 1.0)
        assert tune.choice(["a", "b"]).sample(rng=rng) in ("a", "b")
    assert tune.randint(0, 2).sample(rng=rng) != 2
    draws = [tune.randn(10, 2).sample(rng=rng) for _ in range(2000)]
    assert abs(sum(draws) / len(draws) - 10) < 0.3


def test_bad_domains_are_refused():
    for bad in (lambda: tune.uniform(2, 1), lambda: tune.loguniform(0, 1), lambda: tune.choice([]),
                lambda: tune.grid_search([]), lambda: tune.randint(3, 3)):
        with pytest.raises(ValueError):
            bad()


def test_grid_is_crossed_first_key_fastest_and_repeated_per_sample():
    space = {"a": tune.grid_search([1, 2]), "b": tune.grid_search(["x", "y"]), "c": 7}
    configs = [c for _, c in generate_variants(space, num_samples=2, seed=1)]
    pairs = [(c["a"], c["b"]) for c in configs]
    assert pairs == [(1, "x"), (2, "x"), (1, "y"), (2, "y")] * 2
    assert all(c["c"] == 7 for c in configs)
    assert len(grid_points({"lr": 0.1})) == 1


def test_random_values_are_drawn_per_trial_and_seeded():
    space = {"lr": tune.loguniform(1e-4, 1e-1), "nested": {"k": tune.choice([1, 2, 3]), "fixed": [1, 2]}}
    first = [c for _, c in generate_variants(space, 5, seed=42)]
    again = [c for _, c in generate_variants(space, 5, seed=42)]
    assert first == again and len({c["lr"] for c in first}) == 5
    assert all(c["nested"]["fixed"] == [1, 2] and c["nested"]["k"] in (1, 2, 3) for c in first)


def test_sample_from_sees_the_resolved_config():
    space = {"a": tune.grid_search([1, 2]), "b": tune.sample_from(lambda spec: spec.config.a * 10)}
    assert [c["b"] for _, c in generate_variants(space, 1)] == [10, 20]


def test_format_vars_names_trial_dirs_like_ray():
    chosen = {("lr",): 0.001, ("model", "act"): "re lu", ("n",): 3}
    assert format_vars(chosen) == "lr=0.0010,act=re_lu,n=3"  # sorted by path
    assert _trial.dir_name("train", "ab12c_00003", "3_lr=0.1", "2024-01-01_00-00-00") == \
        "train_ab12c_00003_3_lr=0.1_2024-01-01_00-00-00"
    assert len(_trial.dir_name("t", "x", "y" * 300, "d")) == 130 + 2


# ----- searchers

def test_basic_variant_generator_finishes_and_resumes_after_restore():
    gen = BasicVariantGenerator(random_state=3, points_to_evaluate=[{"x": 5}])
    gen.set_search_properties(None, None, {"x": tune.randint(0, 100), "y": tune.grid_search([0, 1])}, num_samples=2)
    configs = [gen.suggest(f"t{i}") for i in range(5)]
    assert configs[0]["x"] == 5 and gen.suggest("t5") == Searcher.FINISHED
    assert gen.chosen_values("t1")[("y",)] == 0
    again = BasicVariantGenerator(random_state=3)
    again.set_search_properties(None, None, {"x": tune.randint(0, 100), "y": tune.grid_search([0, 1])}, num_samples=2)
    again._taken = 2
    assert [again.suggest("a"), again.suggest("b"), again.suggest("c")] == configs[3:] + [Searcher.FINISHED]


def test_concurrency_limiter_bounds_live_trials():
    gen = BasicVariantGenerator()
    gen.set_search_properties(None, None, {"x": tune.grid_search([1, 2, 3])})
    limited = ConcurrencyLimiter(gen, max_concurrent=2)
    assert isinstance(limited.suggest("a"), dict) and isinstance(limited.suggest("b"), dict)
    assert limited.suggest("c") is None
    limited.on_trial_complete("a", {})
    assert limited.suggest("c") == {"x": 3}
    with pytest.raises(ValueError):
        ConcurrencyLimiter(gen, 0)


# ----- schedulers

def test_asha_defaults_and_rungs():
    asha = ASHAScheduler(metric="m", mode="max")
    assert (asha.time_attr, asha.max_t, asha.grace_period, asha.reduction_factor, len(asha.brackets)) == \
        ("training_iteration", 100, 1, 4, 1)
    assert [m for m, _ in asha.brackets[0].rungs] == [64, 16, 4, 1]


def _asha_round_robin(scores, **kwargs):
    asha = ASHAScheduler(metric="m", mode="max", **kwargs)
    stopped, live = {}, list(range(len(scores)))
    for t in range(1, kwargs["max_t"] + 1):
        for trial in list(live):
            if asha.on_trial_result(None, str(trial), {"training_iteration": t, "m": scores[trial]}) == STOP:
                stopped[trial] = t
                live.remove(trial)
    return stopped


def test_asha_halves_at_each_rung():
    # 8 trials in lockstep: at each rung a trial goes on only when above the median so far.
    stopped = _asha_round_robin([1, 7, 2, 8, 6, 5, 3, 4], grace_period=2, reduction_factor=2, max_t=8)
    assert sorted(stopped.values()) == [2, 2, 2, 2, 4, 8, 8, 8]
    assert {t for t, at in stopped.items() if at == 8} == {0, 1, 3}


def test_asha_minimizes_and_ignores_missing_metrics():
    asha = ASHAScheduler(metric="loss", mode="min", grace_period=1, reduction_factor=2, max_t=4)
    assert asha.on_trial_result(None, "a", {"training_iteration": 1, "loss": 1.0}) == CONTINUE
    assert asha.on_trial_result(None, "b", {"training_iteration": 1, "loss": 5.0}) == STOP
    assert asha.on_trial_result(None, "c", {"training_iteration": 1}) == CONTINUE
    assert asha.on_trial_result(None, "a", {"training_iteration": 4, "loss": 0.1}) == STOP  # max_t


def test_quantile_interpolates_and_ignores_nan():
    assert quantile([1, 2, 3, 4], 0.5) == 2.5
    assert quantile([float("nan"), 2.0], 0.75) == 2.0
    assert quantile([], 0.5) is None


def test_median_stopping_rule():
    rule = MedianStoppingRule(metric="acc", mode="max", time_attr="training_iteration", grace_period=1,
                              min_samples_required=2)
    decisions = {}
    for trial, acc in (("a", 0.9), ("b", 0.8), ("c", 0.7)):
        decisions[trial] = [rule.on_trial_result(None, trial, {"training_iteration": t, "acc": acc}) for t in (1, 2)]
    assert decisions["a"] == decisions["b"] == [CONTINUE, CONTINUE]  # too few others to compare with
    assert decisions["c"][0] == STOP  # best 0.7 below the median of a's and b's running means
    assert rule.on_trial_result(None, "d", {"training_iteration": 1, "acc": 0.95}) == CONTINUE
    defaults = MedianStoppingRule()
    assert (defaults.time_attr, defaults.grace_period, defaults.min_samples_required) == ("time_total_s", 60.0, 3)


def test_metric_mode_set_twice_is_an_error():
    with pytest.raises(ValueError, match="one place"):
        ASHAScheduler(metric="a", mode="max").set_search_properties("b", "min")
    asha = ASHAScheduler()
    asha.set_search_properties("loss", "min")
    assert (asha.metric, asha.mode) == ("loss", "min")
    with pytest.raises(ValueError, match="metric and a mode"):
        ASHAScheduler().on_trial_add(None, "t")
    assert FIFOScheduler().on_trial_result(None, "t", {}) == CONTINUE
    assert isinstance(create_scheduler("asha", max_t=5), ASHAScheduler)


# ----- stop conditions, configs, resources

def test_stoppers():
    by_dict = make_stopper({"training_iteration": 3, "acc": 0.9})
    assert not by_dict("t", {"training_iteration": 2, "acc": 0.5})
    assert by_dict("t", {"training_iteration": 3}) and by_dict("t", {"acc": 0.95})
    assert make_stopper(lambda trial_id, result: result["x"] > 1)("t", {"x": 2})
    with pytest.raises(TypeError):
        make_stopper(5)


def test_configs_check_their_fields():
    with pytest.raises(ValueError, match="mode"):
        tune.TuneConfig(metric="loss", mode="minimize")
    with pytest.raises(ValueError, match="num_samples"):
        tune.TuneConfig(num_samples=0)
    with pytest.raises(DeprecationWarning):
        tune.RunConfig(local_dir="/tmp")
    assert tune.FailureConfig().max_failures == 0
    assert tune.CheckpointConfig().checkpoint_score_order == "max"
    assert tune.TuneConfig().reuse_actors is False


def test_bad_trainables_are_refused_before_any_trial():
    lock = threading.Lock()
    with pytest.raises(TypeError, match="cannot be pickled"):
        tune.Tuner(lambda config: lock, param_space={})
    with pytest.raises(TypeError, match="Trainer"):
        class FakeTrainer:
            def fit(self):
                pass
        tune.Tuner(FakeTrainer())


def test_trial_resources():
    assert resources_for(lambda c: None, {}).bundles == ({"CPU": 1.0},)
    with_gpu = tune.with_resources(lambda c: None, {"cpu": 2, "gpu": 1})
    assert resources_for(with_gpu, {}).head == {"CPU": 2.0, "GPU": 1.0}
    by_config = tune.with_resources(lambda c: None, lambda config: {"cpu": config["n"]})
    assert resources_for(by_config, {"n": 3}).total == {"CPU": 3.0}
    assert not resources_for(by_config, {"n": 3}).grouped


def test_trial_resources_from_a_placement_group_factory():
    pgf = tune.with_resources(lambda c: None, tune.PlacementGroupFactory([{"CPU": 1}, {"CPU": 2, "GPU": 1}],
                                                                         strategy="SPREAD"))
    resources = resources_for(pgf, {})
    assert resources.grouped and resources.strategy == "SPREAD"
    assert resources.head == {"CPU": 1.0} and resources.total == {"CPU": 3.0, "GPU": 1.0}
    assert TrialResources.from_json(resources.to_json()) == resources
    assert TrialResources.from_json({"CPU": 2.0}) == TrialResources(({"CPU": 2.0},)), "a run saved before bundles"
    worker_only = resources_for(tune.with_resources(lambda c: None, tune.PlacementGroupFactory([{"GPU": 1}])), {})
    assert worker_only.head == {"GPU": 1.0} and not worker_only.grouped
    empty_head = resources_for(tune.with_resources(lambda c: None, tune.PlacementGroupFactory([{}, {"CPU": 2}])), {})
    assert empty_head.head == {} and empty_head.total == {"CPU": 2.0}, "the worker itself holds nothing, as in Ray"
    with pytest.raises(ValueError, match="asks for nothing"):
        resources_for(tune.with_resources(lambda c: None, tune.PlacementGroupFactory([{"CPU": 1}, {}])), {})
    with pytest.raises(ValueError, match="strategy='TIGHT'"):
        tune.PlacementGroupFactory([{"CPU": 1}], strategy="TIGHT")
    assert key_of(resources) != key_of(TrialResources(resources.bundles, "PACK")), "pooled apart by strategy"


# ----- checkpoints and results

def test_checkpoint_pruning_keeps_the_best_and_the_latest():
    ckpts = [(f"checkpoint_00000{i}", {"acc": acc}) for i, acc in enumerate([0.5, 0.9, 0.7, 0.1])]
    assert _trial.checkpoints_to_delete(ckpts, 2, "acc", "max") == ["checkpoint_000000", "checkpoint_000002"]
    assert _trial.checkpoints_to_delete(ckpts, 2, None, "max") == ["checkpoint_000000", "checkpoint_000001"]
    assert _trial.checkpoints_to_delete(ckpts, 1, "acc", "min") == ["checkpoint_000001", "checkpoint_000002",
                                                                     "checkpoint_000000"]
    assert _trial.checkpoints_to_delete(ckpts, None, "acc", "max") == []


def _result(name, reports, error=None):
    return Result(metrics=reports[-1] if reports else {}, checkpoint=None, path=f"/x/{name}", error=error,
                  _reports=reports, config={"name": name})


def test_get_best_result_scopes_and_errors():
    grid = ResultGrid([_result("a", [{"loss": 1.0}, {"loss": 0.5}]),
                       _result("b", [{"loss": 0.1}, {"loss": 0.9}]),
                       _result("c", [{"loss": math.nan}])], "/x", metric="loss", mode="min")
    assert grid.get_best_result().config["name"] == "a"
    assert grid.get_best_result(scope="all").config["name"] == "b"
    assert grid.get_best_result(scope="avg").config["name"] == "b"
    assert grid.get_best_result(metric="loss", mode="max").config["name"] == "b"
    with pytest.raises(tune.TuneError, match="acc"):
        grid.get_best_result(metric="acc", mode="max")
    with pytest.raises(ValueError, match="mode"):
        grid.get_best_result(metric="loss", mode="best")
    with pytest.raises(ValueError, match="metric and a mode"):
        ResultGrid(grid._results, "/x").get_best_result()
    single = ResultGrid([_result("only", [{"x": 1}])], "/x")
    assert single.get_best_result().config["name"] == "only"


def test_nested_metrics_are_addressed_with_slashes():
    grid = ResultGrid([_result("a", [{"val": {"acc": 0.3}}]), _result("b", [{"val": {"acc": 0.6}}])], "/x")
    assert grid.get_best_result("val/acc", "max").config["name"] == "b"


def test_optuna_search_when_optuna_is_installed():
    pytest.importorskip("optuna")
    from oxray.tune.search.optuna import OptunaSearch

    searcher = OptunaSearch(seed=0)
    searcher.set_search_properties("loss", "min", {"x": tune.uniform(-5, 5), "n": {"k": tune.choice([1, 2])}})
    best = math.inf
    for i in range(20):
        config = searcher.suggest(str(i))
        assert -5 <= config["x"] <= 5 and config["n"]["k"] in (1, 2)
        loss = (config["x"] - 1) ** 2
        best = min(best, loss)
        searcher.on_trial_complete(str(i), {"loss": loss})
    assert best < 1


def test_ray_tune_names_resolve_to_oxray_through_the_alias():
    import subprocess
    import sys

    code = ("import oxray; oxray.install_as_ray(shadow_installed_ray=True)\n"
            "import ray.tune, oxray.tune\n"
            "from ray.tune.schedulers import ASHAScheduler\n"
            "assert ray.tune.Tuner is oxray.tune.Tuner and ray.tune.Checkpoint is oxray.train.Checkpoint\n"
            "assert ASHAScheduler is oxray.tune.schedulers.ASHAScheduler\n")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


# ----- HyperBand and PBT

def test_hyperband_defaults_and_bracket_plan():
    from oxray.tune.schedulers import HyperBandScheduler
    from oxray.tune.schedulers.hyperband import bracket_plan

    hb = HyperBandScheduler()
    assert (hb.time_attr, hb.max_t, hb.reduction_factor, hb.stop_last_trials) == ("training_iteration", 81, 3, True)
    assert bracket_plan(81, 3) == [(81, 1), (34, 3), (15, 9), (8, 27), (5, 81)]
    assert bracket_plan(9, 3) == [(9, 1), (5, 3), (3, 9)]
    with pytest.raises(ValueError):
        HyperBandScheduler(reduction_factor=1)


def _hyperband_lockstep(hb, scores):
    """Runs trials as a controller would: paused trials wait, resumed ones go on."""
    PAUSE = TrialScheduler.PAUSE
    for trial in range(len(scores)):
        hb.on_trial_add(None, str(trial))
    t = {str(i): 0 for i in range(len(scores))}
    live, stopped_at, paused = set(t), {}, set()
    while live - paused:
        for trial in sorted(live - paused):
            t[trial] += 1
            decision = hb.on_trial_result(None, trial, {"training_iteration": t[trial], "m": scores[int(trial)]})
            if decision == STOP:
                stopped_at[trial] = t[trial]
                live.discard(trial)
            elif decision == PAUSE:
                paused.add(trial)
            resume, stop = hb.take_paused_decisions()
            paused -= set(resume)
            for trial_id in stop:
                paused.discard(trial_id)
                live.discard(trial_id)
                stopped_at[trial_id] = t[trial_id]
        if not (live - paused) and paused:
            hb.on_no_more_trials()
            resume, stop = hb.take_paused_decisions()
            paused -= set(resume)
            for trial_id in stop:
                paused.discard(trial_id)
                live.discard(trial_id)
                stopped_at[trial_id] = t[trial_id]
    return stopped_at


def test_hyperband_halves_synchronously():
    from oxray.tune.schedulers import HyperBandScheduler

    hb = HyperBandScheduler(metric="m", mode="max", max_t=9, reduction_factor=3)
    # Nine trials fill the first bracket (9 trials, milestones 1, 3, 9): 3 go past 1, 1 past 3.
    stopped = _hyperband_lockstep(hb, [5, 1, 9, 3, 7, 2, 8, 4, 6])
    assert sorted(stopped.values()) == [1] * 6 + [3] * 2 + [9]
    assert stopped["2"] == 9  # the best one ran to max_t
    assert {k for k, v in stopped.items() if v == 3} == {"4", "6"}


def test_hyperband_pauses_until_the_bracket_reached_its_milestone():
    from oxray.tune.schedulers import HyperBandScheduler

    hb = HyperBandScheduler(metric="loss", mode="min", max_t=9, reduction_factor=3)
    for trial in "abc":
        hb.on_trial_add(None, trial)
    PAUSE = TrialScheduler.PAUSE
    assert hb.on_trial_result(None, "a", {"training_iteration": 1, "loss": 0.1}) == PAUSE
    assert hb.on_trial_result(None, "b", {"training_iteration": 1, "loss": 0.5}) == PAUSE
    assert hb.take_paused_decisions() == ([], [])  # the bracket wants 9 trials before it cuts
    assert hb.on_trial_result(None, "c", {"training_iteration": 1, "loss": 0.9}) == PAUSE
    hb.on_no_more_trials()  # no more trials come: cut with three (keep ceil(9 / 3) = 3)
    assert hb.take_paused_decisions() == (["a", "b", "c"], [])
    for trial, loss in (("a", 0.1), ("b", 0.5)):
        assert hb.on_trial_result(None, trial, {"training_iteration": 2, "loss": loss}) == CONTINUE
        assert hb.on_trial_result(None, trial, {"training_iteration": 3, "loss": loss}) == PAUSE
    # c ends early: the others at the milestone are cut now (keep ceil(3 / 3) = 1).
    hb.on_trial_complete(None, "c", {"training_iteration": 2, "loss": 0.9})
    assert hb.take_paused_decisions() == (["a"], ["b"])
    assert hb.on_trial_result(None, "a", {"training_iteration": 9, "loss": 0.0}) == STOP  # max_t


def test_hyperband_fills_a_new_bracket_after_a_full_one():
    from oxray.tune.schedulers import HyperBandScheduler

    hb = HyperBandScheduler(metric="m", mode="max", max_t=9, reduction_factor=3)
    for i in range(12):
        hb.on_trial_add(None, str(i))
    first, second = hb.bands[0]
    assert (len(first.added), first.milestone) == (9, 1) and (len(second.added), second.milestone) == (3, 3)
    for i in range(19):
        hb.on_trial_add(None, f"x{i}")
    assert len(hb.bands) == 2  # 9 + 5 + 3 fill the first band


def test_pbt_quantiles_and_explore():
    from oxray.tune.schedulers.pbt import explore, quantiles

    assert quantiles({"a": 1, "b": 2, "c": 3, "d": 4, "e": 5}, 0.25) == (["a", "b"], ["d", "e"])
    assert quantiles({"a": 1, "b": 2, "c": 3}, 0.5) == (["a"], ["c"])
    assert quantiles({"a": 1}, 0.25) == ([], [])
    rng = random.Random(0)
    seen_lr, seen_bs = set(), set()
    for _ in range(200):
        new = explore({"lr": 0.1, "bs": 32, "opt": {"m": 0.9}, "fixed": 1},
                      {"lr": tune.uniform(0.5, 0.6), "bs": [16, 32, 64], "opt": {"m": [0.8, 0.9, 0.99]}}, rng)
        assert new["fixed"] == 1 and new["opt"]["m"] in (0.8, 0.9, 0.99) and new["bs"] in (16, 32, 64)
        seen_lr.add(round(new["lr"], 6) if new["lr"] < 0.5 else "resampled")
        seen_bs.add(new["bs"])
    assert seen_lr == {0.12, 0.08, "resampled"} and seen_bs == {16, 32, 64}
    always = explore({"lr": 0.1}, {"lr": [1, 2]}, rng)  # not among the list's values: resampled
    assert always["lr"] in (1, 2)
    assert explore({"n": 10}, {"n": tune.randint(1, 5)}, rng, resample_probability=0)["n"] in (8, 12)
    custom = explore({"lr": 0.1}, {}, rng, custom_explore_fn=lambda c: {**c, "lr": c["lr"] * 10})
    assert custom == {"lr": 1.0}


def test_pbt_exploits_a_bottom_trial_onto_a_top_trial():
    from oxray.tune.schedulers import PopulationBasedTraining

    pbt = PopulationBasedTraining(time_attr="training_iteration", metric="acc", mode="max", perturbation_interval=2,
                                  hyperparam_mutations={"lr": [0.001, 0.01, 0.1]}, seed=1)
    defaults = PopulationBasedTraining(hyperparam_mutations={"lr": [1]})
    assert (defaults.time_attr, defaults.perturbation_interval, defaults.quantile_fraction,
            defaults.resample_probability, defaults.perturbation_factors) == ("time_total_s", 60.0, 0.25, 0.25,
                                                                            (1.2, 0.8))

    class T:
        def __init__(self, trial_id, lr):
            self.trial_id, self.config = trial_id, {"lr": lr}

    trials = [T("good", 0.01), T("mid", 0.01), T("bad", 0.1), T("ok", 0.001)]
    for trial in trials:
        pbt.on_trial_add(None, trial)
    accs = {"good": 0.9, "mid": 0.5, "bad": 0.1, "ok": 0.6}
    for trial in trials:  # first interval not reached: nothing happens
        assert pbt.on_trial_result(None, trial, {"training_iteration": 1, "acc": accs[trial.trial_id],
                                                 "checkpoint_dir_name": "checkpoint_000000"}) == CONTINUE
    decisions = {t.trial_id: pbt.on_trial_result(None, t, {"training_iteration": 2, "acc": accs[t.trial_id]})
                 for t in trials}
    # Each is ranked among the scores so far: mid is the bottom of two, bad of three; ok is not.
    assert decisions == {"good": CONTINUE, "mid": TrialScheduler.PAUSE, "bad": TrialScheduler.PAUSE, "ok": CONTINUE}
    donor, config = pbt.take_exploit("bad")
    assert donor == "good" and config["lr"] in (0.001, 0.01, 0.1)
    assert pbt.take_exploit("bad") is None  # handed out once
    # Within the interval after its perturbation, the trial is left alone.
    assert pbt.on_trial_result(None, trials[2], {"training_iteration": 3, "acc": 0.0}) == CONTINUE
    with pytest.raises(ValueError, match="hyperparam_mutations"):
        PopulationBasedTraining()


def test_synchronous_pbt_waits_for_every_trial_then_exploits_and_resumes_all():
    from oxray.tune.schedulers import PopulationBasedTraining

    pbt = PopulationBasedTraining(time_attr="training_iteration", metric="acc", mode="max", perturbation_interval=2,
                                  quantile_fraction=0.25, hyperparam_mutations={"lr": [0.001, 0.01]}, synch=True,
                                  seed=0)

    class T:
        def __init__(self, trial_id):
            self.trial_id, self.config = trial_id, {"lr": 0.01}

    trials = {name: T(name) for name in ("a", "b", "c", "d")}
    for trial in trials.values():
        pbt.on_trial_add(None, trial)
    result = lambda it, acc: {"training_iteration": it, "acc": acc, "checkpoint_dir_name": f"checkpoint_{it:06d}"}
    assert pbt.on_trial_result(None, trials["a"], result(1, 0.5)) == CONTINUE, "before the first sync point"
    accs = {"a": 0.9, "b": 0.5, "c": 0.2, "d": 0.6}
    for name in ("a", "b", "c"):
        assert pbt.on_trial_result(None, trials[name], result(2, accs[name])) == TrialScheduler.PAUSE
        assert pbt.take_paused_decisions() == ([], []), "d has not reached the sync point"
    assert pbt.on_trial_result(None, trials["d"], result(3, accs["d"])) == TrialScheduler.PAUSE
    resume, stop = pbt.take_paused_decisions()
    assert sorted(resume) == ["a", "b", "c", "d"] and stop == []
    donor, config = pbt.take_exploit("c")
    assert donor == "a" and config["lr"] in (0.001, 0.01), "the bottom quarter takes the top's checkpoint"
    assert all(pbt.take_exploit(name) is None for name in ("a", "b", "d"))
    # The next sync point is after the furthest trial's time (3) and a whole interval on.
    assert pbt.on_trial_result(None, trials["a"], result(3, 0.9)) == CONTINUE
    assert pbt.on_trial_result(None, trials["a"], result(4, 0.9)) == TrialScheduler.PAUSE
    # A trial that ends no longer holds the others back.
    for name in ("b", "c"):
        pbt.on_trial_result(None, trials[name], result(4, accs[name]))
    pbt.on_trial_complete(None, trials["d"], result(3, 0.6))
    assert sorted(pbt.take_paused_decisions()[0]) == ["a", "b", "c"]


# ----- OptunaSearch, against a stand-in for optuna's ask/tell API when optuna is absent

def _fake_optuna():
    """The parts of optuna 4.x OptunaSearch calls, recording what it was given."""
    import types

    optuna = types.ModuleType("optuna")

    def distribution(name):
        return type(name, (), {"__init__": lambda self, **kw: self.__dict__.update(kw, kind=name)})

    optuna.distributions = types.SimpleNamespace(**{n: distribution(n) for n in (
        "FloatDistribution", "IntDistribution", "CategoricalDistribution")})
    optuna.samplers = types.SimpleNamespace(TPESampler=lambda seed=None: ("tpe", seed))
    state = types.SimpleNamespace(FAIL="FAIL", COMPLETE="COMPLETE")

    class Trial:
        def __init__(self, params):
            self.params, self.reports = params, []

        def report(self, value, step):
            self.reports.append((step, value))

    class Study:
        def __init__(self, **kwargs):
            self.kwargs, self.queue, self.told, self.added = kwargs, [], [], []

        def enqueue_trial(self, params):
            self.queue.append(dict(params))

        def add_trial(self, trial):
            self.added.append(trial)

        def ask(self, fixed_distributions=None):
            if self.queue:
                return Trial(self.queue.pop(0))
            params = {}
            for key, d in (fixed_distributions or {}).items():
                params[key] = d.choices[-1] if d.kind == "CategoricalDistribution" else d.high
            return Trial(params)

        def tell(self, trial, values=None, state=None):
            self.told.append((trial.params, values, state))

    optuna.create_study = lambda **kwargs: Study(**kwargs)
    optuna.trial = types.SimpleNamespace(TrialState=state,
                                         create_trial=lambda **kwargs: dict(kwargs))
    return optuna


def test_optuna_search_asks_and_tells(monkeypatch):
    import sys

    fake = _fake_optuna()
    monkeypatch.setitem(sys.modules, "optuna", fake)
    from oxray.tune.search.optuna import OptunaSearch, distribution_spec

    assert distribution_spec(tune.randint(0, 10)) == ("IntDistribution", {"low": 0, "high": 9, "log": False, "step": 1})
    assert distribution_spec(tune.qrandint(0, 10, 5))[1] == {"low": 0, "high": 10, "log": False, "step": 5}
    assert distribution_spec(tune.qloguniform(1e-4, 1, 1e-4))[1]["step"] is None  # optuna: no step on a log range
    assert distribution_spec(tune.quniform(0, 1, 0.5))[1] == {"low": 0.0, "high": 1.0, "log": False, "step": 0.5}

    space = {"x": tune.uniform(-5, 5), "n": {"k": tune.choice([1, 2])}, "fixed": 7}
    searcher = OptunaSearch(points_to_evaluate=[{"x": 0.5, "n": {"k": 1}}], seed=3)
    searcher.set_search_properties("loss", "min", space)
    study = searcher.study
    assert study.kwargs["directions"] == ["minimize"] and study.kwargs["sampler"] == ("tpe", 3)
    assert searcher.suggest("a") == {"x": 0.5, "n": {"k": 1}, "fixed": 7}  # the point first, flattened for optuna
    assert searcher.suggest("b") == {"x": 5.0, "n": {"k": 2}, "fixed": 7}  # then the sampler, constants kept
    searcher.on_trial_result("a", {"loss": 2.0, "training_iteration": 1})
    assert searcher.trials["a"].reports == [(1, 2.0)]
    searcher.on_trial_complete("a", {"loss": 1.5})
    searcher.on_trial_complete("b", None, error=True)
    assert study.told == [({"x": 0.5, "n/k": 1}, 1.5, None), ({"x": 5.0, "n/k": 2}, None, "FAIL")]

    known = OptunaSearch(space=space, metric=["a", "b"], mode=["max", "min"],
                         points_to_evaluate=[{"x": 1.0, "n": {"k": 2}}], evaluated_rewards=[[0.5, 0.1]])
    assert known.study.kwargs["directions"] == ["maximize", "minimize"] and not known.study.queue
    assert known.study.added[0]["params"] == {"x": 1.0, "n/k": 2} and known.study.added[0]["values"] == [0.5, 0.1]
    known.suggest("c")
    known.on_trial_complete("c", {"a": 1, "b": 2})
    assert known.study.told[-1][1] == [1, 2]
    with pytest.raises(ValueError, match="metric"):
        OptunaSearch().set_search_properties(None, None, space)


# ----- the status table

def _trials(n, status="TERMINATED"):
    out = []
    for i in range(n):
        trial = _trial.Trial(f"abcde_{i:05d}", "fit", {"lr": 0.1 * (i + 1), "layers": {"width": 8}, "seed": 7},
                             str(i), f"/tmp/t{i}", TrialResources(({"CPU": 1.0},)), status=status)
        trial.last_result = {"training_iteration": i + 1, "time_total_s": 0.5 * i, "loss": 1.0 / (i + 1),
                             "accuracy": 0.5 + i / 100, "done": True, "config": trial.config}
        out.append(trial)
    return out


def test_the_status_block_shows_each_trial_its_varied_params_and_metrics():
    import datetime

    from oxray.tune._progress import status_block, trial_ended

    trials = _trials(3)
    trials[2].status = "RUNNING"
    text = status_block(trials, "loss", "min", 75.0, "1.0/2 CPUs, 0.0/0 GPUs",
                        now=datetime.datetime(2026, 1, 2, 3, 4, 5))
    lines = text.splitlines()
    assert lines[0] == "Trial status: 1 RUNNING | 2 TERMINATED"
    assert lines[1] == "Current time: 2026-01-02 03:04:05. Total running time: 1min 15s"
    assert lines[2] == "Logical resource usage: 1.0/2 CPUs, 0.0/0 GPUs"
    assert lines[3] == "Current best trial: abcde_00002 with loss=0.333333 and params={'lr': 0.30000000000000004}"
    header = lines[5]
    # Only the parameter that varies is a column; the run's metric comes first among the metrics.
    assert header.split() == ["|", "Trial", "name", "status", "lr", "iter", "total", "time", "(s)", "loss", "accuracy", "|"]
    assert lines[7].split()[1:3] == ["fit_abcde_00002", "RUNNING"], "running trials first"
    assert lines[8].split()[1:4] == ["fit_abcde_00000", "TERMINATED", "0.1"]
    assert len({len(line) for line in lines[4:]}) == 1, "every line of the table is as wide"
    assert "completed after 1 iterations" in trial_ended(trials[0], 3)
    trials[1].status = "ERROR"
    assert "Error file: /tmp/t1/error.txt" in trial_ended(trials[1], 3)


def test_a_large_run_shows_a_few_trials_of_each_status():
    from oxray.tune._progress import shown_rows, status_block

    trials = _trials(30) + _trials(2, status="RUNNING")
    rows = shown_rows(trials)
    assert [r.status for r in rows[:2]] == ["RUNNING", "RUNNING"]
    assert rows[-1] == "... 25 more TERMINATED" and len(rows) == 8
    assert status_block(trials, None, None, 1.0).splitlines()[-1] == "... 25 more TERMINATED"
    assert len(shown_rows(_trials(20))) == 20


def test_what_a_remote_experiment_uploads(tmp_path):
    """Only files that changed since their last upload, no temporary files, and never a
    checkpoint (workers write those to storage themselves)."""
    from oxray.tune._experiment import changed_files, is_checkpoint_file

    (tmp_path / "trial_a").mkdir()
    (tmp_path / "trial_a" / "result.json").write_text("{}\n")
    (tmp_path / "tuner.pkl").write_bytes(b"x")
    (tmp_path / "tuner.pkl.tmp").write_bytes(b"half")
    first = changed_files(str(tmp_path), {})
    assert [rel for rel, _ in first] == ["trial_a/result.json", "tuner.pkl"]
    uploaded = dict(first)
    assert changed_files(str(tmp_path), uploaded) == []
    (tmp_path / "trial_a" / "result.json").write_text("{}\n{}\n")
    assert [rel for rel, _ in changed_files(str(tmp_path), uploaded)] == ["trial_a/result.json"]
    assert is_checkpoint_file("trial_a/checkpoint_000003/model.pt")
    assert is_checkpoint_file("trial_a/.exploit_checkpoint/model.pt")
    assert not is_checkpoint_file("trial_a/result.json") and not is_checkpoint_file("checkpoint_000001/x")


def test_where_a_run_to_restore_is():
    from oxray.tune._tuner import _parent_and_name

    assert _parent_and_name("s3://bucket/results/run/") == ("s3://bucket/results", "run")
    assert _parent_and_name("results/run", storage_filesystem=object()) == ("results", "run")
    parent, name = _parent_and_name("results/run")
    assert os.path.isabs(parent) and name == "run"


def test_the_pool_hands_out_idle_workers_by_resources():
    """An idle worker of the same bundles is taken; one of other bundles is ended instead,
    so that its room frees for the worker the trial waits for."""
    from oxray.tune._pool import WorkerPool

    pool, ended = WorkerPool(), []
    pool._end = ended.append
    one_cpu, two_cpus = TrialResources(({"CPU": 1.0},)), TrialResources(({"CPU": 2.0},))
    pool.release("a", one_cpu)
    assert pool.take_idle(two_cpus) is None and ended == ["a"]
    pool.release("b", two_cpus)
    assert pool.take_idle(two_cpus) == "b" and "b" in pool.busy and ended == ["a"]
    assert pool.take_idle(two_cpus) is None and ended == ["a"], "nothing idle: nothing ended"
