"""`import ray` served by oxray: `install_as_ray()`, `OXRAY_AS_RAY` through the wheel's
`.pth` hook, and the same name in the tasks such a driver runs."""

import importlib.util
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from conftest import OXRAY_BIN

PTH = Path(__file__).resolve().parents[1] / "oxray_as_ray.pth"


def _run(code, tmp_path, **env):
    full = {k: v for k, v in os.environ.items() if not k.startswith("OXRAY_")}
    full.update(OXRAY_BIN=OXRAY_BIN, OXRAY_HOME=str(tmp_path / "home"), **env)
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=full, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    return out.stdout.split()


def test_a_script_that_imports_ray_runs_on_oxray(tmp_path):
    lines = _run("""
        import oxray
        assert oxray.install_as_ray(shadow_installed_ray=True)
        import ray
        from ray.util.placement_group import placement_group
        from ray.exceptions import RayTaskError

        @ray.remote
        def which():
            import ray
            return ray.__name__

        ray.init(num_cpus=1)
        print(ray is oxray, ray.get(which.remote()), placement_group.__module__, RayTaskError.__module__)
        ray.shutdown()
    """, tmp_path, OXRAY_AS_RAY="force")
    assert lines == ["True", "oxray", "oxray.util.placement_group", "oxray.exceptions"]


@pytest.mark.skipif(importlib.util.find_spec("ray") is None, reason="needs a real Ray installed beside oxray")
def test_a_real_ray_is_never_shadowed_unless_asked(tmp_path):
    lines = _run("""
        import warnings
        import oxray
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            print(oxray.install_as_ray())
        print(any("real Ray is installed" in str(w.message) for w in caught))
        import ray
        print(ray.__name__, "oxray" in ray.__file__)
    """, tmp_path, OXRAY_AS_RAY="1")
    assert lines == ["False", "True", "ray", "False"]


def test_the_pth_hook_maps_ray_at_interpreter_start(tmp_path):
    site = tmp_path / "site"
    site.mkdir()
    shutil.copy(PTH, site)
    code = "import site; site.addsitedir({!r}); import sys; print('oxray' in sys.modules); import ray; print(ray.__name__)"
    assert _run(code.format(str(site)), tmp_path, OXRAY_AS_RAY="force") == ["True", "oxray"]
    assert _run(code.format(str(site)) .replace("import ray; print(ray.__name__)", "print('-')"), tmp_path) == \
        ["False", "-"], "without the variable the hook imports nothing"
