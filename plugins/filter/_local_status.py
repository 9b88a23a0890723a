# -*- coding: utf-8 -*-
# Copyright (c) modelops.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r'''
name: _local_status
short_description: Internal - The watchdog's local timer and its last run, in one line
version_added: 0.1.0
author: modelops.vllm maintainers (@modelops)
description:
  - Internal to the P(modelops.vllm.local_timer#role) role and the playbook C(modelops.vllm.local_status), not an
    interface of the collection; it may change or go in any release.
  - Takes what C(systemctl show --timestamp=unix) printed for the timer and for its service, and says in one line
    whether the timer is installed, enabled and active, when it ran last and with what result, and when it runs next.
    Used by the role P(modelops.vllm.local_timer#role) (C(modelops.vllm.local_status)).
options:
  _input:
    description: The output of C(systemctl show <unit>.timer).
    type: str
    required: true
  service:
    description: The output of C(systemctl show <unit>.service).
    type: str
    required: true
  unit:
    description: The units' name without the suffix.
    type: str
    default: vllm-watchdog
'''

EXAMPLES = r'''
- name: The timer in one line
  ansible.builtin.debug:
    msg: "{{ (timer.stdout | modelops.vllm._local_status(service.stdout, 'vllm-watchdog')).line }}"
'''

RETURN = r'''
_value:
  description: The status.
  type: dict
  contains:
    ok:
      description: Whether the timer is enabled and active, and its last run (if any) succeeded.
      type: bool
    line:
      description: The timer in one line.
      type: str
    why:
      description: What is wrong, or an empty string.
      type: str
'''

from ansible_collections.modelops.vllm.plugins.plugin_utils import _local


def local_status(timer, service, unit='vllm-watchdog'):
    return _local.status(_local.show(timer), _local.show(service), unit)


class FilterModule(object):
    def filters(self):
        return {'_local_status': local_status}
