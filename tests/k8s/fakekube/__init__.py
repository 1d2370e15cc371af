"""A fake Kubernetes for tests: an in-memory API server and a kubelet that runs pods as local
processes."""

__all__ = ["FakeApiServer", "Kubelet", "KubeClient", "kubeconfig_text"]


def __getattr__(name):
    # Lazy, so that `python -m tests.k8s.fakekube.apiserver` does not import itself twice.
    if name in ("FakeApiServer", "kubeconfig_text"):
        from . import apiserver
        return getattr(apiserver, name)
    if name == "Kubelet":
        from .kubelet import Kubelet
        return Kubelet
    if name == "KubeClient":
        from .client import KubeClient
        return KubeClient
    raise AttributeError(name)
