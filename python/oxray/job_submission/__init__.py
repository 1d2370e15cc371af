"""Submit and manage jobs on an oxray cluster, with the names of `ray.job_submission`."""

from oxray.job_submission._client import JobSubmissionClient
from oxray.job_submission._models import DriverInfo, JobDetails, JobInfo, JobStatus, JobType

__all__ = ["DriverInfo", "JobDetails", "JobInfo", "JobStatus", "JobSubmissionClient", "JobType"]
