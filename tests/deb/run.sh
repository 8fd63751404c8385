#!/bin/sh
# make test-deb: the Debian packages of DEBDIR (make deb) installed,
# upgraded and purged in a throwaway Debian 12 root, never the host's.
#
# The root is a minbase debootstrap of bookworm, made once and kept as a
# tarball in $KSPEC_DEB_CACHE (default /var/cache/kspec-test-deb, with the
# .debs apt fetched into it, so that a second run downloads nothing), and
# unpacked afresh into a temporary folder for every run; apt inside it
# takes its dependencies from the host's Debian sources.  The run happens
# in a mount namespace of its own: /proc, a /dev of a few nodes, /run and
# apt's archive cache are mounted inside it only, unmounted on exit, and
# the folder is removed, failed run or not.  systemd does not run in a
# chroot: kspecd is started as the packaged unit says (its ExecStart, as
# its User and Group, with the CacheDirectory and RuntimeDirectory it
# would make, INVOCATION_ID set as systemd sets it).
#
# It checks: the packages install with their dependencies; the user and
# group kspec exist and the socket unit is enabled, the service not;
# `kspec ping` answers as root, as a member of group kspec and from the
# Python client; the packaged daemon compiles a CPU kernel with libgccjit;
# a program built with `pkg-config kspec` links libkspec.so.0 and pings
# it; the Python client quantizes through libkspec.  Then packages built
# from a copy of the tree with a higher version replace them, and the
# restarted daemon serves the kernel from the store it kept.  Last,
# apt-get purge removes every file of the packages, the store
# (/var/cache/kspec), /run/kspec and the unit's enablement, keeps the
# user and group kspec, and removes nothing else.
#
# Usage: tests/deb/run.sh DEBDIR
# Exit status 0 when it passed or was skipped (not root, or no debootstrap
# or unshare: it says so), 1 when it failed.
set -eu

[ $# = 1 ] || { echo "usage: tests/deb/run.sh DEBDIR" >&2; exit 2; }
debdir=$(cd "$1" && pwd)
top=$(cd "$(dirname "$0")/../.." && pwd)
cache=${KSPEC_DEB_CACHE:-/var/cache/kspec-test-deb}
suite=bookworm

say() { echo "test-deb: $*"; }
fail() { echo "test-deb: FAILED: $*" >&2; exit 1; }

if [ "$(id -u)" != 0 ]; then
	say "SKIPPED: needs root (debootstrap, chroot, mounts)"
	exit 0
fi
for t in debootstrap unshare chroot; do
	command -v "$t" >/dev/null 2>&1 || {
		say "SKIPPED: $t is not installed (deploy/deps.sh --deb)"
		exit 0
	}
done

# The rest runs in a mount namespace of its own: what it mounts is gone
# when it ends, whatever ends it.
if [ -z "${KSPEC_DEB_NS:-}" ]; then
	KSPEC_DEB_NS=1 exec unshare --mount --propagation private \
	    "$0" "$debdir"
fi

ls "$debdir"/kspecd_*.deb >/dev/null 2>&1 ||
    fail "no kspecd_*.deb in $debdir (make deb)"
v1=$(dpkg-deb -f "$(ls "$debdir"/kspecd_*.deb | head -n 1)" Version)
v2=$v1+upgradetest1
pkgs="kspecd libkspec0 libkspec-dev python3-kspec"

work=$(mktemp -d /var/tmp/kspec-test-deb.XXXXXX)
root=$work/root
daemon=""

# Whatever is mounted below the root, deepest first.
mounts() {
	awk -v r="$root" '$5 == r || index($5, r "/") == 1 { print $5 }' \
	    /proc/self/mountinfo | sort -r
}

stop_daemon() {
	[ -n "$daemon" ] || return 0
	kill "$daemon" 2>/dev/null || true
	wait "$daemon" 2>/dev/null || true
	daemon=""
}

cleanup() {
	rc=$?
	stop_daemon
	for m in $(mounts); do
		umount "$m" 2>/dev/null || umount -l "$m" || true
	done
	if [ -n "$(mounts)" ]; then
		echo "test-deb: still mounted below $root; left in place" >&2
		rc=1
	else
		rm -rf --one-file-system "$work"
	fi
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 1' INT TERM HUP

in_root() { chroot "$root" env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin \
    HOME=/root LC_ALL=C.UTF-8 DEBIAN_FRONTEND=noninteractive "$@"; }

# The mirror of the host's Debian sources, for debootstrap.
mirror() {
	if [ -n "${KSPEC_DEB_MIRROR:-}" ]; then
		echo "$KSPEC_DEB_MIRROR"
		return
	fi
	m=$(cat /etc/apt/sources.list.d/*.sources 2>/dev/null |
	    awk '/^URIs:/ { for (i = 2; i <= NF; i++) print $i }' |
	    grep -v security | grep '/debian/*$' | head -n 1)
	[ -n "$m" ] || m=$(awk '$1 == "deb" && $2 !~ /security/ { print $2 }' \
	    /etc/apt/sources.list 2>/dev/null | grep '/debian/*$' | head -n 1)
	echo "${m:-http://deb.debian.org/debian}"
}

# ---- the root: the cached debootstrap, unpacked afresh ----

mkdir -p "$cache/archives/partial"
tarball=$cache/$suite-minbase.tar
(
	flock 9
	if [ ! -f "$tarball" ]; then
		say "making the $suite minbase root (once; cached in $cache)"
		debootstrap --variant=minbase "$suite" "$work/bootstrap" \
		    "$(mirror)" >"$work/debootstrap.log" 2>&1 || {
			tail -n 20 "$work/debootstrap.log" >&2
			exit 1
		}
		tar -C "$work/bootstrap" -cf "$tarball.tmp" .
		mv "$tarball.tmp" "$tarball"
		rm -rf --one-file-system "$work/bootstrap"
	fi
) 9>"$cache/lock" || fail "debootstrap (above)"

mkdir "$root"
tar -C "$root" -xf "$tarball"
mount -t proc proc "$root/proc"
mount -t tmpfs -o mode=755,size=64m tmpfs "$root/run"
mount -t tmpfs -o mode=755,size=1m tmpfs "$root/dev"
for n in null:1:3 zero:1:5 full:1:7 random:1:8 urandom:1:9 tty:5:0; do
	mknod -m 666 "$root/dev/${n%%:*}" c "$(echo "$n" | cut -d: -f2)" \
	    "${n##*:}"
done
mkdir -m 1777 "$root/dev/shm"
mount --bind "$cache/archives" "$root/var/cache/apt/archives"
cp /etc/resolv.conf "$root/etc/resolv.conf"
# apt takes the host's Debian sources when they are in deb822 form
# (security updates with them), else debootstrap's.
if [ -f /etc/apt/sources.list.d/debian.sources ]; then
	cp /etc/apt/sources.list.d/debian.sources "$root/etc/apt/sources.list.d/"
	: >"$root/etc/apt/sources.list"
fi
# No maintainer script starts a service here.
printf '#!/bin/sh\nexit 101\n' >"$root/usr/sbin/policy-rc.d"
chmod 755 "$root/usr/sbin/policy-rc.d"
in_root apt-get update -q >"$work/apt.log" 2>&1 ||
    { cat "$work/apt.log" >&2; fail "apt-get update in the root"; }

# ---- the upgrade's packages: the tree again, version $v2 ----

say "building the packages again as $v2 (deploy/deb.sh)"
(cd "$top" && ./deploy/deb.sh --version "$v2" "$work/v2") \
    >"$work/build-v2.log" 2>&1 ||
    { tail -n 30 "$work/build-v2.log" >&2; fail "the $v2 build"; }

copy_debs() { # FROM VERSION TO
	mkdir -p "$root/$3"
	for p in $pkgs; do
		cp "$1/${p}_$2_"*.deb "$root/$3/" ||
		    fail "no ${p}_$2 package in $1"
	done
}
# The paths of the packages copied into the root's folder DIR, as seen
# from inside.
debs_in() { (cd "$root" && ls ."$1"/*.deb | sed 's|^\.||'); }
copy_debs "$debdir" "$v1" /tmp/debs-v1
copy_debs "$work/v2" "$v2" /tmp/debs-v2

# ---- install ----

# What the root holds, but for what changes by itself (apt's and dpkg's
# state, logs, /tmp) and the mounts.
snapshot() {
	(cd "$root" && find . -xdev \( -path ./var/cache/apt \
	    -o -path ./var/lib/apt -o -path ./var/lib/dpkg -o -path ./var/log \
	    -o -path ./tmp -o -path ./var/cache/debconf \
	    -o -path ./var/cache/ldconfig \) -prune -o -print) | sort
}

apt_install() { # what
	in_root apt-get install -y -q --no-install-recommends "$@" \
	    >>"$work/apt.log" 2>&1 || {
		tail -n 40 "$work/apt.log" >&2
		fail "apt-get install $*"
	}
}

say "installing $v1 with its dependencies"
# gcc and pkg-config for the program built against libkspec-dev.
# shellcheck disable=SC2046
apt_install gcc pkg-config $(debs_in /tmp/debs-v1)
for p in $pkgs; do
	[ "$(in_root dpkg-query -W -f '${Version} ${db:Status-Abbrev}' "$p")" \
	    = "$v1 ii " ] || fail "$p $v1 is not installed"
done
in_root getent passwd kspec >/dev/null || fail "no user kspec (sysusers)"
in_root getent group kspec >/dev/null || fail "no group kspec"
[ -L "$root/etc/systemd/system/sockets.target.wants/kspecd.socket" ] ||
    fail "kspecd.socket is not enabled"
[ ! -e "$root/etc/systemd/system/multi-user.target.wants/kspecd.service" ] ||
    fail "kspecd.service is enabled (its socket starts it)"

unit=$root/lib/systemd/system/kspecd.service
exec_start=$(sed -n 's/^ExecStart=//p' "$unit")
user=$(sed -n 's/^User=//p' "$unit")
group=$(sed -n 's/^Group=//p' "$unit")
listen=$(sed -n 's/^ListenStream=//p' "$root/lib/systemd/system/kspecd.socket")
[ -x "$root${exec_start%% *}" ] ||
    fail "the unit's ExecStart names ${exec_start%% *}, not in the package"

# As systemd would start the unit: its directories, user (with the
# environment systemd gives User=), umask and command line.
home=$(in_root getent passwd "$user" | cut -d: -f6)
start_daemon() {
	in_root install -d -m 0700 -o "$user" -g "$group" /var/cache/kspec
	in_root install -d -m 0750 -o "$user" -g "$group" /run/kspec
	# shellcheck disable=SC2086
	chroot --userspec="$user:$group" "$root" env -i \
	    PATH=/usr/bin:/bin INVOCATION_ID=0123456789abcdef0123456789abcdef \
	    HOME="$home" USER="$user" LOGNAME="$user" SHELL=/usr/sbin/nologin \
	    sh -c 'umask 0077; exec "$@"' sh $exec_start \
	    >>"$work/kspecd.log" 2>&1 &
	daemon=$!
	in_root kspec ping --wait 60 >/dev/null ||
	    { cat "$work/kspecd.log" >&2; fail "kspec ping"; }
}

# A gemv of the kernel library, compiled by libgccjit in the root; SOURCE
# is where the reply says it came from.
get_gemv() { # SOURCE
	in_root kspec get gemm --backend cpu --dtype f32 --shape M=1,N=64,K=64 \
	    -o /tmp/gemv.so --meta /tmp/gemv.json >/dev/null ||
	    { cat "$work/kspecd.log" >&2; fail "kspec get"; }
	grep -q "\"source\":\"$1\"" "$root/tmp/gemv.json" ||
	    fail "the gemv came from elsewhere than $1: $(cat "$root/tmp/gemv.json")"
}

start_daemon
say "kspecd $v1 answers on $listen: $(in_root kspec ping)"
[ -S "$root$listen" ] || fail "no socket at $listen (the socket unit's)"
get_gemv compiled
say "the packaged kspecd compiled a CPU kernel with libgccjit"
in_root useradd --no-create-home -G kspec alice
chroot --userspec=alice:alice "$root" env -i PATH=/usr/bin:/bin \
    kspec ping >/dev/null || fail "a member of group kspec was refused"
in_root python3 -c '
import kspec
with kspec.Client() as c:
    assert c.ping()["pong"] is True
    art = c.get("gemm", backend="cpu", dtype="f32",
                shape={"M": 1, "N": 64, "K": 64})
    assert art.meta["source"] == "memory", art.meta
assert len(kspec.quantize("q8_0", [1.0] * 32, k=32)) == 34
' || fail "the Python client"
cat >"$root/tmp/prog.c" <<'EOF'
#include <kspec.h>
#include <stdio.h>
int main(void)
{
	kspec_client_t *c;
	int rc = kspec_connect(NULL, &c);

	if (rc == 0)
		rc = kspec_ping(c);
	printf("%s %d\n", KSPEC_VERSION, rc);
	kspec_close(c);
	return rc != 0;
}
EOF
in_root sh -c 'cd /tmp && gcc -o prog prog.c $(pkg-config --cflags --libs kspec) &&
    ./prog && readelf -d prog | grep -q "NEEDED.*\[libkspec\.so\.0\]"' \
    >/dev/null || fail "a program built with pkg-config kspec"
say "Python client, libkspec-dev and a member of group kspec: ok"

# ---- upgrade ----

say "upgrading to $v2"
# shellcheck disable=SC2046
apt_install $(debs_in /tmp/debs-v2)
for p in $pkgs; do
	[ "$(in_root dpkg-query -W -f '${Version} ${db:Status-Abbrev}' "$p")" \
	    = "$v2 ii " ] || fail "$p is not upgraded to $v2"
done
# systemd restarts a running service after the upgrade: so here.
stop_daemon
start_daemon
get_gemv disk
in_root kspec ls | grep -q gemm || fail "kspec ls does not list the gemv"
say "after the upgrade, kspecd served the gemv from the store it kept"
stop_daemon

# ---- purge ----

# The packages' paths, and under merged /usr (a link /lib) the paths
# their /lib files have.
owned=$work/owned
for p in $pkgs; do
	in_root dpkg-query -L "$p"
done | if [ -L "$root/lib" ]; then sed 'p; s|^/lib/|/usr/lib/|'; else cat; fi |
    sort -u >"$owned"
before=$work/before
snapshot >"$before"
say "purging"
in_root apt-get purge -y -q $pkgs >>"$work/apt.log" 2>&1 ||
    { tail -n 40 "$work/apt.log" >&2; fail "apt-get purge"; }
for p in $pkgs; do
	st=$(in_root dpkg-query -W -f '${db:Status-Abbrev}' "$p" 2>/dev/null) ||
	    true
	case "$st" in
	"" | pn*) ;;
	*) fail "$p is '$st' after the purge, not purged" ;;
	esac
done
# Every file of the packages is gone (directories others share stay,
# /lib, a link to usr/lib, among them).
while read -r f; do
	if [ -e "$root$f" ] || [ -L "$root$f" ]; then
		[ -d "$root$f" ] && continue
		fail "$f is left after the purge"
	fi
done <"$owned"
for f in /var/cache/kspec /run/kspec /usr/lib/python3/dist-packages/kspec \
    /etc/systemd/system/sockets.target.wants/kspecd.socket; do
	[ ! -e "$root$f" ] && [ ! -L "$root$f" ] ||
	    fail "$f is left after the purge"
done
in_root getent passwd kspec >/dev/null ||
    fail "the purge removed the user kspec (Debian keeps system users)"
# Nothing else went: every path gone is one of the packages', the store's,
# the byte-compiled client's, or the units' enablement.
snapshot | comm -23 "$before" - >"$work/removed"
sed 's|^|.|' "$owned" | sort | comm -23 "$work/removed" - |
    grep -v -e '^\./var/cache/kspec\(/\|$\)' \
    -e '^\./usr/lib/python3/dist-packages/kspec/__pycache__\(/\|$\)' \
    -e '^\./etc/systemd/system/sockets\.target\.wants\(/kspecd\.socket\)\?$' \
    -e '^\./var/lib/systemd/deb-systemd-helper-enabled/.*kspecd\.' \
    -e '^\./var/lib/systemd/deb-systemd-helper-enabled/sockets\.target\.wants$' \
    >"$work/unexpected" || true
if [ -s "$work/unexpected" ]; then
	cat "$work/unexpected" >&2
	fail "the purge removed more than the packages' files (above)"
fi
say "purge removed the packages, /var/cache/kspec, /run/kspec and the" \
    "socket's enablement, kept the user kspec, and nothing else"
say "passed"
