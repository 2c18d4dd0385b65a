#!/bin/sh
# Rebuilds sqlite3.c and sqlite3.h here from Debian's source package, the same source and
# patches as the libsqlite3 debug builds link (README.md). Needs the deb-src archive and tclsh;
# leaves the machine's apt configuration alone (a private sources list and lists directory).
#
#     Vendor/SQLite/regenerate.sh [VERSION]     # default: the one README.md names
set -eu
here=$(cd "$(dirname "$0")" && pwd)
version=${1:-3.40.1-2+deb12u2}
work=$(mktemp -d /tmp/wk-sqlite-XXXXXX)
trap 'rm -rf "$work"' EXIT
chmod 755 "$work"   # apt fetches as _apt

mkdir -p "$work/lists/partial"
cat > "$work/sources.list" <<SOURCES
deb-src [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian bookworm main
deb-src [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian-security bookworm-security main
SOURCES
apt_private="-o Dir::Etc::SourceList=$work/sources.list -o Dir::Etc::SourceParts=- -o Dir::State::Lists=$work/lists"
# shellcheck disable=SC2086
apt-get -q $apt_private update >/dev/null
# shellcheck disable=SC2086
(cd "$work" && apt-get -q $apt_private source --download-only "sqlite3=$version" >/dev/null 2>&1)
# dpkg-source checks the .dsc's checksums against the archive's signed Sources and applies
# Debian's patches (debian/patches/series).
(cd "$work" && dpkg-source -x ./*.dsc src >/dev/null)
mkdir "$work/build"
(cd "$work/build" && ../src/configure >/dev/null && make sqlite3.c >/dev/null)
cp "$work/build/sqlite3.c" "$work/build/sqlite3.h" "$here/"
echo "regenerated from sqlite3 $version:"
(cd "$here" && sha256sum sqlite3.c sqlite3.h)
