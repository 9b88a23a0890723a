#!/usr/bin/env bash
# Make sure a real nginx binary is installed (Debian's nginx-light, else nginx), for the
# integration tests that put nginx in front of vLLM backends (tests/harness/nginx.py).
# Idempotent: does nothing when nginx is already on PATH or in /usr/sbin.
# The harness runs nginx with its own prefix and config in a temp dir; the packaged service is
# never started or configured here (policy-rc.d keeps apt from starting it).
set -euo pipefail

if command -v nginx >/dev/null 2>&1 || [[ -x /usr/sbin/nginx ]]; then
    echo "nginx: $( (command -v nginx || echo /usr/sbin/nginx) ) already installed"
    exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
    echo "ERROR: nginx is not installed and apt-get is not available; install nginx by hand" >&2
    exit 1
fi
SUDO=""
if [[ $(id -u) -ne 0 ]]; then
    SUDO="sudo"
fi

# Do not let the package start the system nginx service (it would take port 80).
policy=/usr/sbin/policy-rc.d
made_policy=0
if [[ ! -e ${policy} ]]; then
    printf '#!/bin/sh\nexit 101\n' | ${SUDO} tee "${policy}" >/dev/null
    ${SUDO} chmod 0755 "${policy}"
    made_policy=1
fi
cleanup() { if [[ ${made_policy} -eq 1 ]]; then ${SUDO} rm -f "${policy}"; fi; }
trap cleanup EXIT

install() {
    DEBIAN_FRONTEND=noninteractive ${SUDO} apt-get install -y --no-install-recommends "$@" >/dev/null
}

echo "nginx: installing Debian's nginx-light"
if ! install nginx-light 2>/dev/null && ! install nginx 2>/dev/null; then
    echo "nginx: package not found; apt-get update first"
    ${SUDO} apt-get update -qq >/dev/null
    install nginx-light || install nginx
fi
# Stop the packaged service if something started it anyway (no systemd here, usually).
if [[ -f /run/nginx.pid ]] && kill -0 "$(cat /run/nginx.pid)" 2>/dev/null; then
    ${SUDO} nginx -s quit || true
fi
echo "nginx: $(/usr/sbin/nginx -v 2>&1)"
