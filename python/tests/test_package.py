"""Packing working_dir and py_modules: Ray's default excludes, the user's, and the
.gitignore files inside the directory, the same way as the `oxray` CLI packs them."""

import io
import zipfile

from oxray.job_submission._package import pack_dir


def test_gitignore_files_and_excludes_leave_files_out(tmp_path):
    (tmp_path / "data/raw").mkdir(parents=True)
    (tmp_path / "__pycache__").mkdir()
    (tmp_path / ".gitignore").write_text("# checkpoints\n*.ckpt\n/data/raw/\n")
    (tmp_path / "data/.gitignore").write_text("local.txt\n")
    for name in ["train.py", "model.ckpt", "data/raw/huge.bin", "data/local.txt", "data/kept.txt", "notes.log",
                 "__pycache__/x.pyc"]:
        (tmp_path / name).write_text("x")
    name, data = pack_dir(str(tmp_path), excludes=["*.log"])
    assert name.startswith("_ray_pkg_")
    assert sorted(zipfile.ZipFile(io.BytesIO(data)).namelist()) == [
        ".gitignore", "data/.gitignore", "data/kept.txt", "train.py"]
