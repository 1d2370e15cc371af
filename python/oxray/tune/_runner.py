"""`TrialRunner`: a pooled worker actor that runs one trial after another. The trial runs
in a thread of its own; the driver long-polls for its results and answers each with a
decision in its next poll, so a result costs one round trip."""

import os
import queue
import shutil
import sys
import tempfile
import threading
import traceback
from typing import Any, Dict, Optional

from oxray._private.serialization import portable_error
from oxray.tune import _session, _trainable
from oxray.tune._errors import StopTrial

JOIN_S = 30.0


class TrialRunner:
    def __init__(self):
        self.results: "queue.Queue[Dict]" = queue.Queue()
        self.decisions: "queue.Queue[str]" = queue.Queue(maxsize=1)
        self.thread: Optional[threading.Thread] = None

    def pid(self) -> int:
        return os.getpid()

    def start(self, info: Dict[str, Any], trainable: Any, checkpoint, checkpoint_config) -> int:
        """Starts the trial and returns at once (this worker's pid)."""
        if self.thread is not None:
            self.thread.join(JOIN_S)  # a stopped trial's thread ends at its next report
        for q in (self.results, self.decisions):  # nothing of the previous trial is left to read
            while not q.empty():
                q.get_nowait()

        def exchange(result: Dict) -> str:
            self.results.put({"result": result})
            return self.decisions.get()

        scratch = None
        if (info.get("storage") or (None,))[0] is not None:
            # Storage elsewhere: the trial's own directory is scratch space on this node.
            scratch = info["trial_dir"] = tempfile.mkdtemp(prefix=f"{info['trial_name']}-")
        session = _session.TrialSession(info, checkpoint, exchange)

        def run():
            _session.install(session)
            train_session = sys.modules.get("oxray.train._session")
            if train_session is not None:  # oxray.train.report inside a trial reports to Tune
                train_session.install(_session.TrainShim(session))
            item: Dict[str, Any] = {"done": True}
            try:
                os.makedirs(info["trial_dir"], exist_ok=True)
                if _trainable.is_class_trainable(trainable):
                    _trainable.run_class(trainable, info["config"], session, checkpoint_config)
                else:
                    _trainable.run_function(trainable, info["config"], session.report)
            except StopTrial:
                item = {"stopped": True}
            except BaseException as error:  # the driver decides what a trial's error means
                item = {"error": (portable_error(error), traceback.format_exc())}
            finally:
                _session.install(None)
                if train_session is not None:
                    train_session.install(None)
                if scratch is not None:
                    shutil.rmtree(scratch, ignore_errors=True)
            self.results.put(item)

        self.thread = threading.Thread(target=run, name="tune-trial", daemon=True)
        self.thread.start()
        return os.getpid()

    def poll(self, wait_s: float, decision: Optional[str] = None) -> Dict[str, Any]:
        """Answers the previous result with `decision`, then returns the next item (a
        result, the end, an error) or {} when nothing came within `wait_s`."""
        if decision is not None:
            self.decisions.put(decision)
        try:
            return self.results.get(timeout=wait_s)
        except queue.Empty:
            return {}
