#!/usr/bin/env bash
# Installs what fluffy's tests need on a Debian machine, idempotently. Runs as
# root (CI) or through sudo; a machine that already has everything is left
# alone.
set -euo pipefail

# Debian packages: command the tests look for -> package providing it.
declare -A want=(
	[sqlite3]=sqlite3   # audit tamper tests damage the log from outside fluffy
	[strace]=strace     # audit: TestCycleSyncs counts the fsyncs of one CLI run
	[git]=git
	[bwrap]=bubblewrap     # bench/sandbox.sh compares the native sandbox with it
	[hyperfine]=hyperfine  # bench/sandbox.sh
	[setpriv]=util-linux   # the sandbox suite reruns itself as an unprivileged user
	[dockerd]=docker.io    # the container sandbox backend's tests (internal/sandbox/docker)
	[busybox]=busybox-static # the minimal base image ('image build base --minimal') is busybox FROM scratch
	[mmdebstrap]=mmdebstrap  # the Debian base image ('image build base') is built from the apt sources by it
	[curl]=curl            # egress.txtar: curl inside the sandbox through the proxy
	[pytest-3]=python3-pytest   # tdd: live test of the pytest JUnit XML parser
	[python3]=python3      # the stand-alone audit export verifier (scripts/audit_verify.py) runs in the tests
	[rg]=ripgrep           # internal/tool/builtin: BenchmarkGrep compares search.grep with ripgrep
	[tmux]=tmux            # cmd/fluffy: the terminal UI screen tests (TestTerminal*)
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
# The container backend's tests need a running engine: start dockerd when
# none answers, and wait (bounded) until it does.
if command -v dockerd >/dev/null 2>&1 && ! docker version >/dev/null 2>&1; then
	SUDO=""
	[ "$(id -u)" -eq 0 ] || SUDO="sudo"
	echo "deps: starting dockerd (log: /tmp/dockerd.log)"
	$SUDO sh -c 'nohup dockerd >/tmp/dockerd.log 2>&1 &'
	for _ in $(seq 1 60); do
		docker version >/dev/null 2>&1 && break
		sleep 1
	done
	docker version >/dev/null 2>&1 || { echo "deps: dockerd did not answer within 60 s; see /tmp/dockerd.log" >&2; tail -20 /tmp/dockerd.log >&2; exit 1; }
fi
echo "deps: ok"
