#!/usr/bin/env python
# Copyright: modelops.vllm maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Offline stand-in for the upstream ``get-pip.py`` bootstrap script.

``ansible-test`` creates its virtual environments with ``--without-pip`` and
then bootstraps pip by running a ``get-pip.py`` that it downloads from a host
that is not reachable from our machines.  Before downloading, it looks for a
cached copy at ``~/.ansible/test/cache/get_pip_<version>.py``;
``scripts/ansible-test-sanity.sh`` copies this file there.

It is executed (via ``runpy``, as ``__main__``) by ansible-test's
``quiet_pip.py`` with the same command line the real script would get, e.g.::

    --disable-pip-version-check pip==24.2 --no-setuptools --no-wheel

What it does:

1. ``python -m ensurepip`` installs the pip wheel bundled with the interpreter
   (no network needed);
2. that pip then installs the requested packages (``pip==X.Y`` ...) through
   the normal package index and pip configuration of this machine
   (``/etc/pip.conf``, ``PIP_*`` variables, find-links, ...);
3. the get-pip-only options ``--no-setuptools`` / ``--no-wheel`` are honoured
   by removing what ensurepip may have added.
"""

from __future__ import annotations

import subprocess
import sys

GET_PIP_ONLY_OPTIONS = ('--no-setuptools', '--no-wheel')


def _installed(name: str) -> bool:
    """Return True if a distribution is installed in this interpreter."""
    probe = (
        'import importlib.metadata, sys\n'
        'try:\n'
        '    importlib.metadata.version(sys.argv[1])\n'
        'except importlib.metadata.PackageNotFoundError:\n'
        '    sys.exit(1)\n'
    )
    return subprocess.call([sys.executable, '-c', probe, name]) == 0


def main(argv: list[str]) -> int:
    """Bootstrap pip, then install what get-pip.py would have installed."""
    no_setuptools = '--no-setuptools' in argv
    no_wheel = '--no-wheel' in argv
    pip_args = [arg for arg in argv if arg not in GET_PIP_ONLY_OPTIONS]

    had_setuptools = _installed('setuptools')
    had_wheel = _installed('wheel')

    subprocess.check_call([sys.executable, '-m', 'ensurepip', '--upgrade', '--default-pip'])

    # get-pip.py semantics: install/upgrade pip (and friends) as requested.
    cmd = [sys.executable, '-m', 'pip', 'install', '--upgrade', '--force-reinstall', '--quiet']
    subprocess.check_call(cmd + pip_args)

    remove = []
    if no_setuptools and not had_setuptools and _installed('setuptools'):
        remove.append('setuptools')
    if no_wheel and not had_wheel and _installed('wheel'):
        remove.append('wheel')
    if remove:
        subprocess.check_call([sys.executable, '-m', 'pip', 'uninstall', '--yes', '--quiet'] + remove)

    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
