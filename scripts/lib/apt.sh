# shellcheck shell=bash
# Debian packages for the tools the tests and docs use, installed one way by every scripts/ensure-*.sh
# (source it: `source "$(dirname "${BASH_SOURCE[0]}")/lib/apt.sh"`):
#   apt_install LABEL PACKAGE...   install without starting any service (a policy-rc.d that says no is
#                                  in place during the install, unless one is there already); wait up
#                                  to 10 minutes for apt's lock; when the install fails, apt-get update
#                                  and try once more. Returns apt-get's status.
# Without apt-get it stops the script with an error that says to install the packages by hand.

SUDO=""
if [[ $(id -u) -ne 0 ]]; then
    SUDO="sudo"
fi
_apt_policy=/usr/sbin/policy-rc.d
_apt_made_policy=0

_apt_cleanup() {
    if [[ ${_apt_made_policy} -eq 1 ]]; then
        ${SUDO} rm -f "${_apt_policy}"
        _apt_made_policy=0
    fi
}

_apt_get() {
    DEBIAN_FRONTEND=noninteractive ${SUDO} apt-get -o DPkg::Lock::Timeout=600 "$@" >/dev/null
}

apt_install() {
    local label=$1
    shift
    if ! command -v apt-get >/dev/null 2>&1; then
        echo "ERROR: $* not installed and apt-get is not available; install them by hand" >&2
        exit 1
    fi
    if [[ ! -e ${_apt_policy} ]]; then
        printf '#!/bin/sh\nexit 101\n' | ${SUDO} tee "${_apt_policy}" >/dev/null
        ${SUDO} chmod 0755 "${_apt_policy}"
        _apt_made_policy=1
        trap _apt_cleanup EXIT
    fi
    echo "${label}: installing Debian's $*"
    local rc=0
    if ! _apt_get install -y --no-install-recommends "$@" 2>/dev/null; then
        echo "${label}: install failed; apt-get update first"
        { _apt_get update -qq && _apt_get install -y --no-install-recommends "$@"; } || rc=$?
    fi
    _apt_cleanup
    return "${rc}"
}
