# -*- coding: utf-8 -*-
# Copyright (c) modelops.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r'''
name: watchdog_instances
short_description: The instances of the modelops.vllm.watchdog role, each with its settings filled in
version_added: 0.1.0
author: modelops.vllm maintainers (@modelops)
description:
  - Takes C(vllm_watchdog_instances) and the single-instance settings, and returns one dict per instance, the
    settings overridden by the instance's own keys. An empty list gives one instance made of the settings.
  - With O(keys), only those keys are kept (for example the ones M(modelops.vllm.health) takes in O(modelops.vllm.health#module:servers)).
options:
  _input:
    description: The instances.
    type: list
    elements: dict
    required: true
  base:
    description: The settings every instance starts from.
    type: dict
    required: true
  keys:
    description: Keep only these keys.
    type: list
    elements: str
'''

EXAMPLES = r'''
- name: Merge
  ansible.builtin.debug:
    msg: "{{ [{'name': 'embed', 'url': 'http://127.0.0.1:8001'}] | modelops.vllm.watchdog_instances({'service': 'vllm'}) }}"
'''

RETURN = r'''
_value:
  description: One dict per instance.
  type: list
  elements: dict
'''

from ansible.errors import AnsibleFilterError


def watchdog_instances(instances, base, keys=None):
    if not isinstance(instances, (list, tuple)) or not isinstance(base, dict):
        raise AnsibleFilterError('watchdog_instances expects a list of dicts and a dict of settings')
    merged = []
    for item in instances or [{}]:
        if not isinstance(item, dict):
            raise AnsibleFilterError('every instance must be a dict, got %s' % type(item).__name__)
        one = dict(base)
        one.update(item)
        if keys:
            one = dict((k, one[k]) for k in keys if k in one)
        merged.append(one)
    names = [m.get('name') for m in merged]
    if 'name' in (keys or ['name']) and len(set(names)) != len(names):
        raise AnsibleFilterError('instance names must be unique on a host: %s' % ', '.join(str(n) for n in names))
    return merged


class FilterModule(object):
    def filters(self):
        return {'watchdog_instances': watchdog_instances}
