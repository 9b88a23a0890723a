#!/usr/bin/env bash
# Make sure real Prometheus, promtool, Alertmanager and node_exporter binaries are installed
# (Debian's prometheus, prometheus-alertmanager and prometheus-node-exporter), for the rule tests
# and the end-to-end test of extensions/prometheus/ (tests/integration/test_prometheus.py,
# tests/support/prometheus.py).
# Idempotent: installs nothing when every binary is already there. The packaged services are
# never started (policy-rc.d keeps apt from starting them; there is no systemd here anyway):
# the tests run each binary with their own config, data dir and loopback port in a temp dir.
# Prints the versions.
set -euo pipefail

# Debian package -> the binary the tests use.
declare -A BINARY=(
    [prometheus]=/usr/bin/prometheus
    [prometheus-alertmanager]=/usr/bin/prometheus-alertmanager
    [prometheus-node-exporter]=/usr/bin/prometheus-node-exporter
)
PROMTOOL=/usr/bin/promtool

missing=()
for pkg in prometheus prometheus-alertmanager prometheus-node-exporter; do
    if [[ ! -x ${BINARY[${pkg}]} ]]; then
        missing+=("${pkg}")
    fi
done
if [[ ! -x ${PROMTOOL} ]] && [[ ! " ${missing[*]} " == *" prometheus "* ]]; then
    missing+=(prometheus)
fi

if [[ ${#missing[@]} -gt 0 ]]; then
    # The packages never start their services (Prometheus would take :9090, Alertmanager :9093,
    # node_exporter :9100): see lib/apt.sh.
    # shellcheck source=scripts/lib/apt.sh
    source "$(dirname "${BASH_SOURCE[0]}")/lib/apt.sh"
    apt_install prometheus "${missing[@]}"

    # Stop a packaged daemon if something started it anyway (a machine with an init system).
    for name in prometheus prometheus-alertmanager prometheus-node-exporter; do
        pidfile=/run/${name}.pid
        if [[ -f ${pidfile} ]] && kill -0 "$(cat "${pidfile}")" 2>/dev/null; then
            ${SUDO} kill "$(cat "${pidfile}")" || true
        fi
    done
fi

for bin in "${BINARY[prometheus]}" "${PROMTOOL}" "${BINARY[prometheus-alertmanager]}" \
        "${BINARY[prometheus-node-exporter]}"; do
    if [[ ! -x ${bin} ]]; then
        echo "ERROR: ${bin} is missing after the install" >&2
        exit 1
    fi
done

version() { "$@" --version 2>&1 | head -n 1; }
echo "prometheus: $(version "${BINARY[prometheus]}")"
echo "promtool: $(version "${PROMTOOL}")"
echo "alertmanager: $(version "${BINARY[prometheus-alertmanager]}")"
echo "node_exporter: $(version "${BINARY[prometheus-node-exporter]}")"
