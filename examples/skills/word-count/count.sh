#!/bin/sh
# The arguments arrive as one JSON object on stdin: {"path": "..."}.
set -eu
path=$(sed -n 's/.*"path" *: *"\([^"]*\)".*/\1/p')
case "$path" in
"" | /* | *..*) echo "path must be a file inside the workspace" >&2; exit 2 ;;
esac
set -- $(wc -l -w -c < "$SKILL_WORKSPACE/$path")
echo "$path: $1 lines, $2 words, $3 bytes"
