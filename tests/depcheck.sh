#!/bin/sh
# make depcheck: the include graph of the tree holds its rules.
#
#   1. No cycle between files: every quoted #include that names a file of
#      the tree is an edge, and tsort(1) must order them all.
#   2. Modules depend one way (docs/architecture.md): base uses nothing;
#      proto, specialize and store use base; jit and ref use specialize;
#      exec uses jit, proto and ref; client uses proto and the public
#      header; server uses everything.  (A module may use what the
#      modules it uses use.)
#   3. <uv.h> is included in server/ only, <sqlite3.h> in store/ only
#      (and in the tests that open a store themselves).
#
# Usage: tests/depcheck.sh [ROOT]   (default: the tree this script is in)
#        tests/depcheck.sh --self-test   (plants one breach of each rule in
#        a scratch tree and checks that each is caught)
set -eu

here=$(cd "$(dirname "$0")/.." && pwd)

# Prints "FILE INCLUDED" for each quoted include of a file under ROOT that
# names a file that exists, both relative to ROOT.
edges() {
	(cd "$1" && find . -name '*.[ch]' -not -path './build*' \
	    -not -path './.git/*' | sed 's|^\./||' | sort | while read -r f; do
		sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/p' \
		    "$f" | while read -r inc; do
			p=$(realpath -m --relative-to=. "$(dirname "$f")/$inc")
			[ -f "$p" ] && echo "$f $p"
		done
	done)
}

# The modules module $1 may include from, besides itself.
allowed() {
	case $1 in
	base) echo "" ;;
	proto | specialize | store) echo "base" ;;
	jit | ref) echo "specialize base" ;;
	exec) echo "jit proto ref specialize base" ;;
	client) echo "proto base include" ;;
	*) echo "*" ;;       # server, and what is not a module (tests, ...)
	esac
}

check() {
	root=$1
	bad=0
	e=$(mktemp)
	edges "$root" >"$e"
	# 1. cycles
	if ! tsort "$e" >/dev/null 2>"$e.err"; then
		echo "depcheck: the include graph has a cycle:" >&2
		sed 's/^/  /' "$e.err" >&2
		bad=1
	fi
	# 2. module direction
	while read -r f g; do
		m=${f%%/*}
		n=${g%%/*}
		[ "$m" = "$n" ] && continue
		case $m in base | proto | specialize | store | jit | ref | exec | \
		    client) ;; *) continue ;; esac
		ok=0
		for a in $(allowed "$m"); do
			[ "$a" = "$n" ] && ok=1
		done
		if [ $ok = 0 ]; then
			echo "depcheck: $f includes $g: $m/ may not use $n/" >&2
			bad=1
		fi
	done <"$e"
	# 3. the loop and the database stay in their modules
	(cd "$root" && grep -rl --include='*.[ch]' '#[[:space:]]*include[[:space:]]*<uv\.h>' \
	    . 2>/dev/null | sed 's|^\./||' | grep -v '^server/' || true) |
	    while read -r f; do
		echo "depcheck: $f includes <uv.h> outside server/" >&2
		echo x
	    done >"$e.uv"
	(cd "$root" && grep -rl --include='*.[ch]' '#[[:space:]]*include[[:space:]]*<sqlite3\.h>' \
	    . 2>/dev/null | sed 's|^\./||' | grep -v '^store/\|^tests/' || true) |
	    while read -r f; do
		echo "depcheck: $f includes <sqlite3.h> outside store/" >&2
		echo x
	    done >>"$e.uv"
	[ -s "$e.uv" ] && bad=1
	rm -f "$e" "$e.err" "$e.uv"
	return $bad
}

self_test() {
	t=$(mktemp -d)
	trap 'rm -rf "$t"' EXIT
	mkdir -p "$t/base" "$t/server" "$t/exec"
	printf '#include "../base/b.h"\n' >"$t/server/s.h"
	printf '#include <stdint.h>\n' >"$t/base/b.h"
	printf '#include "../base/b.h"\n#include <stdio.h>\n' >"$t/exec/e.c"
	check "$t" 2>/dev/null || { echo "depcheck: a clean tree failed"; exit 1; }
	printf '#include "c.h"\n' >"$t/base/b.h"
	printf '#include "b.h"\n' >"$t/base/c.h"
	check "$t" 2>/dev/null && { echo "depcheck: a cycle passed"; exit 1; }
	printf '#include <stdint.h>\n' >"$t/base/c.h"
	check "$t" 2>/dev/null || { echo "depcheck: the repaired tree failed"; exit 1; }
	printf '#include "../server/s.h"\n' >"$t/base/c.h"
	check "$t" 2>/dev/null && { echo "depcheck: base/ using server/ passed"; exit 1; }
	printf '#include <stdint.h>\n' >"$t/base/c.h"
	printf '#include <uv.h>\n' >"$t/exec/e.c"
	check "$t" 2>/dev/null && { echo "depcheck: <uv.h> in exec/ passed"; exit 1; }
	printf '#include <sqlite3.h>\n' >"$t/exec/e.c"
	check "$t" 2>/dev/null && { echo "depcheck: <sqlite3.h> in exec/ passed"; exit 1; }
	echo "depcheck: self-test: a cycle, a module used against the order," \
	    "<uv.h> and <sqlite3.h> outside their modules are each caught"
}

if [ "${1:-}" = "--self-test" ]; then
	self_test
	exit 0
fi
root=${1:-$here}
if check "$root"; then
	echo "depcheck: $(edges "$root" | wc -l) includes between files," \
	    "no cycle, the modules in their order"
else
	exit 1
fi
