"""Process plumbing for the kubelet: exit codes as container runtimes report them, and the
processes that make up a pod (its process group, and everything in its mount namespace)."""

import os


def exit_code(returncode):
    """Death by signal N reads as 128+N, as container runtimes report it (SIGKILL: 137)."""
    return 128 - returncode if returncode < 0 else returncode


def signal_group(pgid, sig):
    try:
        os.killpg(pgid, sig)
    except OSError:
        pass


def mount_ns(pid):
    try:
        return os.readlink(f"/proc/{pid}/ns/mnt")
    except OSError:
        return None


def pids_in_mount_ns(ns):
    """A pod's processes: those that left its process group (setsid, daemons) still share its
    mount namespace, as they would share a container's cgroup."""
    me = os.getpid()
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != me and mount_ns(entry) == ns:
            out.append(int(entry))
    return out
