"""`import ray`, `importlib.metadata.version("ray")` and the `ray` command where oxray is
installed: oxray's where no real Ray is, Ray's where it is, in drivers and in their workers
(each case in a new venv of `bare_env`)."""

import os
import subprocess
import textwrap

import pytest

import bare_env
from conftest import OXRAY_BIN


@pytest.fixture
def make_env(tmp_path):
    return lambda with_ray: bare_env.make_env(tmp_path / ("with-ray" if with_ray else "bare"), with_ray)


def _run(python, code, tmp_path, **env):
    full = {k: v for k, v in os.environ.items() if not k.startswith(("OXRAY_", "RAY_"))}
    full.update(OXRAY_BIN=OXRAY_BIN, OXRAY_HOME=str(tmp_path / "home"), **env)
    out = subprocess.run([str(python), "-c", textwrap.dedent(code)], env=full, capture_output=True, text=True,
                         timeout=120)
    return out


def test_import_ray_is_oxray_where_ray_is_not_installed(make_env, tmp_path):
    python = make_env(with_ray=False)
    out = _run(python, """
        import sys
        print("oxray" in sys.modules)
        import importlib.metadata
        import ray
        import oxray
        from ray.util.placement_group import placement_group

        @ray.remote
        def which():
            import ray
            return ray.__name__, ray.__version__

        ray.init(num_cpus=1)
        print(ray is oxray, ray.__version__, oxray.__oxray_version__, importlib.metadata.version("ray"))
        print(placement_group.__module__, *ray.get(which.remote()))
        print([d.metadata["Name"] for d in importlib.metadata.distributions()].count("ray"))
        ray.shutdown()
    """, tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["False", "True", "2.60.0", "0.1.0", "2.60.0",
                                  "oxray.util.placement_group", "oxray", "2.60.0", "0"]
    assert "(as Ray 2.60.0): connected to the cluster at" in out.stderr


def test_pip_sees_no_ray_and_the_name_can_be_turned_off(make_env, tmp_path):
    python = make_env(with_ray=False)
    shown = subprocess.run([str(python), "-m", "pip", "show", "ray"], capture_output=True, text=True, timeout=120)
    assert shown.returncode != 0 and "not found" in shown.stderr.lower(), shown.stdout + shown.stderr
    out = _run(python, "import ray", tmp_path, OXRAY_AS_RAY="0")
    assert out.returncode != 0 and "No module named 'ray'" in out.stderr


def test_a_real_ray_installed_beside_oxray_wins(make_env, tmp_path):
    python = make_env(with_ray=True)
    out = _run(python, """
        import importlib.metadata
        import ray
        print("oxray" in ray.__file__, ray.__version__, importlib.metadata.version("ray"))
    """, tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["False", "2.60.0", "2.60.0"]
    forced = _run(python, "import ray, oxray; print(ray is oxray)", tmp_path, OXRAY_AS_RAY="force")
    assert forced.stdout.split() == ["True"], forced.stderr


@pytest.mark.parametrize("with_ray", [False, True])
def test_the_ray_command_is_ray_s_where_ray_is_installed(make_env, tmp_path, with_ray):
    python = make_env(with_ray=with_ray)
    out = _run(python, "import sys, oxray_ray_name; sys.argv = ['ray', '--version']; oxray_ray_name.ray_command()", tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("ray, version 2.60.0")
    assert ("oxray" in out.stdout) is not with_ray, out.stdout
