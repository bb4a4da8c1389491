#!/usr/bin/env bash
# `apt-install.sh CALLER PACKAGE...`: install Debian packages (no recommends, quietly) as root,
# or through sudo, for the install-*.sh scripts. The package lists may be missing or stale (a
# fresh container): when the first try fails, they are updated once and it is tried again.
# CALLER names the script in what is printed.
set -euo pipefail

caller="$1"
shift
as_root=()
if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null; then
        as_root=(sudo)
    else
        echo "${caller}: installing $* needs root: run 'sudo $0 ${caller} $*' once, or 'apt-get install $*'." >&2
        exit 1
    fi
fi

export DEBIAN_FRONTEND=noninteractive
install_packages() {
    "${as_root[@]}" apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}
if ! install_packages "$@" 2>/dev/null; then
    "${as_root[@]}" apt-get update -qq
    install_packages "$@"
fi
