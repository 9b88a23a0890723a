# -*- coding: utf-8 -*-
# Copyright (c) modelops.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r'''
name: restart_method_problems
short_description: What is wrong with the settings of a restart method
version_added: 1.0.0
author: modelops.vllm maintainers (@modelops)
description:
  - Takes a restart method (as M(modelops.vllm.restart) takes it in O(modelops.vllm.restart#module:method)) and its
    settings, and returns what is wrong with them, one sentence each; an empty list when nothing is.
  - The methods and what each needs come from the collection's one table of restart methods, the one
    M(modelops.vllm.restart) and M(modelops.vllm.watchdog_gate) run. The P(modelops.vllm.rollout#role) role's preflight
    asserts with it.
options:
  _input:
    description: The restart method.
    type: str
    required: true
  service:
    description: The systemd unit, the container name, or the compose service.
    type: str
  compose_project_dir:
    description: The compose project directory.
    type: str
  command:
    description: The restart command, an argv list.
    type: list
    elements: str
  upgrade:
    description: Check what an upgrade needs too (for example the O(command) that recreates a plain container).
    type: bool
    default: false
'''

EXAMPLES = r'''
- name: The settings of the restart make sense
  ansible.builtin.assert:
    that:
      - vllm_rollout_method | modelops.vllm.restart_method_problems(vllm_rollout_service, vllm_rollout_compose_project_dir,
        vllm_rollout_command, upgrade=true) | length == 0
'''

RETURN = r'''
_value:
  description: What is wrong, for example V(restart_method compose needs compose_project_dir); empty when nothing is.
  type: list
  elements: str
'''

from ansible_collections.modelops.vllm.plugins.module_utils._service import problems


def restart_method_problems(method, service=None, compose_project_dir=None, command=None, upgrade=False):
    return problems(method, service, compose_project_dir, command, upgrade=bool(upgrade))


class FilterModule(object):
    def filters(self):
        return {'restart_method_problems': restart_method_problems}
