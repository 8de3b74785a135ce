#!/bin/sh
# install.sh REQUIREMENTS VENDOR DEST: copies each package REQUIREMENTS
# names from VENDOR into DEST. A package that is not vendored fails the
# build (there is no network to fetch it from).
set -eu
req=$1 vendor=$2 dest=$3
mkdir -p "$dest"
grep -v '^[[:space:]]*\(#\|$\)' "$req" | while read -r name; do
	case $name in
	*[!A-Za-z0-9_]*) echo "install.sh: $name: not a package name" >&2; exit 1 ;;
	esac
	if [ ! -d "$vendor/$name" ]; then
		echo "install.sh: $name is not in vendor/" >&2
		exit 1
	fi
	cp -R "$vendor/$name" "$dest/"
	echo "installed $name"
done
