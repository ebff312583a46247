#!/bin/sh
# deps.sh -- Node.js and npm for `make deploy-check`, when the machine has
# none: Debian's packages, installed as root or through passwordless sudo;
# failing both, prints the command and exits 1. Silent when both are there.
set -eu
command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1 && exit 0
install="DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends nodejs npm"
echo "deploy/check/deps.sh: node or npm missing; installing Debian's nodejs and npm" >&2
if [ "$(id -u)" -eq 0 ]; then
    sudo=""
elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
    sudo="sudo"
else
    echo "deploy/check/deps.sh: not root and no passwordless sudo; run as root:" >&2
    echo "  apt-get update && $install" >&2
    exit 1
fi
$sudo apt-get update
$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends nodejs npm
