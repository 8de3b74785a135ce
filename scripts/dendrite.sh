#!/usr/bin/env bash
# Builds the Matrix homeserver the Matrix channel's tests run against:
# Dendrite v0.13.8 from github.com/matrix-org/dendrite (Apache-2.0; the later
# releases under github.com/element-hq/dendrite are AGPL and not used). It is
# an external test server, built from a throwaway module and never linked into
# fluffy. The binaries are cached; a second run with them present does nothing.
# Prints the directory holding dendrite and create-account.
set -euo pipefail

version=v0.13.8
dir="${XDG_CACHE_HOME:-$HOME/.cache}/fluffy-test/dendrite-$version"
tools="dendrite create-account generate-config generate-keys"
have=1
for t in $tools; do [ -x "$dir/$t" ] || have=0; done
if [ $have = 1 ]; then
	echo "$dir"
	exit 0
fi
mkdir -p "$dir"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# Dendrite's SQLite driver (mattn/go-sqlite3) needs cgo; the homeserver is a
# test tool, fluffy itself stays CGO_ENABLED=0.
(
	cd "$work"
	go mod init fluffy-test/dendrite >/dev/null 2>&1
	GOFLAGS=-mod=mod go get "github.com/matrix-org/dendrite@$version" >&2
	CGO_ENABLED=1 GOBIN="$dir" GOFLAGS=-mod=mod go install \
		$(for t in $tools; do echo "github.com/matrix-org/dendrite/cmd/$t"; done) >&2
)
echo "$dir"
