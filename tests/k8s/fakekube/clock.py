"""Timestamps as the API writes them, and the ages kubectl shows."""

import time
from datetime import datetime, timedelta, timezone


def now(offset=0.0):
    t = datetime.now(timezone.utc) + timedelta(seconds=offset)
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def age(timestamp):
    """Kubernetes' short human durations: 5s, 3m, 2h, 4d."""
    try:
        t = datetime.strptime(timestamp, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc)
    except (TypeError, ValueError):
        return "<unknown>"
    secs = max(0, int(time.time() - t.timestamp()))
    if secs < 120:
        return f"{secs}s"
    if secs < 7200:
        return f"{secs // 60}m"
    if secs < 172800:
        return f"{secs // 3600}h"
    return f"{secs // 86400}d"
