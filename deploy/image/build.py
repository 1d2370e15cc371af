#!/usr/bin/env python3
"""Builds the oxray container image with no container engine and no base image to pull.

    python3 deploy/image/build.py --wheel target/wheels/oxray-0.1.0-cp39-abi3-manylinux2014_x86_64.manylinux_2_17_x86_64.whl \\
        --binary target/portable/x86_64-unknown-linux-gnu/release/oxray [--out target/image] [--load auto]

The root filesystem is put together from Debian bookworm packages (unpacked with dpkg-deb; no
maintainer script runs, so nothing but their files), the oxray wheel and its two pinned
dependencies. It becomes two layers, so that a new oxray release only changes the second:

  1. python: CPython 3.11 and the libraries it loads, bash, CA certificates, tzdata, the users
     (root, oxray 1000:1000, nobody), websockets and cloudpickle; everything precompiled.
  2. oxray: /usr/bin/oxray and the oxray package, whose oxray/_bin/oxray is the same file, as
     are /usr/bin/ray and /usr/bin/serve (Ray's commands).

Output, in --out:
  oxray-<version>-oci/       an OCI image layout
  oxray-<version>-oci.tar    the same as one archive: `podman load -i`, `skopeo copy oci-archive:`
                             and `docker load` (it also carries Docker's manifest.json)
  oxray-<version>-build.json the inputs and their hashes, the digests and the sizes

Reproducible: every time is 0 (or $SOURCE_DATE_EPOCH), owners and modes come from here and not
from the host, entries are sorted and the .pyc files are hash-based, so the same inputs (debs,
wheels, binary) give the same manifest digest. The debs are cached in .tools/debs and the
dependency wheels in .tools/image-wheels: a second build downloads nothing.
"""

import argparse
import gzip
import hashlib
import io
import json
import mmap
import os
import re
import shutil
import stat
import struct
import subprocess
import sys
import tarfile
import time
import zipfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent

PYTHON = "3.11"
# CPython and the libraries it and its extension modules load (ssl, hashlib, sqlite3, ctypes,
# readline, curses, lzma, bz2, uuid, crypt), libstdc++ for the C++ wheels users add (numpy,
# torch), bash for `bash -lc` pod commands (KubeRay style), and base-files for /etc/os-release,
# which image scanners read. Left out: libdb5.3 and the NIS/Kerberos stack, only loaded by the
# dbm.ndbm and nis modules (nis is gone from Python 3.13), 4 MB and a steady source of CVEs.
DEBS = [
    "libc6", "libgcc-s1", "libstdc++6", "zlib1g", "libssl3", "libexpat1", "libffi8", "libbz2-1.0",
    "liblzma5", "libsqlite3-0", "libncursesw6", "libtinfo6", "libreadline8", "libuuid1", "libcrypt1",
    f"libpython{PYTHON}-minimal", f"libpython{PYTHON}-stdlib", f"python{PYTHON}-minimal",
    "media-types", "tzdata", "ca-certificates", "netbase", "bash", "base-files",
]
# Only these files of base-files: the rest (profile, motd, ...) describes a full system, and
# /etc/profile would reset PATH in login shells.
BASE_FILES_KEEP = ("etc/debian_version", "etc/os-release", "usr/lib/os-release", "usr/share/common-licenses")
# Documentation, translations and tooling nothing in a container reads. Copyright files stay.
DROP = (
    "usr/share/man", "usr/share/info", "usr/share/locale", "usr/share/lintian", "usr/share/doc-base",
    "usr/share/bug", "usr/share/menu", "usr/share/bash-completion", "usr/share/gdb",
    "usr/lib/x86_64-linux-gnu/gconv", "usr/share/ca-certificates", "etc/ca-certificates",
    "usr/sbin/update-ca-certificates", "etc/ssl/certs",
    # The modules of the libraries left out, CPython's own test modules, 2to3 (a tool for
    # moving code to Python 3, nothing imports it), the texts of `help("TOPIC")`, turtle
    # (it needs Tk, which is not here) and the pure-Python decimal (`decimal` uses _decimal).
    f"usr/lib/python{PYTHON}/test", f"usr/lib/python{PYTHON}/lib2to3", f"usr/lib/python{PYTHON}/pydoc_data",
    f"usr/lib/python{PYTHON}/turtle.py", f"usr/lib/python{PYTHON}/_pydecimal.py",
    *(f"usr/lib/python{PYTHON}/lib-dynload/{m}.cpython-{PYTHON.replace('.', '')}-x86_64-linux-gnu.so" for m in (
        "_dbm", "nis", "_testbuffer", "_testcapi", "_testclinic", "_testimportmultiple", "_testinternalcapi",
        "_testmultiphase", "_xxtestfuzz", "_ctypes_test", "xxlimited", "xxlimited_35")),
    # PEP 668's marker would make pip refuse to install into /usr/local as root; this image has
    # no apt whose files pip could break (deploy/image/README.md: adding packages).
    f"usr/lib/python{PYTHON}/EXTERNALLY-MANAGED",
    # glibc's vector math library: nothing here links it, nor do the wheels users add (torch,
    # numpy and pyarrow from PyPI bring their own vector math).
    "usr/lib/x86_64-linux-gnu/libmvec.so.1",
)
# Merged /usr, as on an installed bookworm: /bin/bash and /usr/bin/bash are the same file.
MERGED = ("bin", "sbin", "lib", "lib64")
SITE = "usr/lib/python3/dist-packages"
# Ray's command names, the oxray binary under them.
RAY_COMMANDS = ("ray", "serve")
UID = GID = 1000
PORTS = (6379, 8265, 10001, 8000)
ENV = {
    "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "HOME": "/home/oxray",
    "LANG": "C.UTF-8",
}


def log(msg):
    print(f"image: {msg}", flush=True)


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def mkdir(path, mode=0o755):
    path.mkdir(parents=True, exist_ok=True)
    os.chmod(path, mode)


def write(path, data, mode=0o644):
    mkdir(path.parent)
    if isinstance(data, str):
        data = data.encode()
    path.write_bytes(data)
    os.chmod(path, mode)


# ---- Debian packages -------------------------------------------------------------------------

def apt_candidates(names):
    """{name: stanza} of the version apt would install, from the local package lists."""
    done = subprocess.run(["apt-cache", "show", "--no-all-versions", *names], capture_output=True, text=True)
    stanzas = {}
    for block in done.stdout.split("\n\n"):
        fields = dict(re.findall(r"^([A-Za-z0-9-]+): ?(.*)$", block, re.M))
        if fields.get("Package") in names and fields.get("Architecture") in ("amd64", "all"):
            stanzas.setdefault(fields["Package"], fields)
    return stanzas


def fetch_debs(cache, updated=False):
    """The debs, from the cache when there; apt-get download fetches what is missing."""
    mkdir(cache)
    stanzas = apt_candidates(DEBS)
    if len(stanzas) < len(DEBS) and os.geteuid() == 0 and not updated:
        log("apt has no lists for some packages: apt-get update")
        subprocess.run(["apt-get", "update", "-qq"], check=True)
        stanzas = apt_candidates(DEBS)
        updated = True
    missing = sorted(set(DEBS) - set(stanzas))
    if missing:
        sys.exit(f"image: apt knows no {', '.join(missing)}: this builder needs Debian 12 (bookworm) "
                 "package lists (run apt-get update)")
    py = stanzas[f"python{PYTHON}-minimal"]["Version"]
    if not py.startswith(PYTHON):
        sys.exit(f"image: python{PYTHON}-minimal is {py}, not the bookworm CPython {PYTHON}")
    wanted, fetch = {}, []
    for name in DEBS:
        s = stanzas[name]
        path = cache / f"{name}_{s['Version'].replace(':', '%3a')}_{s['Architecture']}.deb"
        wanted[name] = (path, s)
        if not (path.exists() and sha256_file(path) == s["SHA256"]):
            fetch.append(f"{name}={s['Version']}")
    if fetch:
        log(f"downloading {len(fetch)} debs into {cache}")
        # As root, apt hands downloads to its _apt user, which cannot write into the cache.
        sandbox = ["-o", "APT::Sandbox::User=root"] if os.geteuid() == 0 else []
        done = subprocess.run(["apt-get", "download", "-qq", *sandbox, *fetch], cwd=cache)
        if done.returncode != 0 and os.geteuid() == 0 and not updated:
            # Lists older than the mirror name debs it no longer has: fresh lists, fresh candidates.
            log("apt-get download failed: apt-get update, then again")
            subprocess.run(["apt-get", "update", "-qq"], check=True)
            return fetch_debs(cache, updated=True)
        if done.returncode != 0:
            sys.exit("image: apt-get download failed (apt-get update may help)")
    for name, (path, s) in wanted.items():
        if sha256_file(path) != s["SHA256"]:
            sys.exit(f"image: {path} does not have the SHA256 apt lists for it")
        for stale in cache.glob(f"{name}_*.deb"):
            if stale != path:
                stale.unlink()
    return wanted


def rootfs_path(member_name):
    """A deb member's path in the merged-/usr root, relative, or None for the root itself."""
    name = member_name[2:] if member_name.startswith("./") else member_name
    name = name.strip("/")
    if not name or name == ".":
        return None
    first, _, rest = name.partition("/")
    if first in MERGED:
        name = f"usr/{first}/{rest}" if rest else f"usr/{first}"
    return name


def under(path, prefixes):
    return any(path == p or path.startswith(p + "/") for p in prefixes)


def wanted_from_deb(pkg, path):
    if pkg == "base-files":
        return under(path, BASE_FILES_KEEP) or any(p.startswith(path + "/") for p in BASE_FILES_KEEP)
    if under(path, DROP):
        return False
    if path.startswith("usr/share/doc/"):
        parts = path.split("/")
        return len(parts) == 4 or (len(parts) == 5 and parts[4] == "copyright")
    return True


def read_deb(deb):
    """The deb's file tree as a tar, and its control fields."""
    fsys = subprocess.run(["dpkg-deb", "--fsys-tarfile", str(deb)], capture_output=True, check=True).stdout
    control = subprocess.run(["dpkg-deb", "-f", str(deb)], capture_output=True, text=True, check=True).stdout
    return fsys, control


def unpack_deb(pkg, fsys, control, root, certs):
    with tarfile.open(fileobj=io.BytesIO(fsys)) as tar:
        for m in tar:
            rel = rootfs_path(m.name)
            if rel is None:
                continue
            if rel.startswith("usr/share/ca-certificates/") and rel.endswith(".crt") and m.isfile():
                certs[rel] = tar.extractfile(m).read()
            if not wanted_from_deb(pkg, rel):
                continue
            dest = root / rel
            if m.isdir():
                if dest.is_symlink():
                    continue
                mkdir(dest)
                continue
            mkdir(dest.parent)
            if m.issym():
                if dest.is_symlink() or dest.exists():
                    if dest.is_symlink() and os.readlink(dest) == m.linkname:
                        continue
                    sys.exit(f"image: {pkg} and another package both ship {rel}")
                os.symlink(m.linkname, dest)
            elif m.islnk():
                os.link(root / rootfs_path(m.linkname), dest)
            elif m.isfile():
                data = tar.extractfile(m).read()
                if dest.exists() and dest.read_bytes() != data:
                    sys.exit(f"image: {pkg} and another package ship different {rel}")
                write(dest, data, 0o755 if m.mode & 0o111 else 0o644)
            else:
                sys.exit(f"image: {pkg} ships {rel}, neither a file, a directory nor a link")
    # Scanners (trivy, grype, syft) list a distroless image's packages from here.
    write(root / "var/lib/dpkg/status.d" / pkg, control.rstrip("\n") + "\n")


# ---- Python wheels ---------------------------------------------------------------------------

def read_requirements(path):
    pins = []
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        m = re.fullmatch(r"([A-Za-z0-9_.-]+)==(\S+)((?:\s+--hash=sha256:[0-9a-f]{64})+)", line)
        if not m:
            sys.exit(f"image: {path}: every line is name==version --hash=sha256:...; not {line!r}")
        pins.append((m.group(1), m.group(2), set(re.findall(r"sha256:([0-9a-f]{64})", m.group(3)))))
    return pins


def norm(name):
    return re.sub(r"[-_.]+", "_", name).lower()


def cached_wheel(cache, name, version, hashes):
    for whl in sorted(cache.glob("*.whl")):
        parts = whl.name.split("-")
        if norm(parts[0]) == norm(name) and parts[1] == version and sha256_file(whl) in hashes:
            return whl
    return None


# Bookworm's glibc is 2.36, and pip infers no older manylinux tag from a newer one: all of them.
PLATFORMS = (*(f"manylinux_2_{minor}_x86_64" for minor in range(36, 16, -1)), "manylinux2014_x86_64")


def fetch_wheels(requirements, cache, pip):
    """The pinned dependency wheels for CPython 3.11 on x86_64 glibc; pip runs only when one is
    not in the cache yet."""
    mkdir(cache)
    pins = read_requirements(requirements)
    if any(cached_wheel(cache, *pin) is None for pin in pins):
        log(f"downloading {requirements.name} into {cache}")
        subprocess.run([*pip, "download", "-q", "--disable-pip-version-check", "--no-deps", "--require-hashes",
                        "--only-binary=:all:", "--python-version", PYTHON, "--implementation", "cp",
                        *(a for tag in PLATFORMS for a in ("--platform", tag)),
                        "-d", str(cache), "-r", str(requirements)], check=True)
    wheels = []
    for pin in pins:
        whl = cached_wheel(cache, *pin)
        if whl is None:
            sys.exit(f"image: pip downloaded no {pin[0]}=={pin[1]} with a listed hash")
        wheels.append(whl)
    return wheels


def install_wheel(whl, root):
    """Unpacks a wheel into the system site directory as pip would, minus console-script
    wrappers (the image runs `oxray`, a binary, and `python3 -m ...`). Done here rather than by
    pip so that nothing of the build host (paths, pip's version) ends up in the image. Returns
    the top-level names it installed."""
    site = root / SITE
    top = set()
    with zipfile.ZipFile(whl) as z:
        infos = [i for i in z.infolist() if not i.is_dir()]
        dist_info = {i.filename.split("/")[0] for i in infos if i.filename.split("/")[0].endswith(".dist-info")}
        if len(dist_info) != 1:
            sys.exit(f"image: {whl.name} has no single .dist-info directory")
        (dist_info,) = dist_info
        data_dir = dist_info[: -len(".dist-info")] + ".data"
        for info in infos:
            name = info.filename
            if name.startswith(data_dir + "/"):
                _, kind, rest = name.split("/", 2)
                if kind in ("purelib", "platlib"):
                    dest, rel = site / rest, rest
                elif kind == "data":
                    dest, rel = root / "usr" / rest, None
                else:
                    continue
            else:
                dest, rel = site / name, name
            if rel is not None:
                top.add(rel.split("/")[0])
            mode = 0o755 if (info.external_attr >> 16) & 0o111 else 0o644
            write(dest, z.read(info), mode)
    write(site / dist_info / "INSTALLER", "oxray-image\n")
    return sorted(top)


def compile_python(root, dirs):
    """Precompiles with the image's own interpreter (the exact bytecode magic): Debian's debs ship
    no .pyc, and a non-root process cannot write them next to the sources, so every start would
    compile again. The pycs are hash-based: they stay valid whatever times a later tool gives the
    sources. -B keeps the import system from writing timestamp pycs of the modules compileall
    itself imports, and a fixed hash seed orders set constants the same in every build."""
    env = {"PATH": "/usr/bin:/bin", "PYTHONHASHSEED": "0", "PYTHONHOME": str(root / "usr"), "LC_ALL": "C.UTF-8"}
    libs = ":".join(str(root / d) for d in ("usr/lib/x86_64-linux-gnu", "usr/lib"))
    cmd = [str(root / "usr/lib64/ld-linux-x86-64.so.2"), "--library-path", libs,
           str(root / f"usr/bin/python{PYTHON}"), "-B", "-S", "-s", "-m", "compileall", "-q", "-f", "-j", "0",
           "--invalidation-mode", "checked-hash", "-s", str(root), "-p", "/",
           *[str(root / d) for d in dirs]]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit("image: compileall failed:\n" + (done.stdout + done.stderr)[-3000:])


def elf_needed(path):
    """The DT_NEEDED names of a 64-bit little-endian ELF file, or None for any other file."""
    with open(path, "rb") as f:
        if f.read(5) != b"\x7fELF\x02" or os.fstat(f.fileno()).st_size < 64:
            return None
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
            phoff, = struct.unpack_from("<Q", m, 0x20)
            phentsize, phnum = struct.unpack_from("<HH", m, 0x36)
            loads, dynamic = [], None
            for i in range(phnum):
                kind, _, offset, vaddr, _, filesz, _, _ = struct.unpack_from("<IIQQQQQQ", m, phoff + i * phentsize)
                if kind == 1:
                    loads.append((vaddr, offset, filesz))
                elif kind == 2:
                    dynamic = (offset, filesz)
            if dynamic is None:
                return []
            wanted, strtab = [], None
            for at in range(dynamic[0], dynamic[0] + dynamic[1], 16):
                tag, value = struct.unpack_from("<qQ", m, at)
                if tag == 0:
                    break
                if tag == 1:
                    wanted.append(value)
                elif tag == 5:
                    strtab = value
            base = next(o + strtab - v for v, o, n in loads if v <= strtab < v + n)
            return [m[base + w: m.find(b"\0", base + w)].decode() for w in wanted]


def check_libraries(root):
    """Every shared library an executable or module of the image loads is in the image: the deb
    list above is kept by hand, and a missing one would only show when that module is imported."""
    dirs = [root / d for d in ("usr/lib/x86_64-linux-gnu", "usr/lib", "usr/lib64")]
    missing = []
    for dirpath, _, files in os.walk(root):
        for n in files:
            path = Path(dirpath, n)
            if path.is_symlink() or not path.is_file():
                continue
            for lib in elf_needed(path) or []:
                if not any((d / lib).exists() for d in dirs):
                    missing.append(f"{path.relative_to(root)} needs {lib}")
    if missing:
        sys.exit("image: libraries missing from the image:\n  " + "\n  ".join(missing))


def strip(path, exe):
    """Symbols off: 20-25% of the binary. Panics still print their message and location."""
    if shutil.which("strip") is None:
        log("no strip on PATH; the binary keeps its symbols")
        return
    subprocess.run(["strip", "--strip-unneeded" if not exe else "--strip-all", str(path)], check=True)


# ---- the root filesystem ---------------------------------------------------------------------

def assemble(root, debs, dep_wheels, wheel, binary, strip_binaries):
    certs = {}
    # Decompressing is the slow part and runs in dpkg-deb; unpacking stays in order, so that a
    # file two packages ship is caught the same way every time.
    with ThreadPoolExecutor(os.cpu_count() or 2) as pool:
        for name, (fsys, control) in zip(DEBS, pool.map(read_deb, [debs[n][0] for n in DEBS])):
            unpack_deb(name, fsys, control, root, certs)
    for d in MERGED:
        os.symlink(f"usr/{d}", root / d)
    bin_dir = root / "usr/bin"
    os.symlink(f"python{PYTHON}", bin_dir / "python3")
    os.symlink("python3", bin_dir / "python")
    os.symlink("bash", bin_dir / "sh")

    # update-ca-certificates' job: one bundle from the Mozilla set, where OpenSSL looks.
    write(root / "etc/ssl/certs/ca-certificates.crt", b"".join(certs[k] for k in sorted(certs)))
    mkdir(root / "usr/lib/ssl")
    os.symlink("/etc/ssl/certs", root / "usr/lib/ssl/certs")
    os.symlink("/etc/ssl/certs/ca-certificates.crt", root / "usr/lib/ssl/cert.pem")

    write(root / "etc/passwd", "root:x:0:0:root:/root:/bin/bash\n"
                               f"oxray:x:{UID}:{GID}:oxray:/home/oxray:/bin/bash\n"
                               "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n")
    write(root / "etc/group", f"root:x:0:\noxray:x:{GID}:\nnogroup:x:65534:\n")
    write(root / "etc/nsswitch.conf", "passwd: files\ngroup: files\nshadow: files\nhosts: files dns\n"
                                      "networks: files\nprotocols: files\nservices: files\n")
    mkdir(root / "root", 0o700)
    mkdir(root / "home/oxray")
    for tmp in ("tmp", "var/tmp"):
        mkdir(root / tmp, 0o1777)
    for d in ("dev", "proc", "sys", "run", "etc/ssl/private", f"usr/local/lib/python{PYTHON}/dist-packages"):
        mkdir(root / d)

    for whl in dep_wheels:
        install_wheel(whl, root)
    oxray_top = install_wheel(wheel, root)
    packaged = root / SITE / "oxray/_bin/oxray"
    exe = bin_dir / "oxray"
    shutil.copyfile(binary if binary else packaged, exe)
    os.chmod(exe, 0o755)
    if strip_binaries:
        strip(exe, exe=True)
        for so in sorted((root / SITE / "oxray").glob("*.so")):
            strip(so, exe=False)
    # The package starts nodes with its _bin/oxray, and Ray's commands are the same binary
    # under Ray's names (KubeRay's pods run `ray start`): one file under every name.
    packaged.unlink()
    os.link(exe, packaged)
    for name in RAY_COMMANDS:
        os.link(exe, bin_dir / name)

    check_libraries(root)
    compile_python(root, [f"usr/lib/python{PYTHON}", SITE])
    # A top-level module's bytecode is in the site directory's __pycache__: oxray's layer too.
    modules = [Path(t).stem for t in oxray_top if t.endswith(".py")]
    cached = [f"{SITE}/__pycache__/{p.name}" for m in modules for p in (root / SITE / "__pycache__").glob(f"{m}.*.pyc")]
    return [f"{SITE}/{t}" for t in oxray_top] + cached + ["usr/bin/oxray"] + [f"usr/bin/{n}" for n in RAY_COMMANDS]


# ---- the OCI image ---------------------------------------------------------------------------

class Digesting:
    """A write-only file that hashes and counts what goes through it."""

    def __init__(self, out):
        self.out, self.sha, self.size = out, hashlib.sha256(), 0

    def write(self, data):
        self.sha.update(data)
        self.size += len(data)
        return self.out.write(data)

    def tell(self):
        return self.size

    def flush(self):
        pass


def owner(rel):
    return (UID, GID) if rel == "home/oxray" else (0, 0)


def dir_mode(rel):
    return {"tmp": 0o1777, "var/tmp": 0o1777, "root": 0o700}.get(rel, 0o755)


def layer_paths(root, top_paths):
    """Splits the tree: the oxray layer gets top_paths (with what is under them) and the
    directories above them, repeated identically; the python layer gets everything else."""
    everything = []
    for dirpath, dirnames, filenames in os.walk(root):
        for n in dirnames + filenames:
            everything.append(os.path.relpath(os.path.join(dirpath, n), root))
    mine = [p for p in everything if under(p, top_paths)]
    parents = {str(Path(p).parent) for p in top_paths}
    for p in list(parents):
        parents.update(str(a) for a in Path(p).parents if str(a) != ".")
    rest = [p for p in everything if not under(p, top_paths)]
    return sorted(rest), sorted(set(mine) | parents)


def write_layer(root, paths, blobs, level, name):
    """A gzip'd layer tar into blobs/; returns (digest of the gzip, diff_id, tar size, gz size)."""
    tmp = blobs / f".{name}.tmp"
    firsts = {}
    with open(tmp, "wb") as f:
        gz_out = Digesting(f)
        with gzip.GzipFile(filename="", mode="wb", fileobj=gz_out, mtime=0, compresslevel=level) as gz:
            raw = Digesting(gz)
            with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
                for rel in paths:
                    full = root / rel
                    st = os.lstat(full)
                    info = tarfile.TarInfo(rel)
                    info.mtime = 0
                    info.uid, info.gid = owner(rel)
                    info.uname = info.gname = ""
                    if stat.S_ISDIR(st.st_mode):
                        info.type, info.mode = tarfile.DIRTYPE, dir_mode(rel)
                        tar.addfile(info)
                    elif stat.S_ISLNK(st.st_mode):
                        info.type, info.mode, info.linkname = tarfile.SYMTYPE, 0o777, os.readlink(full)
                        tar.addfile(info)
                    elif stat.S_ISREG(st.st_mode):
                        info.mode = 0o755 if st.st_mode & 0o111 else 0o644
                        key = (st.st_dev, st.st_ino)
                        if st.st_nlink > 1 and key in firsts:
                            info.type, info.linkname = tarfile.LNKTYPE, firsts[key]
                            tar.addfile(info)
                        else:
                            firsts[key] = rel
                            info.size = st.st_size
                            with open(full, "rb") as data:
                                tar.addfile(info, data)
                    else:
                        sys.exit(f"image: {rel} is not a file, directory or link")
    digest = gz_out.sha.hexdigest()
    tmp.rename(blobs / digest)
    return f"sha256:{digest}", f"sha256:{raw.sha.hexdigest()}", raw.size, gz_out.size


def put_json(blobs, obj):
    data = json.dumps(obj, indent=None, separators=(",", ":"), sort_keys=True).encode()
    digest = hashlib.sha256(data).hexdigest()
    (blobs / digest).write_bytes(data)
    return {"digest": f"sha256:{digest}", "size": len(data)}


def oci_image(root, top_paths, layout, repository, version, labels, created, level):
    if layout.exists():
        shutil.rmtree(layout)
    blobs = layout / "blobs/sha256"
    mkdir(blobs)
    python_paths, oxray_paths = layer_paths(root, top_paths)
    parts = (
        ("python", python_paths, f"CPython {PYTHON}, bash and their libraries from Debian bookworm; websockets, cloudpickle"),
        ("oxray", oxray_paths, f"oxray {version}: /usr/bin/oxray and the Python package"),
    )
    # zlib lets go of the GIL: the layers compress side by side.
    with ThreadPoolExecutor(len(parts)) as pool:
        written = list(pool.map(lambda part: write_layer(root, part[1], blobs, level, part[0]), parts))
    layers = [{"name": name, "digest": digest, "diff_id": diff_id, "size": tar_size, "compressed": gz_size, "what": what}
              for (name, _, what), (digest, diff_id, tar_size, gz_size) in zip(parts, written)]
    config = {
        "created": created,
        "architecture": "amd64",
        "os": "linux",
        "config": {
            "User": f"{UID}:{GID}",
            "WorkingDir": ENV["HOME"],
            "Env": [f"{k}={v}" for k, v in ENV.items()],
            "Entrypoint": ["oxray"],
            "Cmd": ["start", "--head", "--block", "--dashboard-host", "0.0.0.0"],
            "ExposedPorts": {f"{p}/tcp": {} for p in PORTS},
            "StopSignal": "SIGTERM",
            "Labels": labels,
        },
        "rootfs": {"type": "layers", "diff_ids": [l["diff_id"] for l in layers]},
        "history": [{"created": created, "created_by": f"deploy/image/build.py: {l['what']}"} for l in layers],
    }
    config_desc = {"mediaType": "application/vnd.oci.image.config.v1+json", **put_json(blobs, config)}
    manifest = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": config_desc,
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", "digest": l["digest"],
                    "size": l["compressed"]} for l in layers],
    }
    manifest_desc = {"mediaType": "application/vnd.oci.image.manifest.v1+json", **put_json(blobs, manifest)}
    ref = f"{repository}:{version}"
    index = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": [{
            **manifest_desc,
            "platform": {"architecture": "amd64", "os": "linux"},
            # A full reference, so that podman and docker name the loaded image after it.
            "annotations": {"org.opencontainers.image.ref.name": ref, "io.containerd.image.name": ref},
        }],
    }
    write(layout / "index.json", json.dumps(index, indent=2, sort_keys=True) + "\n")
    write(layout / "oci-layout", '{"imageLayoutVersion":"1.0.0"}\n')
    # Docker's own format beside the OCI one, as `docker save` writes since Docker 25, so that
    # older Docker loads the archive too.
    docker_ref = ref[len("docker.io/"):] if ref.startswith("docker.io/") else ref
    write(layout / "manifest.json", json.dumps([{
        "Config": "blobs/sha256/" + config_desc["digest"].split(":")[1],
        "RepoTags": [docker_ref],
        "Layers": ["blobs/sha256/" + l["digest"].split(":")[1] for l in layers],
    }], indent=2) + "\n")
    return manifest_desc["digest"], config_desc["digest"], layers


def archive(layout, dest):
    tmp = dest.with_suffix(".tmp")
    with tarfile.open(tmp, "w", format=tarfile.PAX_FORMAT) as tar:
        names = sorted(os.path.relpath(os.path.join(d, n), layout)
                       for d, dirs, files in os.walk(layout) for n in dirs + files)
        for rel in names:
            full = layout / rel
            info = tarfile.TarInfo(rel)
            info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "", ""
            if full.is_dir():
                info.type, info.mode = tarfile.DIRTYPE, 0o755
                tar.addfile(info)
            else:
                info.mode, info.size = 0o644, full.stat().st_size
                with open(full, "rb") as f:
                    tar.addfile(info, f)
    tmp.rename(dest)


# ---- loading into an engine ------------------------------------------------------------------

def engine(choice):
    if choice == "no":
        return None
    if choice in ("auto", "podman") and shutil.which("podman"):
        return "podman"
    if choice in ("auto", "docker") and shutil.which("docker"):
        if subprocess.run(["docker", "info"], capture_output=True).returncode == 0:
            return "docker"
    if choice != "auto":
        sys.exit(f"image: no working {choice} to load the image into")
    return None


def load(tool, tar, ref, config):
    old = subprocess.run([tool, "image", "inspect", "--format", "{{.Id}}", ref], capture_output=True, text=True)
    if old.returncode == 0 and old.stdout.strip() and old.stdout.strip().split(":")[-1] == config.split(":")[-1]:
        log(f"{tool} has {ref} already")
        return
    subprocess.run([tool, "load", "-q", "-i", str(tar)], check=True, stdout=subprocess.DEVNULL)
    new = subprocess.run([tool, "image", "inspect", "--format", "{{.Id}}", ref], capture_output=True, text=True)
    if new.returncode != 0:
        sys.exit(f"image: {tool} load did not give {ref}")
    # The image the tag left behind, unless a container still uses it.
    if old.returncode == 0 and old.stdout.strip() != new.stdout.strip():
        subprocess.run([tool, "rmi", old.stdout.strip()], capture_output=True)
    log(f"loaded into {tool} as {ref}")


# ---- main ------------------------------------------------------------------------------------

def mb(n):
    return f"{n / 1e6:.1f} MB"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--wheel", type=Path, required=True, help="the oxray wheel (cp39-abi3, Linux x86_64)")
    ap.add_argument("--binary", type=Path, help="the oxray binary [default: the one in the wheel]")
    ap.add_argument("--out", type=Path, default=REPO / "target/image")
    ap.add_argument("--cache", type=Path, default=REPO / ".tools", help="where debs/ and image-wheels/ are kept")
    ap.add_argument("--pip", default=f"{sys.executable} -m pip", help="pip command that downloads the dependencies")
    ap.add_argument("--requirements", type=Path, default=HERE / "requirements.txt")
    ap.add_argument("--repository", default="docker.io/oxray/oxray")
    ap.add_argument("--source", default="", help="URL of the source repository, for the image's labels")
    ap.add_argument("--no-strip", dest="strip", action="store_false", help="keep the binaries' symbols")
    ap.add_argument("--compress-level", type=int, default=6)
    ap.add_argument("--load", choices=("auto", "podman", "docker", "no"), default="no",
                    help="load the archive into podman or docker; auto: whichever works, else none")
    ap.add_argument("--keep-rootfs", action="store_true", help="leave the root filesystem in OUT/rootfs")
    args = ap.parse_args(argv)
    started = time.monotonic()

    if not args.wheel.is_file():
        sys.exit(f"image: no wheel at {args.wheel} (make wheel)")
    if args.binary and not args.binary.is_file():
        sys.exit(f"image: no binary at {args.binary} (make release)")
    with zipfile.ZipFile(args.wheel) as z:
        meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
        version = re.search(r"^Version: (\S+)$", z.read(meta).decode(), re.M).group(1)
    epoch = int(os.environ.get("SOURCE_DATE_EPOCH", "0"))
    created = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch))
    labels = {
        "org.opencontainers.image.title": "oxray",
        "org.opencontainers.image.description": "oxray, a distributed compute runtime compatible with Ray: "
                                                "head, worker and Kubernetes operator, with CPython 3.11",
        "org.opencontainers.image.version": version,
        "org.opencontainers.image.licenses": "Apache-2.0",
        "org.opencontainers.image.vendor": "oxray",
        "org.opencontainers.image.created": created,
    }
    if args.source:
        labels["org.opencontainers.image.source"] = args.source

    debs = fetch_debs(args.cache / "debs")
    dep_wheels = fetch_wheels(args.requirements, args.cache / "image-wheels", args.pip.split())
    args.out.mkdir(parents=True, exist_ok=True)
    root = args.out / "rootfs"
    if root.exists():
        shutil.rmtree(root)
    mkdir(root)
    old_umask = os.umask(0o022)
    try:
        top_paths = assemble(root, debs, dep_wheels, args.wheel, args.binary, args.strip)
        layout = args.out / f"oxray-{version}-oci"
        manifest, config, layers = oci_image(root, top_paths, layout, args.repository, version, labels,
                                             created, args.compress_level)
    finally:
        os.umask(old_umask)
        if not args.keep_rootfs:
            shutil.rmtree(root, ignore_errors=True)
    tar = args.out / f"oxray-{version}-oci.tar"
    archive(layout, tar)
    ref = f"{args.repository}:{version}"
    report = {
        "ref": ref,
        "version": version,
        "manifest": manifest,
        "config": config,
        "archive": tar.name,
        "layers": layers,
        "size": sum(l["size"] for l in layers),
        "compressed": sum(l["compressed"] for l in layers),
        "inputs": {
            "wheel": {"path": str(args.wheel.resolve()), "sha256": sha256_file(args.wheel)},
            "binary": {"path": str(args.binary.resolve()), "sha256": sha256_file(args.binary)} if args.binary else None,
            "strip": args.strip,
            "source": args.source,
            "debs": {name: {"version": s["Version"], "sha256": s["SHA256"]} for name, (_, s) in debs.items()},
            "wheels": {w.name: sha256_file(w) for w in dep_wheels},
            "source_date_epoch": epoch,
        },
    }
    write(args.out / f"oxray-{version}-build.json", json.dumps(report, indent=2) + "\n")
    for l in layers:
        log(f"layer {l['name']:<7} {mb(l['size']):>9} uncompressed, {mb(l['compressed']):>8} gzip  {l['digest'][:19]}")
    log(f"{ref}: {mb(report['size'])} uncompressed, {mb(report['compressed'])} compressed, "
        f"manifest {manifest} ({time.monotonic() - started:.1f} s)")
    log(f"archive {tar.relative_to(REPO) if tar.is_relative_to(REPO) else tar}")

    tool = engine(args.load)
    if tool:
        load(tool, tar, ref, config)


if __name__ == "__main__":
    main()
