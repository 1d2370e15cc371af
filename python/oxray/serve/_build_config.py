"""`oxray serve build`: the config file (Ray's ServeDeploySchema) of the applications named
by import path, with the options their code sets, ready for `serve deploy` or a
RayService's `serveConfigV2`. Run as `python -m oxray.serve._build_config [--app-dir DIR]
IMPORT_PATH...`; prints the config as JSON."""

import argparse
import contextlib
import json
import sys
from typing import Any, Dict, List

from oxray.serve._build import deployment_schema, walk
from oxray.serve._declarative import load_application


def build_config(import_paths: List[str]) -> Dict[str, Any]:
    """One application per import path (`app1`, `app2`...), at `/` when alone and at its
    own name's prefix otherwise, as Ray's `serve build` writes them."""
    if not import_paths:
        raise ValueError("serve build needs at least one import path")
    applications = []
    for index, import_path in enumerate(import_paths):
        _, graph = walk(load_application(import_path, {}))
        name = f"app{index + 1}"
        deployments = []
        for deployment_name, app in graph:
            options = dict(app.deployment._options)  # only what the code set
            schema = deployment_schema(deployment_name, options, options.get("ray_actor_options") or {})
            if not schema["ray_actor_options"]:
                del schema["ray_actor_options"]
            deployments.append(schema)
        applications.append({"name": name, "route_prefix": "/" if len(import_paths) == 1 else f"/{name}",
                             "import_path": import_path, "runtime_env": {}, "deployments": deployments})
    return {
        "proxy_location": "EveryNode",
        "http_options": {"host": "0.0.0.0", "port": 8000},
        "grpc_options": {"port": 9000, "grpc_servicer_functions": []},
        "logging_config": {"encoding": "TEXT", "log_level": "INFO", "logs_dir": None, "enable_access_log": True},
        "applications": applications,
    }


def main(argv: List[str]) -> int:
    parser = argparse.ArgumentParser(prog="oxray serve build")
    parser.add_argument("--app-dir", default=".")
    parser.add_argument("import_paths", nargs="+")
    args = parser.parse_args(argv)
    sys.path.insert(0, args.app_dir)
    with contextlib.redirect_stdout(sys.stderr):  # what the user's modules print is not the config
        config = build_config(args.import_paths)
    print(json.dumps(config))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
