#!/bin/sh
# Installs oxray from this bundle with no network: the binary, and the Python package with its
# dependencies from the wheels beside this script.
#
#   ./install.sh                      binary to /usr/local/bin (root) or ~/.local/bin, package into python3
#   ./install.sh --prefix DIR         binary to DIR/bin
#   ./install.sh --venv DIR           create (or reuse) a virtual environment in DIR and install the package there
#   ./install.sh --python PY          install the package with that interpreter (or its venv)
#   ./install.sh --no-python          the binary only
set -eu

here=$(cd "$(dirname "$0")" && pwd)
floor=$(cat "$here/GLIBC_FLOOR")
prefix=""
python=""
venv=""
with_python=1

usage() { sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'; }
die() { echo "install.sh: $*" >&2; exit 1; }

while [ $# -gt 0 ]; do
    case "$1" in
        --prefix) [ $# -ge 2 ] || die "--prefix needs a directory"; prefix=$2; shift 2 ;;
        --python) [ $# -ge 2 ] || die "--python needs an interpreter"; python=$2; shift 2 ;;
        --venv) [ $# -ge 2 ] || die "--venv needs a directory"; venv=$2; shift 2 ;;
        --no-python) with_python=0; shift ;;
        -h|--help) usage; exit 0 ;;
        *) usage >&2; die "unknown argument: $1" ;;
    esac
done

# The binary and the native module are linked against glibc; older systems cannot load them.
have=$(getconf GNU_LIBC_VERSION 2>/dev/null | awk '{print $2}')
if [ -n "$have" ]; then
    oldest=$(printf '%s\n%s\n' "$floor" "$have" | sort -V | head -n1)
    [ "$oldest" = "$floor" ] || die "this system has glibc $have; oxray needs glibc $floor or newer"
fi

if [ -z "$prefix" ]; then
    if [ "$(id -u)" = 0 ]; then prefix=/usr/local; else prefix=$HOME/.local; fi
fi
mkdir -p "$prefix/bin"
install -m 0755 "$here/bin/oxray" "$prefix/bin/oxray"
echo "installed $prefix/bin/oxray ($("$prefix/bin/oxray" --version))"
# Ray's command names, unless a real Ray's commands are there already.
for name in ray serve; do
    if [ -e "$prefix/bin/$name" ] && [ "$(readlink "$prefix/bin/$name")" != oxray ]; then
        echo "left $prefix/bin/$name as it was (not oxray's)"
    else
        ln -sf oxray "$prefix/bin/$name"
    fi
done

[ "$with_python" = 1 ] || exit 0
if [ -n "$venv" ]; then
    base=${python:-python3}
    [ -x "$venv/bin/python" ] || "$base" -m venv "$venv" || die "could not create a virtual environment with $base (Debian: apt-get install python3-venv)"
    python=$venv/bin/python
fi
python=${python:-python3}
command -v "$python" >/dev/null 2>&1 || die "$python not found: give --python, or --no-python for the binary only"
"$python" -m pip --version >/dev/null 2>&1 || die "$python has no pip: give --venv DIR to install into a new virtual environment"
"$python" -m pip install --no-index --find-links "$here/wheels" oxray
echo "installed the oxray package for $("$python" -c 'import sys; print(sys.executable)')"
