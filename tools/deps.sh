#!/bin/sh
# deps.sh -- installs the Debian/Ubuntu packages that flatserve's build and tests need (`make deps`).
#
# Silent and quick when nothing is missing, since `make test` runs it every
# time. Otherwise installs the missing packages as root or through
# passwordless sudo; failing both, prints the command to run and exits 1.
# shellcheck disable=SC2086 # $PACKAGES and $missing are word lists, split on purpose
set -eu

# libopenblas-dev is for bench/gemm_bench alone, whose baseline OpenBLAS is
# (`make` builds the benches too): the server, the tests and the tools do not
# link it, and the Docker image does not ship it.
PACKAGES="build-essential pkg-config libcriterion-dev libmicrohttpd-dev libcjson-dev
libprotobuf-c-dev protobuf-c-compiler libprotobuf-dev protobuf-compiler libonnx-dev zlib1g-dev libcurl4-openssl-dev
uthash-dev libbsd-dev prometheus libopenblas-dev clang libclang-rt-dev"

if ! command -v dpkg-query >/dev/null 2>&1 || ! command -v apt-get >/dev/null 2>&1; then
    echo "deps.sh: no dpkg/apt-get on this system; install the equivalents of these" \
        "Debian packages by hand:" $PACKAGES >&2
    exit 1
fi

# Names whose status ends in "installed" ("install ok installed", "hold ok
# installed"); dpkg-query exits 1 when some name is unknown, which only means
# that package is missing.
installed=" $(dpkg-query -W -f='${Package} ${Status}\n' $PACKAGES 2>/dev/null |
    awk '$NF == "installed" { printf "%s ", $1 }') "
missing=""
for p in $PACKAGES; do
    case "$installed" in
    *" $p "*) ;;
    *) missing="$missing $p" ;;
    esac
done
[ -z "$missing" ] && exit 0

install="DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends$missing"
echo "deps.sh: missing packages:$missing" >&2
if [ "$(id -u)" -eq 0 ]; then
    sudo=""
elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
    sudo="sudo"
else
    echo "deps.sh: not root and no passwordless sudo; run as root:" >&2
    echo "  apt-get update && $install" >&2
    exit 1
fi
$sudo apt-get update
$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $missing
