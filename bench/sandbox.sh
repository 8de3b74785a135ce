#!/usr/bin/env bash
# Side-by-side start-up cost of the native sandbox and bubblewrap, in one
# hyperfine session: `fluffy sandbox run -- /bin/true` against bwrap with
# every namespace unshared running the same command. See docs/benchmarks.md.
set -euo pipefail
cd "$(dirname "$0")/.."
make -s build
BIN=$PWD/bin/fluffy
WS=$(mktemp -d /var/tmp/fluffy-bench-XXXXXX)
CS=$(mktemp -d /var/tmp/fluffy-bench-cs-XXXXXX)
trap 'rm -rf "$WS" "$CS"' EXIT
cd "$WS"
hyperfine -N --warmup 20 --runs "${RUNS:-300}" --export-markdown "${OUT:-/dev/stdout}" \
	-n bare '/bin/true' \
	-n bwrap 'bwrap --unshare-all --die-with-parent --new-session --ro-bind /usr /usr --symlink usr/bin /bin --symlink usr/lib /lib --symlink usr/lib64 /lib64 --proc /proc --dev /dev --tmpfs /tmp /bin/true' \
	-n 'fluffy sandbox run' "$BIN sandbox run --changeset $CS/upper -- /bin/true" \
	-n 'fluffy sandbox run --no-workspace' "$BIN sandbox run --no-workspace -- /bin/true"
