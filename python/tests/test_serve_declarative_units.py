"""The declarative builder without a cluster: import paths, builders and their arguments,
deployment overrides, and a version that depends on the config, not on the pickle."""

import json
import sys

import pytest

from oxray.serve import _declarative

MODULE = '''
from oxray import serve
from pydantic import BaseModel


class Args(BaseModel):
    word: str = "typed"


@serve.deployment(num_replicas=1)
class Inner:
    pass


@serve.deployment
class Outer:
    def __init__(self, inner, word):
        self.word = word


def plain(args):
    return Outer.bind(Inner.bind(), args.get("word", "plain"))


def typed(args: Args):
    return Outer.bind(Inner.bind(), args.word)


def nothing():
    return 42


app = Outer.bind(Inner.bind(), "bound")
'''


@pytest.fixture
def module(tmp_path, monkeypatch):
    (tmp_path / "decl_units_app.py").write_text(MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield "decl_units_app"
    sys.modules.pop("decl_units_app", None)


def build(**config):
    return _declarative.build({"name": "x", **config})


def test_import_paths_with_a_colon_or_a_dot(module):
    assert _declarative.import_attr(f"{module}:app") is _declarative.import_attr(f"{module}.app")
    with pytest.raises(ValueError, match="module.submodule:attribute"):
        _declarative.import_attr("app")


def test_builders_get_their_args_as_a_dict_or_their_pydantic_model(module):
    plain = build(import_path=f"{module}:plain", args={"word": "w"})
    typed = build(import_path=f"{module}:typed", args={"word": "t"})
    assert [d["name"] for d in plain["deployments"]] == ["Inner", "Outer"]
    assert plain["ingress"] == typed["ingress"] == "Outer"
    with pytest.raises(ValueError, match="only be passed to an application builder"):
        build(import_path=f"{module}:app", args={"word": "w"})
    with pytest.raises(TypeError, match="returned int, not an Application"):
        build(import_path=f"{module}:nothing")
    with pytest.raises(TypeError, match="is a Deployment, not an Application"):
        build(import_path=f"{module}:Inner")


def test_overrides_replace_options_by_deployment_name(module):
    body = build(import_path=f"{module}:app", deployments=[
        {"name": "Inner", "num_replicas": 3, "user_config": {"a": 1}, "ray_actor_options": {"num_cpus": 0.5}}])
    inner = body["deployments"][0]
    assert (inner["num_replicas"], inner["user_config"], inner["resources"]["CPU"]) == (3, {"a": 1}, 0.5)
    assert inner["config"]["num_replicas"] == 3
    with pytest.raises(ValueError, match="Deployment 'Nope' does not exist"):
        build(import_path=f"{module}:app", deployments=[{"name": "Nope", "num_replicas": 1}])
    with pytest.raises(TypeError, match="unknown deployment option"):
        build(import_path=f"{module}:app", deployments=[{"name": "Inner", "bogus": 1}])


def test_the_version_follows_the_config_not_the_pickle(module):
    first = build(import_path=f"{module}:plain", args={"word": "w"})
    sys.modules.pop(module)  # a fresh import pickles the classes anew
    again = build(import_path=f"{module}:plain", args={"word": "w"}, deployments=[{"name": "Outer", "user_config": {}}])
    other = build(import_path=f"{module}:plain", args={"word": "v"})
    assert [d["version"] for d in first["deployments"]] == [d["version"] for d in again["deployments"]]
    assert first["deployments"][1]["version"] != other["deployments"][1]["version"]


def test_the_actor_answers_errors_as_text(module):
    reply = json.loads(_declarative.ApplicationBuilder().build(json.dumps({"name": "x", "import_path": "nope_mod:app"})))
    assert "No module named 'nope_mod'" in reply["error"]
    reply = json.loads(_declarative.ApplicationBuilder().build(json.dumps({"name": "x", "import_path": f"{module}:app"})))
    assert reply["app"]["ingress"] == "Outer"
