# -*- coding: utf-8 -*-
"""A test stand-in connection: Ansible's ``local`` connection under another name, which refuses every command that
could reboot, power off or halt this machine.

``ansible.builtin.reboot`` refuses to run over the ``local`` connection ("would reboot the control node"), so the
watchdog's reboot step is tested over this one (``ansible_connection: standin_local``, with
``ANSIBLE_CONNECTION_PLUGINS`` pointing here; tests/support/standins.py). The reboot's command is then the
``host-reboot`` stand-in (its ``reboot_command``), and its ``boot_time_command`` reads the stand-ins' boot id file.
Should a role or a test ever get that wrong, and Ansible's own ``shutdown -r`` (or ``systemctl reboot``,
``poweroff``, ``halt``, ``init 0/6``, ...) reach this connection, it is not run: the command fails with a message
and this machine stays up.
"""

from __future__ import annotations

DOCUMENTATION = """
    name: standin_local
    short_description: Ansible's local connection that refuses to reboot, power off or halt (tests only)
    description:
        - Runs on the controller like C(local), under another transport name, and refuses every command that could
          reboot, power off, halt or kexec this machine.
    author: modelops.vllm maintainers (@modelops)
    options:
        become_success_timeout:
            type: int
            default: 10
            description: As the local connection's.
            vars:
                - name: ansible_local_become_success_timeout
        become_strip_preamble:
            type: bool
            default: true
            description: As the local connection's.
            vars:
                - name: ansible_local_become_strip_preamble
    extends_documentation_fragment:
        - connection_pipelining
"""

import re

from ansible.plugins.connection.local import Connection as LocalConnection
from ansible.utils.display import Display

display = Display()

# A command word that reboots or stops the machine, at the start of the command or after a separator or a path.
DANGEROUS = re.compile(
    r'(?:^|[\s;&|(`"\'/])(?:shutdown|reboot|poweroff|halt|kexec|telinit)(?=$|[\s;&|)`"\'])'
    r'|(?:^|[\s;&|(`"\'/])systemctl\s+(?:[^;&|]*\s)?(?:reboot|poweroff|halt|kexec|emergency|rescue|suspend|hibernate)'
    r'|(?:^|[\s;&|(`"\'/])init\s+[016sS]\b'
    r'|/proc/sysrq-trigger')


def refused(cmd):
    """Whether the command could reboot or stop this machine."""
    return bool(DANGEROUS.search(cmd or ''))


class Connection(LocalConnection):
    """``local``, refusing every command that could reboot or stop this machine."""

    transport = 'standin_local'

    def exec_command(self, cmd, in_data=None, sudoable=True):
        if refused(cmd):
            display.warning('standin_local: refused to run %r on this machine (a test stand-in never reboots it)' % cmd)
            return 1, b'', ('standin_local: refused: %s could reboot, power off or halt this machine' % cmd).encode()
        return super(Connection, self).exec_command(cmd, in_data=in_data, sudoable=sudoable)
