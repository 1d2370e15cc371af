"""runtime_env for tasks and actors: working_dir and py_modules (uploaded once, unpacked and
cached by the node), env_vars merged with the job's, and a job's runtime_env inherited by
the tasks of its driver."""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import oxray

from conftest import OXRAY_BIN


def _project(root: Path) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "helper_mod.py").write_text("def value():\n    return 42\n")
    (root / "data.txt").write_text("from the working dir")
    package = root.parent / f"{root.name}-modules" / "shared_pkg"
    package.mkdir(parents=True, exist_ok=True)
    (package / "__init__.py").write_text("NAME = 'shared'\n")
    return package


def test_tasks_and_actors_run_in_their_working_dir_with_their_modules(private_cluster, tmp_path):
    package = _project(tmp_path / "project")
    env = {"working_dir": str(tmp_path / "project"), "py_modules": [str(package)], "env_vars": {"COLOR": "blue"}}

    @oxray.remote(runtime_env=env)
    def inside():
        import helper_mod
        import shared_pkg

        return helper_mod.value(), open("data.txt").read(), shared_pkg.NAME, os.environ["COLOR"]

    @oxray.remote(runtime_env=env)
    class Inside:
        def value(self):
            import helper_mod

            return helper_mod.value()

    assert oxray.get(inside.remote(), timeout=60) == (42, "from the working dir", "shared", "blue")
    assert oxray.get(Inside.remote().value.remote(), timeout=60) == 42

    @oxray.remote
    def outside():
        try:
            import helper_mod  # noqa: F401
        except ImportError:
            return "not here"

    assert oxray.get(outside.remote(), timeout=60) == "not here", "other tasks have their own workers"
    with pytest.raises(ValueError, match="not supported"):
        inside.options(runtime_env={"conda": "env"}).remote()


def _wheel(directory: Path, name: str, value: int) -> Path:
    """A minimal pure-Python wheel, so pip installs it with no index."""
    import zipfile

    path = directory / f"{name}-1.0-py3-none-any.whl"
    info = f"{name}-1.0.dist-info"
    with zipfile.ZipFile(path, "w") as wheel:
        wheel.writestr(f"{name}/__init__.py", f"VALUE = {value}\n")
        wheel.writestr(f"{info}/METADATA", f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
        wheel.writestr(f"{info}/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        wheel.writestr(f"{info}/RECORD", "")
    return path


def test_a_task_or_actor_gets_its_own_pip_packages(private_cluster, tmp_path):
    wheel = _wheel(tmp_path, "oxtaskpkg", 7)
    requirements = tmp_path / "requirements.txt"
    requirements.write_text(f"{_wheel(tmp_path, 'oxactorpkg', 9)}\n")

    def probe(name):
        import importlib
        import importlib.util

        try:
            module = importlib.import_module(name)
        except ImportError:
            return None, sys.prefix
        # The worker still sees the packages of the interpreter it was started from.
        sees_oxray = importlib.util.find_spec("oxray") is not None
        return (module.VALUE if sees_oxray else "no oxray"), sys.prefix

    with_pip = oxray.remote(runtime_env={"pip": [str(wheel)]})(probe)
    value, prefix = oxray.get(with_pip.remote("oxtaskpkg"), timeout=180)
    assert value == 7 and prefix != sys.prefix, "the task runs in a virtualenv of its own"
    assert oxray.get(with_pip.remote("oxtaskpkg"), timeout=60) == (7, prefix), "the virtualenv is reused"
    assert oxray.get(oxray.remote(probe).remote("oxtaskpkg"), timeout=60)[0] is None, "others do not see it"

    @oxray.remote(runtime_env={"pip": str(requirements)})
    class Holder:
        def probe(self, name):
            return probe(name)

    assert oxray.get(Holder.remote().probe.remote("oxactorpkg"), timeout=180)[0] == 9, "a requirements file"

    failing = oxray.remote(runtime_env={"pip": [str(tmp_path / "missing-1.0-py3-none-any.whl")]})(probe)
    with pytest.raises(Exception, match="runtime_env setup failed"):
        oxray.get(failing.remote("x"), timeout=180)


def test_an_environment_that_cannot_be_made_fails_its_task_with_its_own_error(private_cluster, tmp_path):
    """RuntimeEnvSetupError comes from the core's outcome code, not from the message's
    words, and a task with retries left is not run again for it."""
    from oxray.exceptions import RuntimeEnvSetupError

    missing = str(tmp_path / "absent-1.0-py3-none-any.whl")

    @oxray.remote(max_retries=3, runtime_env={"pip": [missing]})
    def never():
        return 1

    with pytest.raises(RuntimeEnvSetupError, match="runtime_env setup failed"):
        oxray.get(never.remote(), timeout=180)


def test_setup_timeout_seconds_bounds_preparing_an_environment(tmp_path):
    """A pip index that never answers: with config.setup_timeout_seconds the task fails with
    RuntimeEnvSetupError when the time is up, rather than waiting on pip."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OXRAY_", "PIP_"))}
    env.update(OXRAY_BIN=OXRAY_BIN, OXRAY_HOME=str(tmp_path / "home"))
    code = textwrap.dedent("""
        import os, socket, time
        import oxray
        from oxray.exceptions import RuntimeEnvSetupError

        silent = socket.socket()
        silent.bind(("127.0.0.1", 0))
        silent.listen(16)  # accepted by the kernel, never answered
        os.environ["PIP_INDEX_URL"] = "http://127.0.0.1:%d/simple" % silent.getsockname()[1]
        os.environ["PIP_DEFAULT_TIMEOUT"] = "120"
        oxray.init(num_cpus=1)

        @oxray.remote(runtime_env={"pip": ["oxray-never-served==1.0"], "config": {"setup_timeout_seconds": 4}})
        def never():
            return 1

        start = time.time()
        try:
            oxray.get(never.remote(), timeout=100)
        except RuntimeEnvSetupError as e:
            print("failed", "setup_timeout_seconds" in str(e), time.time() - start < 60)
    """)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=150)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["failed", "True", "True"], out.stdout + out.stderr


def test_runtime_env_classes_and_config_checks(private_cluster):
    from oxray.runtime_env import RuntimeEnv, RuntimeEnvConfig

    env = RuntimeEnv(env_vars={"A": "1"}, config=RuntimeEnvConfig(setup_timeout_seconds=30))
    assert env == {"env_vars": {"A": "1"}, "config": {"setup_timeout_seconds": 30, "eager_install": True}}
    assert env.env_vars() == {"A": "1"} and not env.has_working_dir()

    @oxray.remote(runtime_env=env)
    def read():
        return os.environ["A"]

    assert oxray.get(read.remote(), timeout=60) == "1"
    with pytest.raises(ValueError, match="greater than zero"):
        RuntimeEnvConfig(setup_timeout_seconds=0)
    with pytest.raises(TypeError, match="must be an int"):
        read.options(runtime_env={"config": {"setup_timeout_seconds": "5"}}).remote()
    with pytest.raises(ValueError, match="not known"):
        read.options(runtime_env={"config": {"retries": 2}}).remote()


def test_a_job_runtime_env_merges_with_the_tasks(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("OXRAY_")}
    env.update(OXRAY_BIN=OXRAY_BIN, OXRAY_HOME=str(tmp_path / "home"))
    code = textwrap.dedent("""
        import os, oxray
        oxray.init(num_cpus=1, runtime_env={"env_vars": {"A": "job", "B": "job"}})

        @oxray.remote(runtime_env={"env_vars": {"B": "task"}})
        def read():
            return os.environ["A"], os.environ["B"]

        @oxray.remote(num_cpus=0)
        class Reader:
            def read(self):
                return os.environ["A"], os.environ["B"]

        @oxray.remote(num_cpus=0, runtime_env={"env_vars": {"B": "parent"}})
        def nested():
            # Work started by a task inherits the task's runtime_env, its own merged over it.
            own = oxray.get(read.remote())
            inherited = oxray.get(Reader.remote().read.remote())
            return own + inherited

        print(*oxray.get(read.remote()), *oxray.get(nested.remote()))
    """)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["job", "task", "job", "task", "job", "parent"]


def test_tasks_of_a_submitted_job_inherit_its_working_dir(cluster, tmp_path):
    project = tmp_path / "job-project"
    _project(project)
    (project / "driver.py").write_text(textwrap.dedent("""
        import oxray
        oxray.init()

        @oxray.remote
        def value():
            import helper_mod
            return helper_mod.value()

        print("task says", oxray.get(value.remote()))
    """))
    out = subprocess.run([OXRAY_BIN, "job", "submit", "--working-dir", str(project), "--", sys.executable,
                          "driver.py"], env=cluster.env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "task says 42" in out.stdout


def test_workers_import_the_drivers_own_modules(tmp_path):
    """As in Ray, a driver's workers find the modules beside its script, in its working
    directory and in its JobConfig's code_search_path: a task defined in a neighbour module is
    pickled by reference, and nested tasks see the same."""
    scripts, cwd = tmp_path / "scripts", tmp_path / "here"
    scripts.mkdir()
    cwd.mkdir()
    (scripts / "shapes.py").write_text("def area(w, h):\n    return w * h\n")
    (cwd / "units.py").write_text("SUFFIX = 'm2'\n")
    library = tmp_path / "library"
    library.mkdir()
    (library / "rounding.py").write_text("def exact(x):\n    return int(x)\n")
    (scripts / "driver.py").write_text(textwrap.dedent(f"""
        import os
        import oxray
        import shapes
        from oxray.job_config import JobConfig

        config = JobConfig(code_search_path=[{str(library)!r}], runtime_env={{"env_vars": {{"UNIT": "m2"}}}},
                           ray_namespace="shapes")
        oxray.init(num_cpus=1, job_config=config)
        area = oxray.remote(shapes.area)

        @oxray.remote(num_cpus=0)
        def labelled(w, h):
            import rounding
            import units
            assert units.SUFFIX == os.environ["UNIT"] and oxray.get_runtime_context().namespace == "shapes"
            return f"{{rounding.exact(oxray.get(area.remote(w, h)))}} {{units.SUFFIX}}"

        print(oxray.get(labelled.remote(3, 4)))
    """))
    env = {k: v for k, v in os.environ.items() if not k.startswith("OXRAY_") and k != "PYTHONPATH"}
    env.update(OXRAY_BIN=OXRAY_BIN, OXRAY_HOME=str(tmp_path / "home"))
    out = subprocess.run([sys.executable, str(scripts / "driver.py")], cwd=cwd, env=env, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["12", "m2"]


def test_driver_code_paths_decisions():
    from oxray._private.runtime_env import code_paths

    assert code_paths("/s/driver.py", ["/s", "/lib"], "/cwd", False, False) == ["/s", "/cwd"]
    assert code_paths("/s/driver.py", ["/lib"], "/cwd", False, False) == ["/cwd"], "python -m: no script dir"
    assert code_paths("", ["/lib"], "/cwd", True, False) == ["/cwd"], "a shell has no script"
    assert code_paths("/s/driver.py", ["/s"], "/cwd", False, True) == ["/s"], "a working_dir replaces the cwd"
    assert code_paths("/s/driver.py", ["/s"], "/s", False, False) == ["/s"]
