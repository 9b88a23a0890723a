#!/usr/bin/env bash
# Make sure the command-line tools that the docs' commands use are installed, from Debian's packages:
#   jq                (docs/schedule.md reads the watchdog's verdict history with it; docs/adhoc.md, awx.md)
#   systemd-analyze   (tests/integration/test_try.py verifies docs/schedule.md's systemd units with it)
#   scripts/ensure-tools.sh [TOOL ...]    (default: both)
# Idempotent: installs only what is missing. The systemd package is installed for systemd-analyze
# only: nothing is started or enabled (policy-rc.d keeps apt from starting services), and on a
# machine without systemd as PID 1 it stays inert.
set -euo pipefail

declare -A package=([jq]=jq [systemd-analyze]=systemd)
tools=("$@")
if [[ ${#tools[@]} -eq 0 ]]; then
    tools=(jq systemd-analyze)
fi
missing=()
for tool in "${tools[@]}"; do
    if [[ -z ${package[${tool}]:-} ]]; then
        echo "ERROR: unknown tool ${tool} (known: ${!package[*]})" >&2
        exit 2
    fi
    if command -v "${tool}" >/dev/null 2>&1; then
        echo "tools: ${tool}: $(command -v "${tool}")"
    else
        missing+=("${package[${tool}]}")
    fi
done
if [[ ${#missing[@]} -eq 0 ]]; then
    exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
    echo "ERROR: ${missing[*]} missing and apt-get is not available; install them by hand" >&2
    exit 1
fi
SUDO=""
if [[ $(id -u) -ne 0 ]]; then
    SUDO="sudo"
fi
policy=/usr/sbin/policy-rc.d
made_policy=0
if [[ ! -e ${policy} ]]; then
    printf '#!/bin/sh\nexit 101\n' | ${SUDO} tee "${policy}" >/dev/null
    ${SUDO} chmod 0755 "${policy}"
    made_policy=1
fi
cleanup() { if [[ ${made_policy} -eq 1 ]]; then ${SUDO} rm -f "${policy}"; fi; }
trap cleanup EXIT
echo "tools: installing Debian's ${missing[*]}"
install() { DEBIAN_FRONTEND=noninteractive ${SUDO} apt-get -o DPkg::Lock::Timeout=600 install -y --no-install-recommends "$@" >/dev/null; }
if ! install "${missing[@]}" 2>/dev/null; then
    ${SUDO} apt-get -o DPkg::Lock::Timeout=600 update -qq >/dev/null
    install "${missing[@]}"
fi
for tool in "${tools[@]}"; do
    command -v "${tool}" >/dev/null 2>&1 || { echo "ERROR: ${tool} still missing" >&2; exit 1; }
done
