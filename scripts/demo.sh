#!/usr/bin/env bash
# A two-node cluster on this machine, used through the CLI, the HTTP API and a job, then stopped.
# Runs in its own oxray home and temp dir, so it leaves a cluster of yours alone.
set -euo pipefail
OXRAY=${1:-target/release/oxray}
OXRAY=$(realpath "$OXRAY")
# A Python with the oxray package (the venv `make venv` makes), for the tasks step.
# (made absolute without resolving its link: the link is what makes it the venv's).
PY=${2:-.venv/bin/python}
PY="$(cd "$(dirname "$PY")" && pwd)/$(basename "$PY")"
work=$(mktemp -d)
export OXRAY_HOME="$work/home" OXRAY_TEMP_DIR="$work/sessions"
unset OXRAY_ADDRESS OXRAY_AUTH_TOKEN
trap '"$OXRAY" stop --force >/dev/null 2>&1 || true; rm -rf "$work"' EXIT

step() { printf '\n\033[1m$ %s\033[0m\n' "$*"; "$@"; }

step "$OXRAY" start --head --port 0 --dashboard-port 0 --num-cpus 2
address=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["address"])' "$OXRAY_HOME/current_cluster.json")
dashboard=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["dashboard_url"])' "$OXRAY_HOME/current_cluster.json")

step "$OXRAY" start --address "$address" --num-cpus 1 --resources '{"accel": 1}' --labels zone=b --node-name worker-1
step "$OXRAY" status
step "$OXRAY" list nodes --filter is_head_node=false --format yaml

token=$("$OXRAY" get-auth-token)
step curl -s "$dashboard/api/version"
echo
printf '\n\033[1m$ curl -H "Authorization: Bearer ..." %s/api/cluster_status\033[0m\n' "$dashboard"
curl -s -H "Authorization: Bearer $token" "$dashboard/api/cluster_status" | python3 -m json.tool

project="$work/project"
mkdir -p "$project"
cat > "$project/main.py" <<'PY'
import os, platform
total = sum(i * i for i in range(1_000_000))
print(f"sum of squares below 1e6 = {total}, computed on {platform.node()} as job {os.environ['OXRAY_JOB_ID']}")
PY
(cd "$project" && step "$OXRAY" job submit --working-dir . --entrypoint-resources '{"accel": 1}' -- python3 main.py)

cat > "$project/tasks.py" <<'PY'
import oxray

oxray.init()  # inside a job: joins the job's cluster


@oxray.remote
def square(x):
    return x * x


@oxray.remote
class Total:
    def __init__(self):
        self.value = 0

    def add(self, x):
        self.value += x
        return self.value


total = Total.remote()
squares = oxray.get([square.remote(i) for i in range(100)])
print("sum of the first 100 squares, by tasks and an actor:", oxray.get([total.add.remote(s) for s in squares])[-1])

from oxray.util import placement_group
from oxray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

pg = placement_group([{"CPU": 1}, {"CPU": 1}], strategy="STRICT_SPREAD")  # one CPU on each node
oxray.get(pg.ready())


@oxray.remote
def node_of(box):
    import os
    return os.environ["OXRAY_NODE_ID"][:8], len(oxray.get(box[0]))  # a ref inside a list, read on that node


data = [oxray.put(b"x" * 1_000_000)]
placed = [node_of.options(scheduling_strategy=PlacementGroupSchedulingStrategy(pg, i)).remote(data) for i in range(2)]
print("a placement group across both nodes (node, bytes read):", oxray.get(placed))
PY
(cd "$project" && step "$OXRAY" job submit --working-dir . -- "$PY" tasks.py)
step "$OXRAY" job list

step "$OXRAY" stop
