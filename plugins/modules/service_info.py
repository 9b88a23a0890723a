#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) modelops.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r'''
---
module: service_info
short_description: What the service manager says of a vLLM service, without touching it
version_added: 1.0.0
description:
  - Asks the service manager of the host whether a vLLM service runs, since when, and its main process, the way
    M(modelops.vllm.watchdog_gate) asks it of a server it judges (C(systemctl show), C(docker inspect),
    C(docker compose ps)). It sends nothing to vLLM and changes nothing.
  - The P(modelops.vllm.watchdog#role) role runs it on the hosts of the other ranks of an instance that spans hosts
    (docs/multinode.md), which serve no HTTP of their own.
author:
  - modelops.vllm maintainers (@modelops)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - modelops.vllm.service
attributes:
  check_mode:
    support: full
    details:
      - It only reads, in check mode as in a normal run.
  diff_mode:
    support: none
  platform:
    platforms: posix
options:
  status_timeout:
    description: Seconds the service manager has to answer.
    type: float
    default: 30
'''

EXAMPLES = r'''
- name: Is the other rank of the instance running?
  modelops.vllm.service_info:
    method: docker
    service: vllm-rank1
  register: rank1
  delegate_to: spark-02
'''

RETURN = r'''
running:
  description: Whether the service runs; null when the service manager could not say.
  returned: always
  type: bool
  sample: true
started_at:
  description: When its process started, as the service manager says it (systemd's C(@<epoch>), Docker's RFC 3339); null when unknown.
  returned: always
  type: str
  sample: "@1796004614"
main_pid:
  description: Its main process (systemd's C(MainPID), the container's C(Pid)); null when none.
  returned: always
  type: int
status:
  description: The service manager's words for its state, or why it could not say.
  returned: always
  type: str
  sample: active/running
exists:
  description: False when the service manager does not know the service at all.
  returned: always
  type: bool
'''

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.modelops.vllm.plugins.module_utils._service import (
    ServiceError, problems, run_argv, service_args, service_status)
from ansible_collections.modelops.vllm.plugins.module_utils._settings import GATE_LIMITS, GATE_SETTINGS, option_specs
from ansible_collections.modelops.vllm.plugins.module_utils._types import range_problems


def main():
    module = AnsibleModule(
        argument_spec=dict(
            service_args(),  # method, service, compose_project_dir: doc fragment modelops.vllm.service
            status_timeout=option_specs(GATE_SETTINGS)['status_timeout'],  # the gate's, from the catalogue
        ),
        supports_check_mode=True,
    )
    p = module.params
    wrong = range_problems({'status_timeout': p['status_timeout']}, {'status_timeout': GATE_LIMITS['status_timeout']})
    wrong += problems(p['method'], p['service'], p['compose_project_dir'])
    if wrong:
        module.fail_json(msg='; '.join(wrong))
    try:
        status = service_status(lambda argv: run_argv(argv, timeout=p['status_timeout']), p['method'], p['service'],
                                p['compose_project_dir'])
    except ServiceError as exc:
        module.fail_json(msg=str(exc))
    module.exit_json(changed=False, running=status.get('running'), started_at=status.get('started_at'),
                     main_pid=status.get('main_pid'), status=str(status.get('status') or ''),
                     exists=status.get('exists') is not False)


if __name__ == '__main__':
    main()
