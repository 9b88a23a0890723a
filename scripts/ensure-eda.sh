#!/usr/bin/env bash
# Make sure Java 17 or newer is installed (Debian's openjdk-17-jre-headless), which ansible-rulebook
# needs (its rules engine, Drools, runs in a JVM through drools_jpy), for the Event-Driven Ansible
# tests and benchmark (tests/integration/test_eda.py, benchmarks/eda_latency.py,
# tests/support/eda.py). ansible-rulebook itself comes from PyPI with the venv
# (requirements/test.txt); Prometheus, Alertmanager and node_exporter from scripts/ensure-prometheus.sh.
# Idempotent: installs nothing when `java -version` (or $JAVA_HOME/bin/java) already says 17 or newer.
# Prints the Java version, and ansible-rulebook's view of it when the venv has ansible-rulebook.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PACKAGE=openjdk-17-jre-headless

java_bin() {
    if [[ -n ${JAVA_HOME:-} && -x ${JAVA_HOME}/bin/java ]]; then
        echo "${JAVA_HOME}/bin/java"
    else
        command -v java || true
    fi
}

# The feature version: "17" of 'openjdk version "17.0.15" ...', "1" of an old '"1.8.0_392"' (too old anyway).
java_major() {
    local bin
    bin="$(java_bin)"
    [[ -n ${bin} ]] || { echo 0; return; }
    "${bin}" -version 2>&1 | sed -n 's/.* version "\([0-9]*\).*/\1/p' | head -n 1 | grep . || echo 0
}

if [[ $(java_major) -lt 17 ]]; then
    echo "eda: ansible-rulebook needs Java 17+"
    # shellcheck source=scripts/lib/apt.sh
    source "$(dirname "${BASH_SOURCE[0]}")/lib/apt.sh"
    apt_install eda "${PACKAGE}"
    # A JAVA_HOME that points at an older Java would still win; the packaged one is on PATH now.
    if [[ $(java_major) -lt 17 ]]; then
        echo "ERROR: ${PACKAGE} was installed but Java 17+ is still not the one found" \
             "(JAVA_HOME=${JAVA_HOME:-unset}, java=$(command -v java || echo none))" >&2
        exit 1
    fi
fi

echo "java: $("$(java_bin)" -version 2>&1 | head -n 1)"
rulebook="${repo}/.venv/bin/ansible-rulebook"
if [[ -x ${rulebook} ]]; then
    "${rulebook}" --version 2>/dev/null | sed -n 's/^ *\(ansible-rulebook \[.*\]\|Java home = .*\|Java version = .*\)$/ansible-rulebook: \1/p'
else
    echo "ansible-rulebook: not in ${repo}/.venv yet (make venv installs it from requirements/test.txt)"
fi
