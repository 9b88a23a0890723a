# -*- coding: utf-8 -*-
# Copyright (c) modelops.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r'''
name: _check_by_host
short_description: Internal - The verdicts of a fleet check of M(modelops.vllm.health), grouped by host
version_added: 1.0.0
author: modelops.vllm maintainers (@modelops)
description:
  - Internal to the playbook C(modelops.vllm.fleet_check), not an interface of the collection; it may change or go in
    any release.
  - Takes the C(servers) that M(modelops.vllm.health) returned for a fleet and returns them per host, in their order.
  - The host of a server is its name up to the first C(/) (a server is named after its host, or C(<host>/<instance>),
    as the P(modelops.vllm.vllm_servers#filter) filter names them).
options:
  _input:
    description: The verdicts, each a dict with C(name).
    type: list
    elements: dict
    required: true
'''

EXAMPLES = r'''
- name: Each host's verdicts as facts of that host
  ansible.builtin.set_fact:
    vllm_checks: "{{ dict(item.value | map(attribute='name') | zip(item.value)) }}"
  loop: "{{ fleet.servers | modelops.vllm._check_by_host | dict2items }}"
  delegate_to: "{{ item.key }}"
  delegate_facts: true
  run_once: true
'''

RETURN = r'''
_value:
  description: Per host name, its verdicts, in the order of the input.
  type: dict
'''

from ansible.errors import AnsibleFilterError


def check_by_host(results):
    if not isinstance(results, (list, tuple)):
        raise AnsibleFilterError('check_by_host expects a list of verdicts, got %s' % type(results).__name__)
    out = {}
    for result in results:
        if not isinstance(result, dict) or 'name' not in result:
            raise AnsibleFilterError('check_by_host expects verdicts with a name, got %r' % (result,))
        out.setdefault(str(result['name']).partition('/')[0], []).append(result)
    return out


class FilterModule(object):
    def filters(self):
        return {'_check_by_host': check_by_host}
