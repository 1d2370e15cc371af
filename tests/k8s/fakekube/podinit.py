"""Sets up a pod's private view of the filesystem, then becomes the container's process.

The kubelet runs it as `unshare --mount --uts --propagation private -- python -I -S podinit.py
SPEC`, so the mounts below are seen only by the pod's processes and vanish with them. It is a
standalone script (no package imports), started with only the standard library available.

SPEC is a JSON file: {"hostname": str, "mounts": [{"source", "target", "type", "options",
"read_only", "file"}], "argv": [...], "cwd": str or null}. Sources are opened before anything is
mounted, so that a source under /tmp stays reachable after the pod's own /tmp covers it.
"""

import ctypes
import json
import os
import sys

MS_RDONLY = 1
MS_REMOUNT = 32
MS_BIND = 4096
MS_REC = 16384


def _mount(libc, source, target, fstype, flags, data):
    rc = libc.mount(source.encode() if source else None, target.encode(),
                    fstype.encode() if fstype else None, flags,
                    data.encode() if data else None)
    if rc != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"mount {source} on {target}: {os.strerror(err)}")


def _make_target(target, is_file):
    if os.path.exists(target):
        return
    if is_file:
        os.makedirs(os.path.dirname(target), exist_ok=True)
        with open(target, "a"):
            pass
    else:
        os.makedirs(target, exist_ok=True)


def main():
    with open(sys.argv[1]) as f:
        spec = json.load(f)
    libc = ctypes.CDLL(None, use_errno=True)
    fds = {}
    for m in spec["mounts"]:
        if m.get("type", "bind") == "bind":
            fds[m["source"]] = os.open(m["source"], os.O_PATH)
    for m in spec["mounts"]:
        target = m["target"]
        _make_target(target, m.get("file", False))
        if m.get("type", "bind") == "bind":
            source = f"/proc/self/fd/{fds[m['source']]}"
            _mount(libc, source, target, None, MS_BIND | MS_REC, None)
            if m.get("read_only"):
                _mount(libc, None, target, None, MS_BIND | MS_REMOUNT | MS_RDONLY, None)
        else:
            _mount(libc, m["type"], target, m["type"], 0, m.get("options"))
    for fd in fds.values():
        os.close(fd)
    name = spec.get("hostname")
    if name:
        if libc.sethostname(name.encode(), len(name.encode())) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"sethostname: {os.strerror(err)}")
    # Containers start in their image's working directory; with no image, in /.
    cwd = spec.get("cwd") or "/"
    os.makedirs(cwd, exist_ok=True)
    os.chdir(cwd)
    argv = spec["argv"]
    try:
        os.execvp(argv[0], argv)
    except OSError as e:
        print(f"fakekube: exec {argv[0]!r}: {e.strerror}: executable file not found in $PATH"
              if e.errno == 2 else f"fakekube: exec {argv[0]!r}: {e}", file=sys.stderr)
        sys.exit(127)


if __name__ == "__main__":
    try:
        main()
    except OSError as e:
        print(f"fakekube: pod setup failed: {e}", file=sys.stderr)
        sys.exit(128)
