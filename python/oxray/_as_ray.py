"""`import ray` served by oxray, for code the user cannot edit (libraries, old scripts).

`install_as_ray()` puts an import hook in front of the others: `ray` is the `oxray` package
and `ray.<name>` is `oxray.<name>` (the same module objects), so `ray.remote`,
`ray.util.placement_group`, `ray.exceptions.RayTaskError` and the rest resolve to oxray's.
A real Ray installed beside oxray is left alone unless shadowing it is asked for.
Where no real Ray is installed, the wheel's `oxray_as_ray.pth` does it on the first `import ray`
(`oxray_ray_name`); `OXRAY_AS_RAY=force` does it at interpreter start even over a real Ray, and
`OXRAY_AS_RAY=0` never."""

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
import warnings

from oxray_ray_name import RAY_VERSION


class _RayFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def __init__(self):
        self._specs = {}

    def find_spec(self, fullname, path=None, target=None):
        if fullname != "ray" and not fullname.startswith("ray."):
            return None
        own = "oxray" + fullname[3:]
        if importlib.util.find_spec(own) is None:
            return None
        return importlib.machinery.ModuleSpec(fullname, self, is_package=True)

    def create_module(self, spec):
        module = importlib.import_module("oxray" + spec.name[3:])
        self._specs[spec.name] = module.__spec__
        if spec.name == "ray":
            # Libraries compare it (vLLM); oxray's own stays in __oxray_version__.
            module.__version__ = RAY_VERSION
        return module

    def exec_module(self, module):
        # The module ran when oxray imported it; `ray.x` is only a second name for it, and
        # it keeps its own spec (the import system set the `ray` one).
        module.__spec__ = self._specs.pop(module.__spec__.name, module.__spec__)


def _real_ray_installed() -> bool:
    # The path finders alone: the other finders on sys.meta_path may be oxray's own.
    spec = importlib.machinery.PathFinder.find_spec("ray")
    return spec is not None and "oxray" not in (spec.origin or "")


def finder() -> "_RayFinder":
    """The finder `install_as_ray` put in front (installing it if it is not there)."""
    for f in sys.meta_path:
        if isinstance(f, _RayFinder):
            return f
    install_as_ray(shadow_installed_ray=True)
    return sys.meta_path[0]


def install_as_ray(shadow_installed_ray: bool = False) -> bool:
    """Makes `import ray` give oxray. Returns whether it does; a real Ray installed here is
    kept (with a warning) unless `shadow_installed_ray`."""
    if any(isinstance(f, _RayFinder) for f in sys.meta_path):
        return True
    loaded = sys.modules.get("ray")
    if loaded is not None and not loaded.__name__.startswith("oxray"):
        if not shadow_installed_ray:
            warnings.warn("ray is already imported; `import ray` stays the real Ray", stacklevel=2)
            return False
        for name in [n for n in sys.modules if n == "ray" or n.startswith("ray.")]:
            del sys.modules[name]
    elif _real_ray_installed() and not shadow_installed_ray:
        warnings.warn("a real Ray is installed here; `import ray` stays Ray (pass shadow_installed_ray=True, "
                      "or set OXRAY_AS_RAY=force, to use oxray under that name)", stacklevel=2)
        return False
    sys.meta_path.insert(0, _RayFinder())
    return True


def install_from_env() -> bool:
    """What `OXRAY_AS_RAY` asks for: `1` (unless a real Ray is installed) or `force`."""
    wanted = os.environ.get("OXRAY_AS_RAY", "").strip().lower()
    if wanted in ("", "0", "false", "no"):
        return False
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return install_as_ray(shadow_installed_ray=wanted == "force")
