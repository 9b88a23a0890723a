#!/usr/bin/env bash
# Make sure the command-line tools that the docs' commands use are installed, from Debian's packages:
#   jq                (docs/schedule.md reads the watchdog's verdict history with it; docs/adhoc.md, awx.md)
#   systemd-analyze   (tests/integration/test_try.py verifies docs/schedule.md's systemd units with it)
#   pandoc            (scripts/docs-rst.sh: the guides as the docs site's pages; tests/integration/test_publish.py)
#   scripts/ensure-tools.sh [TOOL ...]    (default: all of them)
# Idempotent: installs only what is missing. The systemd package is installed for systemd-analyze
# only: nothing is started or enabled (policy-rc.d keeps apt from starting services), and on a
# machine without systemd as PID 1 it stays inert.
set -euo pipefail

declare -A package=([jq]=jq [systemd-analyze]=systemd [pandoc]=pandoc)
tools=("$@")
if [[ ${#tools[@]} -eq 0 ]]; then
    tools=(jq systemd-analyze pandoc)
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
# shellcheck source=scripts/lib/apt.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/apt.sh"
apt_install tools "${missing[@]}"
for tool in "${tools[@]}"; do
    command -v "${tool}" >/dev/null 2>&1 || { echo "ERROR: ${tool} still missing" >&2; exit 1; }
done
