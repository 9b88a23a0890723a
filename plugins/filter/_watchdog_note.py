# -*- coding: utf-8 -*-
# Copyright (c) modelops.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r'''
name: _watchdog_note
short_description: Internal - Add what was done to every result of the modelops.vllm.watchdog role
version_added: 1.0.0
author: modelops.vllm maintainers (@modelops)
description:
  - Internal to the P(modelops.vllm.watchdog#role) role, not an interface of the collection; it may change or go in any
    release.
  - Takes results in the form of C(vllm_watchdog_results) and returns them with C( | <note>) added to the end of each
    one's C(decision) and C(line), for example what the controller's C(vllm_watchdog_unreachable_command) did for a
    host that did not answer. The results themselves are not changed.
options:
  _input:
    description: The results, each a dict with C(decision) and C(line).
    type: list
    elements: dict
    required: true
  note:
    description: What to add.
    type: str
    required: true
'''

EXAMPLES = r'''
- name: Say what the unreachable command did
  ansible.builtin.set_fact:
    vllm_watchdog_results: "{{ ansible_facts.vllm_watchdog_results | modelops.vllm._watchdog_note(said) }}"
    cacheable: true
'''

RETURN = r'''
_value:
  description: The results, each a copy with the note added to its C(decision) and C(line).
  type: list
  elements: dict
'''

from ansible.errors import AnsibleFilterError

KEYS = ('decision', 'line')


def watchdog_note(results, note):
    if not isinstance(results, (list, tuple)):
        raise AnsibleFilterError('watchdog_note expects a list of results, got %s' % type(results).__name__)
    out = []
    for item in results:
        if not isinstance(item, dict):
            raise AnsibleFilterError('watchdog_note expects dicts, got %s' % type(item).__name__)
        missing = [key for key in KEYS if key not in item]
        if missing:
            raise AnsibleFilterError('watchdog_note: a result has no %s' % ' and no '.join(missing))
        noted = dict(item)
        noted.update((key, '%s | %s' % (item[key], note)) for key in KEYS)
        out.append(noted)
    return out


class FilterModule(object):
    def filters(self):
        return {'_watchdog_note': watchdog_note}
