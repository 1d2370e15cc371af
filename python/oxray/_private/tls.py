"""What HTTPS requests to a cluster's API trust."""

import json
import os
import ssl
from pathlib import Path
from typing import Optional, Union


def ssl_context(verify: Union[bool, str, None] = True) -> Optional[ssl.SSLContext]:
    """False trusts any server; a path trusts the authorities in that file or directory;
    True trusts the system's authorities and the cluster's: the one OXRAY_TLS_CA names, else
    that of a cluster started on this machine with TLS (None: the system's only)."""
    if verify is False:
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        return context
    if isinstance(verify, str):
        path = Path(verify)
        if not path.exists():
            raise ValueError(f"verify={verify!r}: no such certificate file or directory")
        return ssl.create_default_context(capath=verify) if path.is_dir() else ssl.create_default_context(cafile=verify)
    ca = os.environ.get("OXRAY_TLS_CA") or _started_here()
    if not ca:
        return None
    context = ssl.create_default_context()
    context.load_verify_locations(cafile=ca)
    return context


def _started_here() -> Optional[str]:
    home = Path(os.environ.get("OXRAY_HOME") or Path.home() / ".oxray")
    try:
        return json.loads((home / "current_cluster.json").read_text()).get("tls_ca")
    except (OSError, ValueError, AttributeError):
        return None
