# -*- coding: utf-8 -*-
# Copyright (c) modelops.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r'''
name: _rollout_problems
short_description: Internal - What is wrong with the settings of the rollout role
version_added: 1.0.0
author: modelops.vllm maintainers (@modelops)
description:
  - Internal to the P(modelops.vllm.rollout#role) role, not an interface of the collection; it may change or go in any
    release.
  - Takes the settings of the P(modelops.vllm.rollout#role) role, each the role's variable without its C(vllm_rollout_)
    prefix, and returns what is wrong with them, one sentence each; an empty list when nothing is. The role's preflight
    asserts with it on every host before the first one is touched.
  - The restart method and what it needs come from the collection's one table of restart methods, the one
    M(modelops.vllm.restart) and M(modelops.vllm.watchdog_gate) run; each number's range from the collection's one
    catalogue of settings, the one the modules check their options against.
options:
  _input:
    description:
      - The settings. C(method), C(service), C(compose_project_dir) and C(command) are the restart method's; the numbers
        looked at are C(interval), C(probe_timeout), C(metrics_timeout), C(freeze_limit), C(freeze_wait),
        C(command_timeout), C(ready_timeout), C(ready_delay), C(lock_timeout), C(idle_timeout), C(idle_delay) and
        C(verify_retries). C(ranks) and C(launch) are those of an instance across hosts (docs/multinode.md), checked as the
        watchdog checks them. A key that is not given is not looked at.
    type: dict
    required: true
  head:
    description: The host the settings are of (the head of an instance across hosts, which its ranks must not be).
    type: str
  inventory:
    description: The inventory's hosts (C(groups.all)), of which every rank's host must be one.
    type: list
    elements: str
  upgrade:
    description: Check what an upgrade needs too (for example the C(command) that recreates a plain container).
    type: bool
    default: false
'''

EXAMPLES = r'''
- name: The rollout's settings make sense
  ansible.builtin.assert:
    that: problems | length == 0
    fail_msg: "{{ problems | join('; ') }}"
  vars:
    problems: >-
      {{ {'method': 'compose', 'service': 'vllm', 'interval': 5}
         | modelops.vllm._rollout_problems(upgrade=true) }}
'''

RETURN = r'''
_value:
  description: What is wrong, one sentence each (the method's words, then each number named by its variable).
  type: list
  elements: str
'''

from ansible.errors import AnsibleFilterError

from ansible_collections.modelops.vllm.plugins.module_utils import _ranks
from ansible_collections.modelops.vllm.plugins.module_utils._service import problems
from ansible_collections.modelops.vllm.plugins.module_utils._settings import ROLLOUT_LIMITS
from ansible_collections.modelops.vllm.plugins.module_utils._types import range_problems


def rollout_problems(settings, upgrade=False, head=None, inventory=None):
    if not isinstance(settings, dict):
        raise AnsibleFilterError('rollout_problems expects a dict of settings, got %s' % type(settings).__name__)
    method = problems(settings.get('method'), settings.get('service'), settings.get('compose_project_dir'),
                      settings.get('command'), upgrade=upgrade)
    instance = {'ranks': settings.get('ranks'), 'launch': settings.get('launch'), 'restart_method': settings.get('method'),
                'service': settings.get('service'), 'compose_project_dir': settings.get('compose_project_dir')}
    ranks = ['vllm_rollout_ranks: %s' % one for one in _ranks.problems(instance, head, inventory)]
    if upgrade and settings.get('ranks') and not ranks:
        ranks.append('an upgrade of an instance across hosts (vllm_rollout_ranks) is not supported yet: only a restart')
    return method + ranks + range_problems(settings, ROLLOUT_LIMITS, name='vllm_rollout_%s')


class FilterModule(object):
    def filters(self):
        return {'_rollout_problems': rollout_problems}
