# -*- coding: utf-8 -*-
# Copyright (c) modelops.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r'''
name: watchdog_servers
short_description: Every vLLM instance of the watchdog's hosts, as the servers of one controller-side check
version_added: 1.0.0
author: modelops.vllm maintainers (@modelops)
description:
  - Takes host names and returns one server per host and instance for M(modelops.vllm.health)'s
    O(modelops.vllm.health#module:servers), from each host's C(_vllm_watchdog_plan.instances) (the instances
    the P(modelops.vllm.watchdog#role) role has merged for it in its preflight). Each server is named C(<host>/<instance>).
  - Used by the role when C(vllm_watchdog_check_on_controller) is true, so that one module run checks the whole play.
options:
  _input:
    description: Host names, for example C(ansible_play_hosts).
    type: list
    elements: str
    required: true
  hostvars:
    description: The C(hostvars) of the play.
    type: dict
    required: true
'''

EXAMPLES = r'''
- name: Check every instance of the play at once
  modelops.vllm.health:
    servers: "{{ ansible_play_hosts | modelops.vllm.watchdog_servers(hostvars) }}"
  run_once: true
  delegate_to: localhost
'''

RETURN = r'''
_value:
  description: One dict per server, with C(name), C(url), C(kind) and, when set, C(api_key) and C(model).
  type: list
  elements: dict
'''

from collections.abc import Mapping

from ansible.errors import AnsibleFilterError

from ansible_collections.modelops.vllm.plugins.plugin_utils._hostvars import each_host

KEYS = ('url', 'kind', 'api_key', 'model')


def watchdog_servers(hosts, hostvars):
    servers = []
    for host, variables in each_host(hosts, hostvars, 'watchdog_servers'):
        plan = variables.get('_vllm_watchdog_plan')
        instances = (plan.get('instances') if isinstance(plan, Mapping) else None) or []
        for instance in instances:
            if not isinstance(instance, Mapping) or not instance.get('name'):
                raise AnsibleFilterError('watchdog_servers: every instance of %s is a dict with a name' % host)
            server = {'name': '%s/%s' % (host, instance['name'])}
            server.update((key, instance[key]) for key in KEYS if instance.get(key))
            servers.append(server)
    return servers


class FilterModule(object):
    def filters(self):
        return {'watchdog_servers': watchdog_servers}
