# -*- coding: utf-8 -*-
# Copyright (c) modelops.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r'''
name: _check_budget
short_description: Internal - Seconds to wait for a background check of M(modelops.vllm.health)
version_added: 1.0.0
author: modelops.vllm maintainers (@modelops)
description:
  - Internal to the P(modelops.vllm.watchdog#role) role and the playbook C(modelops.vllm.fleet_check), not an interface
    of the collection; it may change or go in any release.
  - Takes the check's O(modelops.vllm.health#module:interval) and returns how many seconds the gate or the collector
    waits for a check that runs in the background, a whole number.
  - That is the health module's own overall deadline of one check (two waits, two probes, eight reads of the
    cheap endpoints and the time it may keep watching a freeze, O(freeze_wait)), plus O(margin) seconds for Python and
    the module to start on a loaded host, rounded up.
  - A value that is not a number is an error that names it.
options:
  _input:
    description: The seconds between the two reads of one check (O(modelops.vllm.health#module:interval)).
    type: float
    required: true
  probe_timeout:
    description: The seconds one probe may wait (O(modelops.vllm.health#module:probe_timeout)).
    type: float
    required: true
  metrics_timeout:
    description: The seconds one read of a cheap endpoint may wait (O(modelops.vllm.health#module:metrics_timeout)).
    type: float
    required: true
  margin:
    description: Seconds added to the check's deadline.
    type: float
    default: 30
  freeze_wait:
    description: The seconds one check may keep watching a freeze (O(modelops.vllm.health#module:freeze_wait)).
    type: float
    default: 0
'''

EXAMPLES = r'''
- name: Collect the verdicts of the background check
  modelops.vllm.health:
    results_file: "{{ job.results_file }}"
    results_timeout: "{{ interval | modelops.vllm._check_budget(probe_timeout, metrics_timeout, freeze_wait=freeze_wait) }}"
'''

RETURN = r'''
_value:
  description: Seconds, rounded up.
  type: int
'''

import math

from ansible.errors import AnsibleFilterError

from ansible_collections.modelops.vllm.plugins.module_utils._settings import SECONDS, check_deadline
from ansible_collections.modelops.vllm.plugins.module_utils._types import in_range

MARGIN = 30


def _number(name, value):
    number = in_range(value, SECONDS, strings=True)
    if number is None:
        raise AnsibleFilterError('check_budget: %s must be a finite number of seconds from 0, got %r' % (name, value))
    return number


def check_budget(interval, probe_timeout, metrics_timeout, margin=MARGIN, freeze_wait=0):
    deadline = check_deadline(_number('interval', interval), _number('probe_timeout', probe_timeout),
                              _number('metrics_timeout', metrics_timeout), _number('freeze_wait', freeze_wait))
    return int(math.ceil(deadline + _number('margin', margin)))


class FilterModule(object):
    def filters(self):
        return {'_check_budget': check_budget}
