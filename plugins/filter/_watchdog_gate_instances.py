# -*- coding: utf-8 -*-
# Copyright (c) modelops.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r'''
name: _watchdog_gate_instances
short_description: Internal - A host's watchdog instances as the O(modelops.vllm.watchdog_gate#module:instances) of its gate
version_added: 1.0.0
author: modelops.vllm maintainers (@modelops)
description:
  - Internal to the P(modelops.vllm.watchdog#role) role, not an interface of the collection; it may change or go in any
    release.
  - Takes the merged instances of one host and returns them with the keys M(modelops.vllm.watchdog_gate) takes (the
    gate attaches their verdicts itself, from O(modelops.vllm.watchdog_gate#module:results_file),
    O(modelops.vllm.watchdog_gate#module:check_results) or O(modelops.vllm.watchdog_gate#module:check_error)).
options:
  _input:
    description: The host's instances (the role's C(_vllm_watchdog_plan.instances)).
    type: list
    elements: dict
    required: true
'''

EXAMPLES = r'''
- name: Decide
  modelops.vllm.watchdog_gate:
    state_dir: /var/lib/vllm-watchdog
    instances: "{{ _vllm_watchdog_plan.instances | modelops.vllm._watchdog_gate_instances }}"
'''

RETURN = r'''
_value:
  description: One dict per instance.
  type: list
  elements: dict
'''

from ansible.errors import AnsibleFilterError

from ansible_collections.modelops.vllm.plugins.module_utils._urls import display_url

# The api_key goes to the gate (a no_log option) so that it masks the key wherever it appears in what it keeps.
KEYS = ('name', 'kind', 'restart_method', 'service', 'compose_project_dir', 'restart_command', 'status_command',
        'logs_command', 'api_key', 'url_is_default', 'assume_url_is_service')
FLAGS = ('url_is_default', 'assume_url_is_service')


def watchdog_gate_instances(instances):
    if not isinstance(instances, (list, tuple)):
        raise AnsibleFilterError('watchdog_gate_instances expects a list of instances')
    out = []
    for instance in instances:
        if not isinstance(instance, dict) or not isinstance(instance.get('name'), str) or not instance['name']:
            raise AnsibleFilterError('watchdog_gate_instances: every instance is a dict with a name, got %s'
                                     % (type(instance).__name__ if not isinstance(instance, dict) else 'one without'))
        item = dict((key, instance[key]) for key in KEYS if instance.get(key) not in (None, '', [], False))
        for flag in FLAGS:
            if flag in item:
                item[flag] = str(item[flag]).lower() in ('true', '1', 'yes', 'on')
        item['url'] = display_url(instance.get('url'))
        out.append(item)
    return out


class FilterModule(object):
    def filters(self):
        return {'_watchdog_gate_instances': watchdog_gate_instances}
