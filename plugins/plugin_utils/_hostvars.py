# -*- coding: utf-8 -*-
# Copyright (c) modelops.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The variables of each host a filter is given, read from ``hostvars`` once, the same way for every filter.

Private to this collection; controller side (filters). A host that ``hostvars`` does not have, or whose
variables are not a mapping, is a filter error that names the filter and the host, never a Python traceback.
"""

from __future__ import annotations

from collections.abc import Mapping

from ansible.errors import AnsibleFilterError


def each_host(hosts, hostvars, who):
    """(host, its variables) for every host of ``hosts``; ``who`` (the filter's name) leads every error."""
    if not isinstance(hosts, (list, tuple)):
        raise AnsibleFilterError('%s expects a list of host names' % who)
    for host in hosts:
        try:
            variables = hostvars[host]
        except (KeyError, TypeError):
            raise AnsibleFilterError('%s: %s is not in hostvars' % (who, host))
        if not isinstance(variables, Mapping):
            raise AnsibleFilterError('%s: the hostvars of %s are not a mapping' % (who, host))
        yield host, variables
