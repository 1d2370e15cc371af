"""oxray.tune's decisions without a cluster: search spaces, variant generation, searchers,
schedulers on scripted results, stop conditions, checkpoint pruning, result picking."""

import math
import random
import threading

import pytest

from oxray import tune
from oxray.tune import _trial
from oxray.tune._result import Result, ResultGrid
from oxray.tune._stopper import make_stopper
from oxray.tune._trainable import resources_for
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
    assert resources_for(lambda c: None, {}) == {"CPU": 1.0}
    with_gpu = tune.with_resources(lambda c: None, {"cpu": 2, "gpu": 1})
    assert resources_for(with_gpu, {}) == {"CPU": 2.0, "GPU": 1.0}
    by_config = tune.with_resources(lambda c: None, lambda config: {"cpu": config["n"]})
    assert resources_for(by_config, {"n": 3}) == {"CPU": 3.0}
    pgf = tune.with_resources(lambda c: None, tune.PlacementGroupFactory([{"CPU": 1}, {"CPU": 2}]))
    assert resources_for(pgf, {}) == {"CPU": 1.0}


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
