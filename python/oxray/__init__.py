"""oxray: a distributed compute runtime for AI workloads, compatible with Ray.

This package holds the Python client; `oxray.job_submission` submits and manages jobs the
way `ray.job_submission` does.
"""

__version__ = "0.1.0"
