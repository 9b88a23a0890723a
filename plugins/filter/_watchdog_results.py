# -*- coding: utf-8 -*-
# Copyright (c) modelops.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r'''
name: _watchdog_results
short_description: Internal - One host's results of the modelops.vllm.watchdog role, in the form of C(vllm_watchdog_results)
version_added: 1.0.0
author: modelops.vllm maintainers (@modelops)
description:
  - Internal to the P(modelops.vllm.watchdog#role) role, not an interface of the collection; it may change or go in any
    release.
  - Takes what M(modelops.vllm.watchdog_gate) returned for a host (or that it could not run, or that the host did not
    answer) and what the restarts did, and returns one result per instance, the contract documented in the role's
    docs (C(host), C(instance), C(url), C(state), C(reason), C(action), C(decision), C(restarted), C(after),
    C(after_reason), C(failed), C(unreachable), C(line)).
options:
  _input:
    description: The registered result of the gate task (it may be skipped, failed or unreachable).
    type: dict
    required: true
  host:
    description: The host's inventory name.
    type: str
    required: true
  instances:
    description: The host's instances (names and URLs, for a host whose gate did not run).
    type: list
    elements: dict
    required: true
  done:
    description: Per instance name, what its restart did (C(after), C(after_reason), C(error)).
    type: dict
  check_mode:
    description: Whether the play runs in check mode.
    type: bool
  unreachable:
    description: Why the host did not answer (an empty string when it did).
    type: str
'''

EXAMPLES = r'''
- name: This host's results, as its fact (read as ansible_facts.vllm_watchdog_results, like the gate's)
  ansible.builtin.set_fact:
    vllm_watchdog_results: "{{ gate | modelops.vllm._watchdog_results(inventory_hostname, instances, done) }}"
    cacheable: true
'''

RETURN = r'''
_value:
  description: One result per instance.
  type: list
  elements: dict
'''

from ansible.errors import AnsibleFilterError

from ansible_collections.modelops.vllm.plugins.module_utils import _results


def watchdog_results(gate, host, instances, done=None, check_mode=False, unreachable=''):
    try:
        return _results.watchdog_results(gate, host, instances, done, check_mode, unreachable)
    except ValueError as exc:
        raise AnsibleFilterError(str(exc))


class FilterModule(object):
    def filters(self):
        return {'_watchdog_results': watchdog_results}
