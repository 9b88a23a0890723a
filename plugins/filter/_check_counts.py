# -*- coding: utf-8 -*-
# Copyright (c) modelops.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r'''
name: _check_counts
short_description: Internal - How many verdicts of a fleet check of M(modelops.vllm.health) are in each state
version_added: 1.0.0
author: modelops.vllm maintainers (@modelops)
description:
  - Internal to the playbook C(modelops.vllm.fleet_check), not an interface of the collection; it may change or go in
    any release.
  - Takes verdicts of M(modelops.vllm.health) and returns the number of them per state, in the order the states first
    appear (a verdict without a state counts as V(unknown)). The same count as the
    P(modelops.vllm._watchdog_summary#filter) filter's C(counts).
options:
  _input:
    description: The verdicts, each a dict with C(state).
    type: list
    elements: dict
    required: true
'''

EXAMPLES = r'''
- name: The counts, for AWX
  ansible.builtin.set_stats:
    data:
      vllm_check_counts: "{{ verdicts | modelops.vllm._check_counts }}"
'''

RETURN = r'''
_value:
  description: Per state, how many verdicts are in it.
  type: dict
'''

from ansible_collections.modelops.vllm.plugins.plugin_utils._counts import count_states


def check_counts(results):
    return count_states(results, 'check_counts')


class FilterModule(object):
    def filters(self):
        return {'_check_counts': check_counts}
