#!/usr/bin/env bash
# The demo on the embedded default. It grows with fluffy: today it checks the
# machine, then runs an untrusted-looking command in the native sandbox
# against a scratch repository and shows that its writes landed in a change
# set, not in the repository, and that it was recorded in the audit log.
set -euo pipefail
cd "$(dirname "$0")/.."
fluffy=$PWD/bin/fluffy
demo=$(mktemp -d /tmp/fluffy-demo.XXXXXX)
trap '$fluffy kernel stop >/dev/null 2>&1 || true; rm -rf "$demo"' EXIT
export FLUFFY_HOME="$demo/home"

step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

step "fluffy doctor: what this machine offers"
$fluffy doctor || true

step "a scratch repository"
mkdir -p "$demo/repo" && cd "$demo/repo"
git init -q . && printf 'hello\n' > greeting.txt && git add . && git -c user.email=demo@example -c user.name=demo commit -qm init
cat greeting.txt

step "fluffy sandbox run: the command edits a file, tries to leave, and looks for secrets"
export DEMO_API_KEY=sk-not-for-the-sandbox
$fluffy sandbox run --workspace "$demo/repo" --changeset "$demo/changes" -- /bin/sh -c '
  echo "bonjour" > greeting.txt
  echo "new" > added.txt
  echo "escape" > /etc/fluffy-demo 2>/dev/null || echo "write to /etc refused"
  cat /root/.ssh/id_rsa 2>/dev/null || echo "no ~/.ssh in here"
  echo "DEMO_API_KEY=${DEMO_API_KEY:-<absent>}"
' || true

step "the repository is untouched"
cat greeting.txt; ls

step "fluffy sandbox diff: what the command wrote, held in the change set"
$fluffy sandbox diff --workspace "$demo/repo" --changeset "$demo/changes" || true

step "fluffy audit: the run is in the tamper-evident log, and the log verifies"
$fluffy audit log
$fluffy audit verify

step "fluffy \"<task>\": a session on the scripted replay/demo model, every tool call through the gates"
printf 'A scratch repository for the fluffy demo.\n' > README.md
$fluffy --no-apply -m replay/demo "look at this project and tell me what it is"

step "fluffy audit log: what the session did, in the tamper-evident log"
$fluffy audit log -n 6
$fluffy audit verify
