"""Serve's HTTP proxy on every node with a replica (Ray's EveryNode), on two hosts (`netns`):
network namespaces behind a bridge, each with its own address, hostname and oxray home. The head runs
in one with no CPUs, an agent in the other, so the replica runs on the agent's host, whose
own proxy must serve it without the head on the request path. Skipped where network
namespaces cannot be made (not root, no `ip`)."""

import json
import os
import signal

import pytest

from netns import Network, cluster, wait_for

NET = Network("oxsv", "10.201.0", ["h", "w"])
HEAD, WORKER = "h", "w"
ADDRESS = NET.address


@pytest.fixture(scope="module")
def hosts(tmp_path_factory):
    root = tmp_path_factory.mktemp("every-node")
    with cluster(NET, root, "--num-cpus", "0") as started:
        worker = started.join(WORKER, "--num-cpus", "2")
        yield started.head, worker


DEPLOY = """
import os, socket
import oxray
from oxray import serve

oxray.init(address="{head}:6379")

@serve.deployment(ray_actor_options={{"num_cpus": 1}})
def where(request):
    return f"{{socket.gethostname()}} {{os.getpid()}}"

serve.start(http_options={{"host": "0.0.0.0"}})
serve.run(where.bind(), name="where", route_prefix="/where")
print("deployed")
"""


def test_the_node_of_a_replica_serves_http_itself_also_with_the_head_stopped(hosts):
    head, worker = hosts
    assert "deployed" in head.python(DEPLOY.format(head=ADDRESS[HEAD])).stdout
    url = f"http://{ADDRESS[WORKER]}:8000"
    # The head's proxy serves, and the worker's node runs one too, from the table the head sent.
    assert head.get(f"http://{ADDRESS[HEAD]}:8000/where")[0] == 200
    status, body = wait_for("the worker node's proxy", lambda: (s := head.get(f"{url}/where"))[0] == 200 and s)
    # Both proxies reach the one replica.
    assert body == head.get(f"http://{ADDRESS[HEAD]}:8000/where")[1]
    assert worker.get("http://127.0.0.1:8000/-/healthz") == (200, "success")
    assert head.get(f"{url}/-/routes") == (200, '{"/where":"where"}')
    assert head.get(f"{url}/nowhere")[0] == 404

    # Serve's status lists both proxies, by node.
    details = json.loads(head.python(
        "import os, urllib.request\n"
        "r = urllib.request.Request('http://127.0.0.1:8265/api/serve/applications/',"
        " headers={'Authorization': 'Bearer ' + os.environ['OXRAY_AUTH_TOKEN']})\n"
        "print(urllib.request.urlopen(r).read().decode())").stdout)
    ips = sorted(p["node_ip"] for p in details["proxies"].values())
    assert ips == [ADDRESS[HEAD], ADDRESS[WORKER]], details["proxies"]

    # The head is not on the request path: stopped, the worker's node still serves.
    pid = head.role_pid("head")
    os.kill(pid, signal.SIGSTOP)
    try:
        for _ in range(5):
            assert head.get(f"{url}/where")[0] == 200
    finally:
        os.kill(pid, signal.SIGCONT)

    # Shut down, Serve leaves no proxy anywhere.
    head.python(f"import oxray; from oxray import serve; oxray.init(address='{ADDRESS[HEAD]}:6379'); "
                "serve.shutdown()")
    wait_for("the worker node's proxy to stop", lambda: head.get(f"{url}/-/healthz")[0] is None)
    wait_for("the head's proxy to stop", lambda: head.get(f"http://{ADDRESS[HEAD]}:8000/-/healthz")[0] is None)
