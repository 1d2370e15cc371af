"""Fixtures for tests against the fake Kubernetes in tests/k8s/fakekube.

    apiserver   a running FakeApiServer (in-process, port 0): .url, .store, .compact()
    kubeconfig  path of a kubeconfig for it; also exported as KUBECONFIG (and KUBECACHEDIR,
                so kubectl's discovery cache stays in the test's temp dir)
    kube        a KubeClient on the server
    kubectl     kubectl(*args, check=True, timeout=30, input=None) -> CompletedProcess
    kubelet     a running process Kubelet (started with the apiserver object, so that
                `kubectl logs` works) whose pods find on their PATH the directory of
                $OXRAY_BIN (default: target/debug when it holds an `oxray`), then the venv's
                bin, then this process's PATH

Operator tests start `oxray operator` with os.environ (KUBECONFIG points at the fake server
once the `kubeconfig` fixture ran), apply CRDs and resources with `kubectl`, and read pod
output with `kubelet.logs(namespace, pod)` or `kubectl logs`.
"""

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from tests.k8s.fakekube.apiserver import FakeApiServer  # noqa: E402
from tests.k8s.fakekube.client import KubeClient  # noqa: E402
from tests.k8s.fakekube.kubelet import Kubelet  # noqa: E402

KUBECTL = shutil.which("kubectl") or "/usr/bin/kubectl"


def pod_path():
    """PATH for pod processes: $OXRAY_BIN's directory, the venv, then ours."""
    parts = []
    oxray = os.environ.get("OXRAY_BIN") or str(REPO / "target" / "debug" / "oxray")
    if Path(oxray).exists():
        parts.append(str(Path(oxray).resolve().parent))
    parts.append(str(Path(sys.executable).parent))
    parts.append(os.environ.get("PATH", "/usr/local/bin:/usr/bin:/bin"))
    return os.pathsep.join(parts)


@pytest.fixture
def k8s_tmp():
    path = Path(tempfile.mkdtemp(prefix="fakekube-test-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def apiserver(k8s_tmp):
    server = FakeApiServer(log_path=str(k8s_tmp / "apiserver-requests.log")).start()
    yield server
    server.stop()


@pytest.fixture
def kubeconfig(apiserver, k8s_tmp, monkeypatch):
    path = apiserver.write_kubeconfig(k8s_tmp / "kubeconfig")
    monkeypatch.setenv("KUBECONFIG", path)
    monkeypatch.setenv("KUBECACHEDIR", str(k8s_tmp / "kubectl-cache"))
    return path


@pytest.fixture
def kube(apiserver):
    return KubeClient(apiserver.url)


@pytest.fixture
def kubectl(kubeconfig, k8s_tmp):
    env = dict(os.environ, KUBECONFIG=kubeconfig, KUBECACHEDIR=str(k8s_tmp / "kubectl-cache"))

    def run(*args, check=True, timeout=30, input=None):  # noqa: A002 - subprocess's name
        for _ in range(2):
            done = subprocess.run([KUBECTL, *args], env=env, input=input, capture_output=True,
                                  text=True, timeout=timeout, check=False)
            # kubectl falls back to OpenAPI v2 (which the fake server does not serve) when a
            # v3 document read times out on a loaded machine: that read is tried once more.
            if "failed to download openapi" not in done.stderr:
                break
        if check and done.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed ({done.returncode}):\n"
                                 f"{done.stdout}{done.stderr}")
        return done

    return run


@pytest.fixture
def kubelet(apiserver, k8s_tmp):
    k = Kubelet(apiserver, root_dir=str(k8s_tmp / "kubelet"), path=pod_path(),
                backoff_base=0.2, backoff_max=2.0).start()
    yield k
    k.stop()
