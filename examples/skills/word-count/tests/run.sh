#!/bin/sh
# The skill's tests, run by 'fluffy skill test word-count' in its sandbox:
# a file in the shared folder stands for the workspace.
set -eu
mkdir -p /tmp/shared/wc-test
printf 'one two\nthree\n' > /tmp/shared/wc-test/f.txt
got=$(echo '{"path":"f.txt"}' | SKILL_WORKSPACE=/tmp/shared/wc-test "$SKILL_DIR/count.sh")
want="f.txt: 2 lines, 3 words, 14 bytes"
[ "$got" = "$want" ] || { echo "FAIL: got '$got', want '$want'"; exit 1; }
if echo '{"path":"../etc/passwd"}' | SKILL_WORKSPACE=/tmp/shared/wc-test "$SKILL_DIR/count.sh" 2>/dev/null; then
	echo "FAIL: a path out of the workspace was read"; exit 1
fi
echo "ok: 2 tests"
