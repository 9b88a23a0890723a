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
# shellcheck source=scripts/lib/apt.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/apt.sh"
# The package never starts the system nginx service (it would take port 80): see lib/apt.sh.
apt_install nginx nginx-light || apt_install nginx nginx
# Stop the packaged service if something started it anyway (no systemd here, usually).
if [[ -f /run/nginx.pid ]] && kill -0 "$(cat /run/nginx.pid)" 2>/dev/null; then
    ${SUDO} nginx -s quit || true
fi
echo "nginx: $(/usr/sbin/nginx -v 2>&1)"
