# -*- coding: utf-8 -*-
# Copyright (c) modelops.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r'''
name: _local_settings
short_description: Internal - The watchdog settings of a host, for the inventory of its local timer
version_added: 0.1.0
author: modelops.vllm maintainers (@modelops)
description:
  - Internal to the P(modelops.vllm.local_timer#role) role, not an interface of the collection; it may change or go in
    any release.
  - Takes a host name and C(hostvars), and returns the C(vllm_*) settings set for that host (in an inventory or with
    C(-e)) that the P(modelops.vllm.watchdog#role) role reads, the inventory conventions (C(vllm_url), C(vllm_api_key),
    ...), the role's options and the check's timings (C(vllm_check_interval), ...), and what the watchdog will
    restart with them. The role P(modelops.vllm.local_timer#role) writes them into the timer's inventory.
  - Not taken, the install sets them itself; C(vllm_watchdog_state_dir) and C(vllm_watchdog_become).
options:
  _input:
    description: The host's inventory name.
    type: str
    required: true
  hostvars:
    description: The C(hostvars) of the play.
    type: dict
    required: true
  user:
    description: The user the timer runs as (a C(command) restart method needs V(root)).
    type: str
    default: vllm-watchdog
'''

EXAMPLES = r'''
- name: What the timer's watchdog will read and restart
  ansible.builtin.set_fact:
    _local: "{{ inventory_hostname | modelops.vllm._local_settings(hostvars, user='vllm-watchdog') }}"
  no_log: true  # the settings may hold vllm_api_key
'''

RETURN = r'''
_value:
  description: The settings and what they restart.
  type: dict
  contains:
    settings:
      description: The settings, by name.
      type: dict
    units:
      description: The systemd units the watchdog restarts (C(vllm.service)).
      type: list
      elements: str
    methods:
      description: The restart methods used.
      type: list
      elements: str
    groups:
      description: The groups the timer's user must be a member of (C(docker) for the docker methods).
      type: list
      elements: str
    problems:
      description: What the install cannot give the timer's user, in sentences.
      type: list
      elements: str
'''

from ansible.errors import AnsibleFilterError

from ansible_collections.modelops.vllm.plugins.plugin_utils import _local
from ansible_collections.modelops.vllm.plugins.plugin_utils._hostvars import each_host


def local_settings(host, hostvars, user='vllm-watchdog'):
    if not isinstance(host, str):
        raise AnsibleFilterError('local_settings expects a host name, got %s' % type(host).__name__)
    variables = next(iter(each_host([host], hostvars, 'local_settings')))[1]
    values = _local.settings(variables)
    return dict(_local.restarts(values, user), settings=values)


class FilterModule(object):
    def filters(self):
        return {'_local_settings': local_settings}
