#!/usr/bin/env python3
"""The newest glibc symbol version an ELF file needs; fails when it is above the floor that
the offline bundle documents (install.sh refuses older systems with the same number).

Usage: glibc_floor.py FILE... [--max 2.34]
"""

import argparse
import re
import subprocess
import sys


def needed(path):
    """glibc versions the file's dynamic symbols ask for, newest last."""
    out = subprocess.run(["objdump", "-T", path], capture_output=True, text=True, check=True).stdout
    versions = {tuple(int(p) for p in v.split(".")) for v in re.findall(r"GLIBC_(\d+(?:\.\d+)+)", out)}
    return sorted(versions)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("files", nargs="+")
    parser.add_argument("--max", default=None, help="the documented floor, e.g. 2.34")
    args = parser.parse_args()
    floor = tuple(int(p) for p in args.max.split(".")) if args.max else None
    status = 0
    for path in args.files:
        versions = needed(path)
        newest = ".".join(map(str, versions[-1])) if versions else "none"
        print(f"{path}: needs glibc {newest}")
        if floor and versions and versions[-1] > floor:
            print(f"{path}: needs glibc {newest}, above the documented floor {args.max}", file=sys.stderr)
            status = 1
    return status


if __name__ == "__main__":
    sys.exit(main())
