"""Errors of `oxray.data`, with Ray Data's names."""


class UserCodeException(Exception):
    """A function or class given to a dataset operator raised; the original error is its
    `__cause__`, and its message names the operator."""
