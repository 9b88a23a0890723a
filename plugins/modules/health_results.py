#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) modelops.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r'''
---
module: health_results
short_description: Collect the verdicts of a check of M(modelops.vllm.health) that runs in the background
version_added: 1.0.0
description:
  - Waits, up to O(results_timeout), for a check that M(modelops.vllm.health) started in the background on this host
    (with O(modelops.vllm.health#module:background_dir), or with C(async) and C(poll) V(0)), returns its RV(servers),
    RV(states) and facts as if it had checked, and removes its file.
  - Unlike C(async_status) in a retry loop, it prints no C(FAILED - RETRYING) line per poll and leaves no file behind.
  - A check that failed, or a file that is not a check's result, fails the task with what went wrong; the verdicts
    of a check that ran but found servers configured wrong are returned with the failure.
  - The watchdog role does not use it, M(modelops.vllm.watchdog_gate) collects its background check itself
    (O(modelops.vllm.watchdog_gate#module:results_file)).
author:
  - modelops.vllm maintainers (@modelops)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - ansible.builtin.action_common_attributes.facts
attributes:
  check_mode:
    support: full
    details:
      - The file of a check started in check mode is collected (and removed) as in a real run.
  diff_mode:
    support: none
  platform:
    platforms: posix
  facts:
    support: full
options:
  results_file:
    description:
      - The started task's RV(modelops.vllm.health#module:results_file) (or, for C(async), the job's C(results_file)),
        on this host.
    type: path
    required: true
  results_timeout:
    description: Seconds to wait for the background check to finish.
    type: float
    default: 300
'''

EXAMPLES = r'''
- name: Start the check of this host's servers in the background (every host's waits overlap)
  modelops.vllm.health:
    servers: "{{ [inventory_hostname] | modelops.vllm.vllm_servers(hostvars) }}"
    background_dir: ~/.cache/modelops-vllm/checks
  register: job

- name: Collect the verdicts (no polling noise; the check's file is removed)
  modelops.vllm.health_results:
    results_file: "{{ job.results_file }}"
  register: fleet

- name: Say them
  ansible.builtin.debug:
    msg: "{{ fleet.servers | map(attribute='line') | list }}"
'''

RETURN = r'''
servers:
  description:
    - One result per server, in the order the check was given them, each with the keys of a single check of
      M(modelops.vllm.health) (RV(modelops.vllm.health#module:state), RV(modelops.vllm.health#module:reason), ...)
      plus its name.
  returned: when the check ran
  type: list
  elements: dict
  sample: [{"name": "chat", "state": "busy", "reason": "...", "url": "http://127.0.0.1:8000"}]
states:
  description: The verdict of each server by name.
  returned: when the check ran
  type: dict
  sample: {"chat": "busy", "embed": "idle"}
ansible_facts:
  description: Facts to add to the host.
  returned: success
  type: dict
  contains:
    vllm_health_servers:
      description: Every checked server's result by name.
      returned: success
      type: dict
'''

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.modelops.vllm.plugins.module_utils._jobs import read_results
from ansible_collections.modelops.vllm.plugins.module_utils._settings import (
    GATE_SETTINGS, RESULTS_TIMEOUT_LIMITS, option_specs)
from ansible_collections.modelops.vllm.plugins.module_utils._types import in_range, range_words


def main():
    """The verdicts of a background run of modelops.vllm.health on this host."""
    module = AnsibleModule(
        argument_spec=dict(results_file=dict(type='path', required=True),
                           results_timeout=option_specs(GATE_SETTINGS)['results_timeout']),
        supports_check_mode=True,
    )
    timeout = module.params['results_timeout']
    if in_range(timeout, RESULTS_TIMEOUT_LIMITS) is None:
        module.fail_json(msg='results_timeout must be %s, got %s' % (range_words(RESULTS_TIMEOUT_LIMITS), timeout))
    result, why = read_results(module.params['results_file'], timeout)
    if result is None:
        module.fail_json(msg=why)
    servers = result.get('servers')
    if not isinstance(servers, list):
        module.fail_json(msg='the background check failed: %s' % str(result.get('msg') or 'no verdicts')[:1000])
    states = dict((r.get('name'), r.get('state')) for r in servers if isinstance(r, dict))
    for server in servers:
        for warning in (server.get('config_warnings') if isinstance(server, dict) else None) or []:
            module.warn('%s: %s' % (server.get('name'), warning))
    if result.get('failed'):
        module.fail_json(msg=str(result.get('msg'))[:1000], servers=servers, states=states)
    facts = {'vllm_health_servers': dict((r.get('name'), r) for r in servers if isinstance(r, dict))}
    module.exit_json(changed=False, servers=servers, states=states, ansible_facts=facts)


if __name__ == '__main__':
    main()
