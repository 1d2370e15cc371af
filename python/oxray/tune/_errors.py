"""Tune's errors."""


class TuneError(Exception):
    """The run itself cannot go on (not a trial's own failure: those are in the results)."""


class StopTrial(BaseException):
    """Raised inside `report` when the run stops the trial; a BaseException so that a
    trainable's `except Exception` does not swallow it."""
