#!/usr/bin/env bash
# Installs what fluffy's tests need on a Debian machine, idempotently. Runs as
# root (CI) or through sudo; a machine that already has everything is left
# alone.
set -euo pipefail

# Debian packages: command the tests look for -> package providing it.
declare -A want=(
	[sqlite3]=sqlite3   # audit tamper tests damage the log from outside fluffy
	[git]=git
	[bwrap]=bubblewrap     # bench/sandbox.sh compares the native sandbox with it
	[hyperfine]=hyperfine  # bench/sandbox.sh
	[setpriv]=util-linux   # the sandbox suite reruns itself as an unprivileged user
	[curl]=curl            # egress.txtar: curl inside the sandbox through the proxy
	[pytest-3]=python3-pytest   # tdd: live test of the pytest JUnit XML parser
	[python3]=python3      # the stand-alone audit export verifier (docs/audit_verify.py) runs in the tests
	[rg]=ripgrep           # internal/tool/builtin: BenchmarkGrep compares search.grep with ripgrep
)

missing=()
for cmd in "${!want[@]}"; do
	command -v "$cmd" >/dev/null 2>&1 || missing+=("${want[$cmd]}")
done

if [ ${#missing[@]} -gt 0 ]; then
	SUDO=""
	[ "$(id -u)" -eq 0 ] || SUDO="sudo"
	echo "deps: installing ${missing[*]}"
	$SUDO apt-get update -qq
	DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
echo "deps: ok"
