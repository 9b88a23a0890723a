#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) modelops.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r'''
---
module: evidence
short_description: Keep the evidence of a hung vLLM service on its host, before it is restarted
version_added: 1.0.0
description:
  - Keeps what a vLLM bug report needs of a hang, from the service's own processes, in a file of the state directory
    on the host (C(<state_dir>/evidence/<name>-<UTC time>.json)), the same evidence M(modelops.vllm.watchdog_gate)
    keeps of a server it restarts (docs/gb10.md). The C(py-spy dump) of every Python process of the service (the tree
    of the main process its service manager names; a dump pauses the process it reads, so no other process is read),
    C(/proc/meminfo), the kernel's NVIDIA and out-of-memory lines since the service started, C(nvidia-smi), and the
    tail of the service's log. Secrets are masked in all of it (O(api_key)).
  - The P(modelops.vllm.watchdog#role) role runs it on the host of each other rank of an instance that spans hosts
    (docs/multinode.md) before it stops them. Each tool is bounded (20 s, and O(evidence_timeout) for all of them), a
    tool that is missing or fails is named in the file, and nothing is restarted or changed but the file.
author:
  - modelops.vllm maintainers (@modelops)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - modelops.vllm.service
attributes:
  check_mode:
    support: full
    details:
      - In check mode nothing is read or written; it says where the file would be.
  diff_mode:
    support: none
  platform:
    platforms: posix
options:
  name:
    description: What the evidence is of (the file's name starts with it), for example C(big-rank1).
    type: str
    required: true
  state_dir:
    description: The watchdog's state directory on the host; the file goes in its C(evidence) directory.
    type: path
    required: true
  py_spy:
    description: The C(py-spy) command (empty, or not installed, leaves the stacks out and says so).
    type: str
    default: py-spy
  meminfo:
    description: The host's C(/proc/meminfo).
    type: path
    default: /proc/meminfo
  kernel_log:
    description: The kernel log (C(/dev/kmsg)); empty leaves it out.
    type: str
    default: /dev/kmsg
  nvidia_smi:
    description: The C(nvidia-smi) command (empty leaves it out).
    type: str
    default: nvidia-smi
  evidence_timeout:
    description: Seconds for all the tools together.
    type: float
    default: 60
  log_lines:
    description: Lines of the service's log kept.
    type: int
    default: 200
  status_timeout:
    description: Seconds the service manager has to answer.
    type: float
    default: 30
  api_key:
    description:
      - The instance's API key (the role passes its head's C(api_key)). Every spelling of it is masked in the file and
        in the result, as vLLM's own spellings of any key always are (C(--api-key ...), C(VLLM_API_KEY=...), the
        start-up line's C(api_key) list), since a rank started with the head's command line copied has the key in its
        log and in its processes' arguments. Never logged.
    type: str
'''

EXAMPLES = r'''
- name: Keep the evidence of the other rank before the instance is restarted
  modelops.vllm.evidence:
    name: big-rank1
    state_dir: /var/lib/vllm-watchdog
    method: docker
    service: vllm-rank1
  delegate_to: spark-02
'''

RETURN = r'''
file:
  description: The evidence file on the host (null in check mode, or when it could not be written).
  returned: always
  type: str
  sample: /var/lib/vllm-watchdog/evidence/big-rank1-20261204T061500Z.json
summary:
  description: A few words on what the evidence holds.
  returned: always
  type: str
  sample: py-spy 2 stack(s), MemAvailable 4.1 GiB, 0 kernel line(s), nvidia-smi
service:
  description: What the service manager said of the service (C(running), C(started_at), C(main_pid), C(status)).
  returned: always
  type: dict
'''

import json
import os
import time

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.modelops.vllm.plugins.module_utils import _evidence
from ansible_collections.modelops.vllm.plugins.module_utils import _host
from ansible_collections.modelops.vllm.plugins.module_utils import _statedir as statedir
from ansible_collections.modelops.vllm.plugins.module_utils._redact import forms, redact
from ansible_collections.modelops.vllm.plugins.module_utils._service import (
    logs_command, problems, run_argv, service_args, service_status)
from ansible_collections.modelops.vllm.plugins.module_utils._settings import GATE_LIMITS, GATE_SETTINGS, option_specs
from ansible_collections.modelops.vllm.plugins.module_utils._types import parse_started_at, range_problems

SETTINGS = ('evidence_timeout', 'log_lines', 'status_timeout')  # the gate's, from the catalogue


def main():
    module = AnsibleModule(
        argument_spec=dict(
            service_args(),  # method, service, compose_project_dir: doc fragment modelops.vllm.service
            name=dict(type='str', required=True),
            state_dir=dict(type='path', required=True),
            py_spy=dict(type='str', default='py-spy'),
            meminfo=dict(type='path', default='/proc/meminfo'),
            kernel_log=dict(type='str', default='/dev/kmsg'),
            nvidia_smi=dict(type='str', default='nvidia-smi'),
            api_key=dict(type='str', no_log=True),
            **dict((key, spec) for key, spec in option_specs(GATE_SETTINGS).items() if key in SETTINGS)
        ),
        supports_check_mode=True,
    )
    p = module.params
    wrong = range_problems(dict((key, p[key]) for key in SETTINGS), GATE_LIMITS)
    wrong += problems(p['method'], p['service'], p['compose_project_dir'])
    if not p['name'] or '/' in p['name'] or p['name'].startswith('.'):
        wrong.append('name must be a plain file name, got %r' % p['name'])
    if wrong:
        module.fail_json(msg='; '.join(wrong))
    directory = statedir.paths(p['state_dir'])['evidence']
    if module.check_mode:
        module.exit_json(changed=False, file=None, summary='check mode: would keep it in %s' % directory, service={})

    def run(argv, timeout=p['status_timeout'], keep=_evidence.DUMP_BYTES):
        return run_argv(argv, timeout=timeout, keep=keep)

    spellings = forms([p['api_key']])
    service = redact(service_status(run, p['method'], p['service'], p['compose_project_dir']), spellings)
    pid = service.get('main_pid')
    found = _evidence.collect(run, _host.tree(pid) if pid else [], p, since=parse_started_at(service.get('started_at')))
    argv = logs_command(p['method'], p['service'], p['compose_project_dir'], None, p['log_lines'])
    logs = []
    if argv:
        rc, out, err = run(argv, keep=2048 * p['log_lines'])
        logs = (out + err).splitlines()[-p['log_lines']:]
    record = redact({'host': os.uname()[1], 'name': p['name'], 'restart_method': p['method'], 'service': service,
                     'logs': logs, 'hang': found}, spellings)
    summary = redact(_evidence.summary(found), spellings)
    try:
        statedir.check_dir(directory)
        path = os.path.join(directory, '%s-%s.json' % (p['name'], time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())))
        statedir.write_text(path, json.dumps(record, indent=1, sort_keys=True, default=str) + '\n')
    except (statedir.StateError, OSError) as exc:
        module.fail_json(msg=redact('the evidence could not be kept in %s: %s' % (directory, exc), spellings),
                         summary=summary, service=service)
    module.exit_json(changed=True, file=path, summary=summary, service=service)


if __name__ == '__main__':
    main()
