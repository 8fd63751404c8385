#!/bin/sh
# Builds the Debian packages of this tree (debian/) into OUTDIR with
# dpkg-buildpackage, in a temporary copy of the tree's files (those git
# tracks and the untracked ones it does not ignore), removed at the end:
# the work tree gets nothing of the build, and its build/ is left alone.
# With --version V, the copy's debian/changelog gets an entry for V on
# top first (make test-deb builds its upgrade this way).  Leaves the
# .deb, .buildinfo and .changes files in OUTDIR.
# Usage: deploy/deb.sh [--version V] OUTDIR
set -eu

version=""
if [ "${1:-}" = --version ]; then
	version=$2
	shift 2
fi
[ $# = 1 ] || { echo "usage: deploy/deb.sh [--version V] OUTDIR" >&2; exit 2; }

top=$(git rev-parse --show-toplevel)
mkdir -p "$1"
out=$(cd "$1" && pwd)
tmp=$(mktemp -d "${TMPDIR:-/tmp}/kspec-deb.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
src=$tmp/kspec
mkdir "$src"
# Deleted files that git still tracks are left out.
(cd "$top" && git ls-files -z --cached --others --exclude-standard |
    xargs -0 sh -c 'for f; do [ -e "$f" ] && printf "%s\0" "$f"; done' sh |
    tar --null -T - -cf -) | tar -C "$src" -xf -

if [ -n "$version" ]; then
	cl=$src/debian/changelog
	{
		printf 'kspec (%s) unstable; urgency=medium\n\n' "$version"
		printf '  * Rebuilt with the version %s.\n\n' "$version"
		printf ' -- %s  %s\n\n' \
		    "$(sed -n 's/^ -- \(.*>\)  .*/\1/p' "$cl" | head -n 1)" \
		    "$(date -R)"
		cat "$cl"
	} >"$cl.new"
	mv "$cl.new" "$cl"
fi

rm -f "$out"/*.deb "$out"/*.buildinfo "$out"/*.changes
(cd "$src" && dpkg-buildpackage -us -uc -b -jauto)
mv "$tmp"/*.deb "$tmp"/*.buildinfo "$tmp"/*.changes "$out"/
ls "$out"/*.deb
