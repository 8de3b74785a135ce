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
	[docker-compose]=docker-compose  # cmd/fluffy: TestComposeDeployment runs deploy/compose.yaml
	[podman]=podman        # the same container tests against Podman (TestPodman, TestPodmanScripts)
	[busybox]=busybox-static # the minimal base image ('image build base --minimal') is busybox FROM scratch
	[mmdebstrap]=mmdebstrap  # the Debian base image ('image build base') is built from the apt sources by it
	[curl]=curl            # egress.txtar: curl inside the sandbox through the proxy
	[pytest-3]=python3-pytest   # tdd: live test of the pytest JUnit XML parser
	[python3]=python3      # the stand-alone audit export verifier (scripts/audit_verify.py) runs in the tests
	[rg]=ripgrep           # internal/tool/builtin: BenchmarkGrep compares search.grep with ripgrep
	[tmux]=tmux            # cmd/fluffy: the terminal UI screen tests (TestTerminal*)
	[chromium]=chromium    # cmd/fluffy: the web console's browser tests (serve_web_browser.txtar)
	[npm]=npm              # axe-core and the Bitwarden CLI, below
	[gcc]=gcc              # scripts/dendrite.sh: the Matrix test homeserver's SQLite driver needs cgo
	[systemd-analyze]=systemd  # internal/cli: 'serve install-unit' writes a unit systemd-analyze verifies
	[ssh-keygen]=openssh-client  # internal/plugin: plugin signatures are verified with ssh-keygen -Y verify
)

missing=()
for cmd in "${!want[@]}"; do
	command -v "$cmd" >/dev/null 2>&1 || missing+=("${want[$cmd]}")
done
# Podman's container init (a recommendation of podman's, which
# --no-install-recommends leaves out; without it no container starts).
[ -x /usr/libexec/podman/catatonit ] || missing+=(catatonit)
# The system's roots, to which a sandbox's bundle adds the egress proxy's
# CA when it swaps secrets into HTTPS (netproxy, native: TestSecretSwap*).
[ -f /etc/ssl/certs/ca-certificates.crt ] || missing+=(ca-certificates)

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
# Podman's Docker-compatible API, where the tests look for it (rootful,
# no idle timeout), started in its own directory: conmon writes a file
# "oom" into its working directory when a container runs out of memory
# (as the adversarial suite's memory-hog does). fluffy names nofile and nproc in every container it
# creates, at the service's own hard limits: Podman's defaults ask runc
# for more than a machine without CAP_SYS_RESOURCE (a VM) grants.
podman_sock=/run/podman/podman.sock
podman_up() {
	# The socket is root's: ask as root.
	local sudo=""
	[ "$(id -u)" -eq 0 ] || sudo="sudo"
	$sudo curl -sf --max-time 5 --unix-socket "$podman_sock" http://podman/_ping >/dev/null 2>&1
}
if command -v podman >/dev/null 2>&1 && ! podman_up; then
	SUDO=""
	[ "$(id -u)" -eq 0 ] || SUDO="sudo"
	echo "deps: starting podman system service (log: /tmp/podman-service.log)"
	$SUDO sh -c "mkdir -p /run/podman && cd /run/podman && nohup podman system service --time=0 unix://$podman_sock >/tmp/podman-service.log 2>&1 &"
	for _ in $(seq 1 30); do
		podman_up && break
		sleep 1
	done
	podman_up || { echo "deps: Podman's API did not answer within 30 s; see /tmp/podman-service.log" >&2; tail -20 /tmp/podman-service.log >&2; exit 1; }
fi
# axe-core, the accessibility checker the web console's browser tests run
# in the page, from npm, cached (installed once per version).
axe_version=4.14.1
axe_dir="${XDG_CACHE_HOME:-$HOME/.cache}/fluffy-test/axe-core-$axe_version"
if [ ! -f "$axe_dir/node_modules/axe-core/axe.min.js" ]; then
	echo "deps: installing axe-core $axe_version into $axe_dir"
	mkdir -p "$axe_dir"
	npm install --prefix "$axe_dir" --no-save --no-audit --no-fund --silent "axe-core@$axe_version" >/dev/null
fi
# The Matrix channel's tests run against a real homeserver, built once and
# cached (scripts/dendrite.sh).
bash "$(dirname "$0")/dendrite.sh" >/dev/null
# The Bitwarden CLI (internal/secret: the real-bw tests), from npm,
# cached per version; skipped when present.
bw_dir="${XDG_CACHE_HOME:-$HOME/.cache}/fluffy-test/bw-2026.9.0"
if [ ! -x "$bw_dir/node_modules/.bin/bw" ]; then
	echo "deps: installing @bitwarden/cli 2026.9.0 into $bw_dir"
	mkdir -p "$bw_dir"
	npm install --no-audit --no-fund --silent --prefix "$bw_dir" @bitwarden/cli@2026.9.0 >/dev/null
fi
# A third-party MCP server the plugin runtime's tests run sandboxed with
# Node (internal/plugin/host: TestThirdPartyServer), from npm, cached per
# version; skipped when present.
fs_dir="${XDG_CACHE_HOME:-$HOME/.cache}/fluffy-test/mcp-server-filesystem-2026.8.31"
if [ ! -f "$fs_dir/node_modules/@modelcontextprotocol/server-filesystem/dist/index.js" ]; then
	echo "deps: installing @modelcontextprotocol/server-filesystem 2026.8.31 into $fs_dir"
	mkdir -p "$fs_dir"
	npm install --no-audit --no-fund --silent --prefix "$fs_dir" @modelcontextprotocol/server-filesystem@2026.8.31 >/dev/null
fi
echo "deps: ok"
