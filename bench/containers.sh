#!/usr/bin/env bash
# Container sandbox latency, in one run: the docker backend (one-shot Run,
# first command in a pre-warmed container, repeated warm exec), the native
# backend's Run, and the docker CLI (docker run --rm, docker exec) for
# reference. Needs root, a running dockerd and hyperfine (scripts/deps.sh).
# Usage: N=30 bash bench/containers.sh
set -euo pipefail
cd "$(dirname "$0")/.."
N=${N:-30}
export CGO_ENABLED=0
echo "== go benchmarks (${N}x each)"
go test -run '^$' -bench 'BenchmarkContainer' -benchtime "${N}x" ./internal/sandbox/docker/
go test -run '^$' -bench 'BenchmarkRunTrue' -benchtime "${N}x" ./internal/sandbox/native/
echo "== docker CLI"
img=fluffy-test-base:latest  # built by the docker package's tests
id=$(docker run -d --rm --network none --read-only --cap-drop ALL --init "$img" sleep 600)
trap 'docker rm -f "$id" >/dev/null' EXIT
hyperfine -N -w 3 -r "$N" \
	"docker run --rm --network none --read-only --cap-drop ALL $img true" \
	"docker exec $id true"
