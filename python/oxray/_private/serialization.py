"""How values cross processes: cloudpickle, with the ObjectRefs among a task's arguments
replaced by placeholders the worker fills with their values.

ObjectRefs nested deeper travel as references: pickling one records it (the sender keeps
the object alive until the receiver has told the owner it holds it), and unpickling one in
another process borrows it from its owner (`announce` below).

Large values (numpy arrays and anything else exposing pickle 5 buffers) are laid out as a
header, the pickle, and the raw buffers (`STORED`). A `put` of one at least
`INLINE_LIMIT` bytes goes to a file of the node's object store, in shared memory, and
every process of the node reads it through a read-only mapping: arrays come back as
zero-copy, read-only views. Readers on other machines get the file's content from the
owner."""

import fcntl
import gc
import json
import mmap
import os
import pickle
import struct
import sys
import threading
from contextlib import contextmanager
from typing import Any, Dict, List, Optional, Tuple

from oxray.exceptions import RayTaskError
from oxray import object_ref
from oxray.object_ref import ObjectRef

_local = threading.local()

STORED = b"OXRAYOB1"  # header, pickle, buffers
STORED_AT = b"OXRAYREF"  # where a STORED value's file is (JSON after the magic)
INLINE_LIMIT = 100 * 1024  # as Ray's max_direct_call_object_size
_ALIGN = 64
# A large buffer lies at the same offset within a page as its source: on x86 a copy whose
# target starts a little past its source's offset within a page runs ~7x slower (4K aliasing),
# and targets (file mappings) start on a page, so this also keeps the source's alignment.
_PAGE = 4096
_PAGE_MATCH_FROM = 64 * 1024
# Values of these types pickle the same with the standard pickler, which is much cheaper to
# start than cloudpickle's, and can hold no ObjectRef.
_PLAIN = frozenset((type(None), bool, int, float, str, bytes))


def _boot_id() -> str:
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            return f.read().strip()
    except OSError:
        return ""


BOOT_ID = _boot_id()


class _Dependency:
    __slots__ = ("object_id",)

    def __init__(self, object_id: str):
        self.object_id = object_id


@contextmanager
def _collecting():
    """Records the ObjectRefs pickled inside the block."""
    outer = getattr(_local, "refs", None)
    _local.refs = refs = []
    try:
        yield refs
    finally:
        _local.refs = outer


def note_pickled(ref: ObjectRef) -> None:
    refs = getattr(_local, "refs", None)
    if refs is not None:
        refs.append(ref)


def note_borrowed() -> None:
    _local.borrowed = True


def _cloudpickle():
    """cloudpickle, imported by the first value that needs it: its imports cost a new process
    ~20 ms, which a driver that only asks the cluster about itself never needs."""
    import cloudpickle

    return cloudpickle


def dumps(value: Any) -> bytes:
    return _cloudpickle().dumps(value)


def _pickle5(value: Any):
    """The pickle and the raw buffers it leaves out of band."""
    buffers = []
    meta = _cloudpickle().dumps(value, protocol=5, buffer_callback=buffers.append)
    return meta, [b.raw() for b in buffers]


def _layout(meta: bytes, buffers) -> Tuple[bytes, List[int], int]:
    """The header, where the pickle and each buffer start, and the total size."""
    head_size = len(STORED) + 16 + 16 * len(buffers)
    at = head_size
    starts = [at]
    at += len(meta)
    spans = []
    for b in buffers:
        address = _address(b) if b.nbytes >= _PAGE_MATCH_FROM else None
        at = at + (address - at) % _PAGE if address is not None else (at + _ALIGN - 1) // _ALIGN * _ALIGN
        starts.append(at)
        spans.append((at, b.nbytes))
        at += b.nbytes
    header = STORED + struct.pack("<QQ", len(meta), len(buffers)) + b"".join(struct.pack("<QQ", *s) for s in spans)
    return header, starts, at


def _address(buffer) -> Optional[int]:
    """Where a buffer's bytes are, when numpy (which makes nearly all out-of-band buffers)
    can tell."""
    numpy = sys.modules.get("numpy")
    return None if numpy is None else numpy.frombuffer(buffer, numpy.uint8).__array_interface__["data"][0]


def _write(target, header: bytes, starts: List[int], meta: bytes, buffers) -> None:
    target[:len(header)] = header
    target[starts[0]:starts[0] + len(meta)] = meta
    for start, b in zip(starts[1:], buffers):
        _copy(target, start, b)


# From this size a buffer is copied by two threads (numpy's copy lets go of the GIL): one
# core alone does not reach the machine's memory bandwidth.
_TWO_THREADS_FROM = 64 << 20


def _copy(target, start: int, buffer) -> None:
    size = buffer.nbytes
    numpy = sys.modules.get("numpy")
    if numpy is None or size < _TWO_THREADS_FROM:
        target[start:start + size] = buffer
        return
    into = numpy.frombuffer(target, numpy.uint8, size, start)
    source = numpy.frombuffer(buffer, numpy.uint8)
    half = size // 2 // _PAGE * _PAGE
    helper = threading.Thread(target=numpy.copyto, args=(into[half:], source[half:]))
    helper.start()
    try:
        numpy.copyto(into[:half], source[:half])
    finally:
        helper.join()


def dumps_with_refs(value: Any) -> Tuple[bytes, List[ObjectRef]]:
    """The bytes (STORED when the value has out-of-band buffers), and the ObjectRefs inside
    the value."""
    if type(value) in _PLAIN:
        return pickle.dumps(value, 5), []
    with _collecting() as refs:
        meta, buffers = _pickle5(value)
    return _inline(meta, buffers), refs


def _inline(meta: bytes, buffers) -> bytes:
    """The value as bytes: the pickle itself, or STORED when it has buffers."""
    if not buffers:
        return meta
    header, starts, total = _layout(meta, buffers)
    out = bytearray(total)
    _write(memoryview(out), header, starts, meta, buffers)
    return bytes(out)


def put(client, value: Any) -> str:
    """Stores a value as an object of this process; returns its id. Large values go to the
    node's object store."""
    with _collecting() as refs:
        meta, buffers = _pickle5(value)
    contained = [r.hex() for r in refs]
    header, starts, total = _layout(meta, buffers)
    created = client.store_create(total) if total >= INLINE_LIMIT else None
    if created is None:
        return client.put(_inline(meta, buffers), contained)
    object_id, path = _write_file(client, created, total, header, starts, meta, buffers)
    return client.store_seal(object_id, _stored_at(path, client.owner_address(), object_id), contained)


def _stored_at(path: str, owner: str, object_id: str) -> bytes:
    """What readers of a value in a store file get: where it is, and who serves it to other
    machines."""
    return STORED_AT + json.dumps({"boot": BOOT_ID, "path": path, "owner": owner, "id": object_id}).encode()


class _Mappings:
    """Writable mappings of the store files this process `put`, held while their files live.
    The store keeps a freed file for this process's next object of about its size, under a
    new name but the same inode: that object is written through the mapping already there,
    at memory-copy speed, with no page to allocate, map or fault (as Ray writes into memory
    its store mapped long before). A mapping whose file was removed is let go within a
    second, and at most `LIMIT` bytes of mappings are held."""

    LIMIT = 4 << 30
    FILES = 8

    def __init__(self):
        self._lock = threading.Lock()
        self._held: Dict[int, Tuple[int, mmap.mmap]] = {}  # inode: (fd, mapping), oldest first
        self._sweeping = False

    def take(self, path: str, total: int) -> Optional[mmap.mmap]:
        try:
            inode = os.stat(path).st_ino
        except OSError:
            return None
        with self._lock:
            held = self._held.pop(inode, None)
        if held is None:
            return None
        fd, mapping = held
        if len(mapping) >= total and os.fstat(fd).st_size == len(mapping):
            self.hold(fd, mapping, inode)
            return mapping
        mapping.close()
        os.close(fd)
        return None

    def hold(self, fd: int, mapping: mmap.mmap, inode: int) -> None:
        if len(mapping) > self.LIMIT:
            mapping.close()
            os.close(fd)
            return
        with self._lock:
            self._held[inode] = (fd, mapping)
            while len(self._held) > self.FILES or sum(len(m) for _, m in self._held.values()) > self.LIMIT:
                old_fd, old = self._held.pop(next(iter(self._held)))
                old.close()
                os.close(old_fd)
            start = not self._sweeping
            self._sweeping = True
        if start:
            self._sweep_later()

    def _sweep_later(self) -> None:
        timer = threading.Timer(1.0, self._sweep)
        timer.daemon = True
        timer.start()

    def _sweep(self) -> None:
        with self._lock:
            for inode, (fd, mapping) in list(self._held.items()):
                if os.fstat(fd).st_nlink == 0:
                    del self._held[inode]
                    mapping.close()
                    os.close(fd)
            self._sweeping = bool(self._held)
            again = self._sweeping
        if again:
            self._sweep_later()


_mappings = _Mappings()


def _write_file(client, created, total, header, starts, meta, buffers, hold=True):
    """Writes a value into a file from `store_create`; returns `(file id, path)`. With
    `hold`, the file's mapping stays for the file's next object (see `_Mappings`)."""
    mapping = _mappings.take(created[1], total) if hold else None
    if mapping is not None:
        _write(memoryview(mapping), header, starts, meta, buffers)
        return created
    object_id, path = _reserve(client, created, total)
    try:
        # Populating the mapping at once is much faster than faulting its pages one by one.
        flags = mmap.MAP_SHARED | getattr(mmap, "MAP_POPULATE", 0)
        fd = os.open(path, os.O_RDWR)
        try:
            size = os.fstat(fd).st_size
            mapping = mmap.mmap(fd, size, flags=flags)
        except BaseException:
            os.close(fd)
            raise
        _write(memoryview(mapping), header, starts, meta, buffers)
        if hold:
            _mappings.hold(fd, mapping, os.fstat(fd).st_ino)
        else:
            mapping.close()
            os.close(fd)
    except BaseException:
        client.store_seal(object_id, None)
        raise
    return object_id, path


def dumps_result(value: Any, result_store: str, object_id: str) -> Tuple[bytes, List[ObjectRef]]:
    """A task's result as `dumps_with_refs` gives it, except that a large one holding no
    ObjectRef goes into this node's store when the caller shares it (`result_store`: its
    boot id, store directory and object server): the caller then owns the file, and reads
    it, as any process of the node, without a copy."""
    if not result_store or type(value) in _PLAIN:
        return dumps_with_refs(value)
    with _collecting() as refs:
        meta, buffers = _pickle5(value)
    header, starts, total = _layout(meta, buffers)
    if total >= INLINE_LIMIT and not refs:
        from oxray._private import worker

        boot, store_dir, caller = result_store.split(" ", 2)
        client = worker.client()
        created = client.store_create(total) if boot == BOOT_ID and client.store_dir() == store_dir else None
        if created is not None:
            # The caller owns the file from now on: this process keeps no mapping of it.
            file_id, path = _write_file(client, created, total, header, starts, meta, buffers, hold=False)
            client.store_give(file_id)
            return _stored_at(path, caller, object_id), refs
    return _inline(meta, buffers), refs


def _reserve(client, created, total: int):
    """Makes sure the file's pages exist before it is written through a mapping (a full
    /dev/shm would otherwise kill the writer with SIGBUS): shared memory that turns out to be
    full sends the object to the spill directory; a full disk is ObjectStoreFullError."""
    import errno

    from oxray.exceptions import ObjectStoreFullError

    for spill in (False, True):
        object_id, path = client.store_create(total, True) if spill else created
        fd = os.open(path, os.O_RDWR)
        try:
            os.posix_fallocate(fd, 0, total)
            return object_id, path
        except OSError as e:
            if e.errno in (errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL):  # cannot reserve here: write as is
                return object_id, path
            client.store_seal(object_id, None)
            if e.errno != errno.ENOSPC or spill:
                raise ObjectStoreFullError(f"no room for an object of {total} bytes: {e}") from None
        finally:
            os.close(fd)


def _open_stored(data: bytes) -> memoryview:
    """A read-only view of a stored value: the file mapped when it is on this machine, its
    content from the owner otherwise."""
    from oxray.exceptions import ObjectLostError

    where = json.loads(bytes(data[len(STORED_AT):]))
    if where["boot"] == BOOT_ID:
        try:
            with open(where["path"], "rb") as f:
                # Held while the mapping (which shares this open file) lives: the owner
                # reuses a freed file only when nobody maps it.
                fcntl.flock(f.fileno(), fcntl.LOCK_SH)
                return memoryview(mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ))
        except FileNotFoundError:
            raise ObjectLostError(f"object {where['id']} was freed (its file is gone)") from None
    from oxray._private import worker

    try:
        return memoryview(worker.client().fetch_stored(where["owner"], where["id"]))
    except KeyError as e:
        raise ObjectLostError(str(e)) from None


def _unpack(view: memoryview) -> Any:
    meta_len, count = struct.unpack_from("<QQ", view, len(STORED))
    spans = [struct.unpack_from("<QQ", view, len(STORED) + 16 + 16 * i) for i in range(count)]
    start = len(STORED) + 16 + 16 * count
    buffers = [view[at:at + size] for at, size in spans]
    return pickle.loads(view[start:start + meta_len], buffers=buffers)


def loads(data: bytes) -> Any:
    _local.borrowed = False
    # Without the collector: reading a value of thousands of refs (or other objects) ran it a
    # dozen times and moved them into older generations, whose passes cover a driver's whole
    # heap (~30% of the read).
    collecting = gc.isenabled()
    gc.disable()
    outer = object_ref.begin_reading()
    try:
        head = bytes(data[:len(STORED)])
        if head == STORED_AT:
            value = _unpack(_open_stored(data))
        elif head == STORED:
            value = _unpack(memoryview(data).toreadonly())
        else:
            value = pickle.loads(data)
    finally:
        object_ref.end_reading(outer)
        if collecting:
            gc.enable()
    _announce()
    return value


def _announce() -> None:
    """Owners of objects first borrowed by the last read learn of it before it is used."""
    if getattr(_local, "borrowed", False):
        _local.borrowed = False
        from oxray._private import worker

        worker.client().announce_borrows()


BLUEPRINT_BY_NAME = b"OXRAYCLS"


def load_blueprint(data: bytes):
    """An actor's `(class, options)`: pickled by a Python caller, or, from a caller that
    cannot pickle (Serve's controller), the class's import path and the options as JSON."""
    if bytes(data[:len(BLUEPRINT_BY_NAME)]) != BLUEPRINT_BY_NAME:
        return loads(data)
    import importlib

    spec = json.loads(bytes(data[len(BLUEPRINT_BY_NAME):]))
    module, _, attr = spec["class"].partition(":")
    return getattr(importlib.import_module(module), attr), spec["options"]


def dumps_args(args: tuple, kwargs: Dict[str, Any], placement=None) -> Tuple[bytes, List[str], List[str]]:
    """Top-level ObjectRefs become placeholders (resolved before the task runs), as in Ray.
    Returns the payload, their ids, and the ids of the ObjectRefs nested deeper. A task run
    inside a placement group carries `placement` (see `loads_args`)."""
    if all(type(a) in _PLAIN for a in args) and all(type(v) in _PLAIN for v in kwargs.values()):
        return pickle.dumps((args, kwargs, placement) if placement else (args, kwargs), 5), [], []
    dependencies = []

    def swap(value):
        if isinstance(value, ObjectRef):
            dependencies.append(value.hex())
            return _Dependency(value.hex())
        return value

    payload = (tuple(swap(a) for a in args), {k: swap(v) for k, v in kwargs.items()})
    if placement:
        payload += (placement,)
    data, nested = dumps_with_refs(payload)
    return data, dependencies, [r.hex() for r in nested]


def loads_args(data: bytes, values: Dict[str, Any]) -> Tuple[tuple, Dict[str, Any], Any]:
    """The arguments, with placeholders filled from `values`, and the placement the task
    was sent with (None outside a placement group)."""
    args, kwargs, *placement = loads(data)

    def fill(value):
        return values[value.object_id] if isinstance(value, _Dependency) else value

    return tuple(fill(a) for a in args), {k: fill(v) for k, v in kwargs.items()}, (placement or [None])[0]


def dumps_error(function_name: str, error: BaseException) -> bytes:
    import traceback

    tb = "".join(traceback.format_exception(type(error), error, error.__traceback__))
    try:
        dumped = _cloudpickle().dumps(RayTaskError(function_name, tb, error))
        pickle.loads(dumped)  # some pickle but cannot be rebuilt (an __init__ with more arguments)
        return dumped
    except Exception:  # the exception itself does not pickle: keep its text
        return _cloudpickle().dumps(RayTaskError(function_name, tb, RuntimeError(f"{type(error).__name__}: {error}")))


def portable_error(error: BaseException) -> BaseException:
    """The error itself when it pickles, else a RuntimeError that says what it was: an
    error that cannot travel must not hide the failure it reports."""
    try:
        pickle.loads(pickle.dumps(error))
        return error
    except Exception:
        return RuntimeError(f"{type(error).__name__}: {error}")
