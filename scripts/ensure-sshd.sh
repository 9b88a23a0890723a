#!/usr/bin/env bash
# Make sure a real OpenSSH server and client are installed (Debian's openssh-server and
# openssh-client), for the tests and benchmarks that reach a fleet of loopback hosts over real SSH
# (tests/support/sshfleet.py).
# Idempotent: does nothing when /usr/sbin/sshd, ssh and ssh-keygen are already there.
# The harness runs sshd as its own child process, with its own config, host keys and port in a
# temp dir; the packaged service is never started or configured here (policy-rc.d keeps apt from
# starting it; there is no systemd on this machine anyway).
set -euo pipefail

have_all() {
    [[ -x /usr/sbin/sshd ]] && command -v ssh >/dev/null 2>&1 && command -v ssh-keygen >/dev/null 2>&1
}

if have_all; then
    echo "sshd: $(/usr/sbin/sshd -V 2>&1 | head -n 1 || true) already installed"
    exit 0
fi
# shellcheck source=scripts/lib/apt.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/apt.sh"
# The package never starts the system ssh service (it would take port 22): see lib/apt.sh.
apt_install sshd openssh-server openssh-client
# Stop the packaged service if something started it anyway (no systemd here, usually).
if [[ -f /run/sshd.pid ]] && kill -0 "$(cat /run/sshd.pid)" 2>/dev/null; then
    ${SUDO} kill "$(cat /run/sshd.pid)" || true
fi
if ! have_all; then
    echo "ERROR: openssh-server was installed but /usr/sbin/sshd, ssh or ssh-keygen is missing" >&2
    exit 1
fi
echo "sshd: $(/usr/sbin/sshd -V 2>&1 | head -n 1 || true)"
