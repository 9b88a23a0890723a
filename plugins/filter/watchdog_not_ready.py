# -*- coding: utf-8 -*-
# Copyright (c) modelops.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r'''
name: watchdog_not_ready
short_description: The waits of M(modelops.vllm.restart) that did not end with the server ready
version_added: 1.0.0
author: modelops.vllm maintainers (@modelops)
description:
  - Takes the C(results) of a looped C(action=wait_ready) task of M(modelops.vllm.restart) and returns those whose
    C(ready.ok) is not true (the task runs with C(failed_when=false), so C(failed) says nothing).
options:
  _input:
    description: The loop's results.
    type: list
    elements: dict
    required: true
'''

EXAMPLES = r'''
- name: Record the instances that do not serve
  modelops.vllm.watchdog_gate:
    state_dir: /var/lib/vllm-watchdog
    record_failure:
      name: "{{ item._i.name }}"
      error: not ready
  loop: "{{ ready.results | modelops.vllm.watchdog_not_ready }}"
'''

RETURN = r'''
_value:
  description: The results that were not ready, in their order.
  type: list
  elements: dict
'''

from ansible.errors import AnsibleFilterError


def is_ready(result):
    """Whether one wait_ready result says the server is ready: ready.ok, with ready missing or empty as not."""
    return bool((result.get('ready') or {}).get('ok', False))


def watchdog_not_ready(results):
    if not isinstance(results, (list, tuple)):
        raise AnsibleFilterError('watchdog_not_ready expects a list of results, got %s' % type(results).__name__)
    for result in results:
        if not isinstance(result, dict):
            raise AnsibleFilterError('watchdog_not_ready expects dicts, got %s' % type(result).__name__)
    return [result for result in results if not is_ready(result)]


class FilterModule(object):
    def filters(self):
        return {'watchdog_not_ready': watchdog_not_ready}
