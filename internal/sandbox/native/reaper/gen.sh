#!/bin/sh
# Builds reaper_amd64.elf from reaper_amd64.asm with GNU binutils (as, ld):
# a static program with no libc. The result is committed (and embedded);
# TestReaperMatchesSource rebuilds it where binutils exist and compares.
set -eu
cd "$(dirname "$0")"
out=${1:-reaper_amd64.elf}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
as --64 -o "$tmp/r.o" reaper_amd64.asm
ld -m elf_x86_64 -static -nostdlib -n -s --build-id=none -z noexecstack -o "$out" "$tmp/r.o"
