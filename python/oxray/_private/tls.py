"""What HTTPS requests to a cluster's API trust."""

import json
import os
import ssl
from pathlib import Path
from typing import Optional, Union


def ssl_context(verify: Union[bool, str, None] = True) -> Optional[ssl.SSLContext]:
    """False trusts any server; a path trusts the authorities in that file or directory;
    True trusts the cluster's authority named by OXRAY_TLS_CA, else that of a cluster started
    on this machine with TLS, else the system's (None)."""
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
    return ssl.create_default_context(cafile=ca) if ca else None


def _started_here() -> Optional[str]:
    home = Path(os.environ.get("OXRAY_HOME") or Path.home() / ".oxray")
    try:
        return json.loads((home / "current_cluster.json").read_text()).get("tls_ca")
    except (OSError, ValueError, AttributeError):
        return None
