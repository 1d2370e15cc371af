"""The name `ray` where oxray is installed and Ray is not, loaded at every interpreter start
by the wheel's `oxray_as_ray.pth`: so it imports nothing heavy and does nothing until asked.

- `import ray` gives oxray when no other finder finds a `ray` (the finder is the last one on
  `sys.meta_path`), so a real Ray installed here, before or after oxray, always wins.
- `importlib.metadata.version("ray")` answers Ray's version that oxray is compatible with,
  when asked for that name only: pip, which lists every distribution, never sees a Ray.
- The `ray` and `serve` commands of the wheel: Ray's own when Ray is installed, else the
  oxray binary under those names.

`OXRAY_AS_RAY=0` turns all of it off; `OXRAY_AS_RAY=force` serves `ray` even over a real Ray.
"""

import os
import sys

RAY_VERSION = "2.60.0"


def _mode() -> str:
    wanted = os.environ.get("OXRAY_AS_RAY", "").strip().lower()
    if wanted in ("0", "false", "no", "off"):
        return "off"
    return "force" if wanted == "force" else "fallback"


def _real_ray_spec():
    from importlib.machinery import PathFinder

    spec = PathFinder.find_spec("ray")
    return spec if spec is not None and "oxray" not in (spec.origin or "") else None


class RayFallback:
    """Last on `sys.meta_path`: asked for `ray` only when nothing else found it."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname != "ray":
            return None
        try:
            from oxray import _as_ray
        except ImportError:  # oxray removed while this interpreter ran
            return None
        # Its finder (installed first on `sys.meta_path`) serves `ray.*` before the path
        # finders, which would load oxray's files a second time as new `ray.x` modules.
        return _as_ray.finder().find_spec(fullname, path, target)

    def find_distributions(self, context=None):
        name = getattr(context, "name", None)
        if name is None or name.lower().replace("-", "_") != "ray" or _real_ray_spec() is not None:
            return iter(())
        return iter((_RayDistribution(),))


_distribution_class = None


def _RayDistribution():
    """`ray` as a name for oxray: Ray's version, no files of its own. The class is made on
    first use, since importlib.metadata is not loaded at interpreter start."""
    global _distribution_class
    if _distribution_class is None:
        import importlib.metadata
        import pathlib

        class RayDistribution(importlib.metadata.Distribution):
            def read_text(self, filename):
                if filename == "METADATA":
                    return (f"Metadata-Version: 2.1\nName: ray\nVersion: {RAY_VERSION}\n"
                            "Summary: oxray, answering to the name ray\n")
                return None

            def locate_file(self, path):
                return pathlib.Path(os.path.dirname(os.path.abspath(__file__))) / path

        _distribution_class = RayDistribution
    return _distribution_class()


def install() -> None:
    """What the `.pth` runs at interpreter start."""
    mode = _mode()
    if mode == "off" or any(isinstance(f, RayFallback) for f in sys.meta_path):
        return
    if mode == "force":
        from oxray import _as_ray

        _as_ray.install_from_env()
    else:
        sys.meta_path.append(RayFallback())


def _oxray_binary() -> str:
    explicit = os.environ.get("OXRAY_BIN")
    if explicit:
        return explicit
    import importlib.util
    import shutil

    spec = importlib.util.find_spec("oxray")
    for where in (spec.submodule_search_locations or []) if spec else []:
        packaged = os.path.join(where, "_bin", "oxray")
        if os.access(packaged, os.X_OK):
            return packaged
    found = shutil.which("oxray")
    if not found:
        sys.exit("error: the oxray binary is not in this package nor on PATH (set OXRAY_BIN)")
    return found


def _command(name: str, ray_entry) -> None:
    if _mode() != "force" and _real_ray_spec() is not None:
        sys.exit(ray_entry())
    binary = _oxray_binary()
    os.execv(binary, [name, *sys.argv[1:]])


def ray_command() -> None:
    """The wheel's `ray` command."""

    def ray_main():
        from ray.scripts.scripts import main

        return main()

    _command("ray", ray_main)


def serve_command() -> None:
    """The wheel's `serve` command."""

    def serve_main():
        from ray.serve.scripts import cli

        return cli()

    _command("serve", serve_main)
