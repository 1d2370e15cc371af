"""Virtual environments where oxray is installed as its wheel installs it (the `.pth` that
serves `import ray`) and a real Ray is or is not: a new venv whose site-packages sees this
venv's packages, Ray's left out unless asked for (the editable install has no `.pth` of its own)."""

import subprocess
import sys
from pathlib import Path

PYTHON_DIR = Path(__file__).resolve().parents[1]
SITE = Path(next(p for p in sys.path if p.endswith("site-packages")))


def _is_ray(name: str) -> bool:
    return name == "ray" or name.startswith("ray-") or name in ("oxray.pth", "distutils-precedence.pth")


def make_env(root: Path, with_ray: bool) -> Path:
    """Makes the venv in `root`; returns its python."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True)
    site = next((root / "lib").glob("python3*/site-packages"))
    shadow = root / "shadow"
    shadow.mkdir()
    for entry in SITE.iterdir():
        if with_ray or not _is_ray(entry.name):
            (shadow / entry.name).symlink_to(entry)
    (site / "deps.pth").write_text(f"{shadow}\n{PYTHON_DIR}\n")
    (site / "oxray_as_ray.pth").write_text((PYTHON_DIR / "oxray_as_ray.pth").read_text())
    return root / "bin/python"
