"""`ObjectRef.future()`: one thread per process waits for every ref that has a future and
settles the future when its value is ready, so a thousand futures cost one thread, not a
thousand blocked in `get`."""

import concurrent.futures
import threading
from typing import Dict, List, Tuple

_lock = threading.Lock()
_waiting: Dict[str, Tuple[object, List[concurrent.futures.Future]]] = {}
_thread = None
# How long one wait lasts before new refs are taken in.
_SLICE_S = 0.05


def of(ref) -> concurrent.futures.Future:
    global _thread
    future: concurrent.futures.Future = concurrent.futures.Future()
    with _lock:
        _waiting.setdefault(ref.hex(), (ref, []))[1].append(future)
        if _thread is None:
            _thread = threading.Thread(target=_settle, name="oxray-futures", daemon=True)
            _thread.start()
    return future


def _settle() -> None:
    global _thread
    from oxray._private import worker

    while True:
        with _lock:
            refs = [ref for ref, _ in _waiting.values()]
            if not refs:
                _thread = None
                return
        try:
            ready, _ = worker.wait(refs, num_returns=len(refs), timeout=_SLICE_S)
        except Exception:  # the client went away: nothing will be ready again
            ready = refs
        for ref in ready:
            with _lock:
                _, futures = _waiting.pop(ref.hex(), (None, []))
            try:
                value, error = worker.get(ref, timeout=0), None
            except BaseException as e:  # the task's error is the future's
                value, error = None, e
            for future in futures:
                if future.set_running_or_notify_cancel():
                    if error is None:
                        future.set_result(value)
                    else:
                        future.set_exception(error)
