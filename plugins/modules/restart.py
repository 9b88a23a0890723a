#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) modelops.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r'''
---
module: restart
short_description: Restart (or upgrade) a vLLM service by its method and wait until it is ready
version_added: 0.1.0
description:
  - The one place that performs a restart, for the P(modelops.vllm.watchdog#role) and P(modelops.vllm.rollout#role)
    roles. It runs the exact commands of the restart method, in order, and stops at the first one that fails, so a
    failed C(systemctl daemon-reload) is never followed by a restart on the old unit. Then it waits until the server
    is ready, C(/health) answering 200 and the model listed by C(/v1/models).
  - It decides nothing. The watchdog calls it only when M(modelops.vllm.watchdog_gate) said to restart.
  - The commands per method. V(systemd) C(systemctl restart <service>) (upgrade C(systemctl daemon-reload), then
    C(systemctl restart <service>)). V(docker) C(docker restart <service>) (upgrade O(restart_command), which must
    recreate the container). V(compose) C(docker compose --project-directory <dir> restart <service>) (upgrade
    C(... up -d --force-recreate --no-deps <service>)). V(command) O(restart_command).
author:
  - modelops.vllm maintainers (@modelops)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: full
    details:
      - In check mode it runs nothing and returns the commands it would run.
  diff_mode:
    support: none
  platform:
    platforms: posix
options:
  action:
    description:
      - V(restart) runs the restart commands, V(upgrade) the commands that recreate the service with a new environment
        (the unit's drop-in or the compose env file must already hold it). V(wait_ready) runs nothing and only waits
        until the server is ready (for example on the controller, when the server is checked from there).
    type: str
    choices: [restart, upgrade, wait_ready]
    default: restart
  method:
    description: The restart method.
    type: str
    choices: [systemd, docker, compose, command]
    default: systemd
  service:
    description: The systemd unit, the container name, or the compose service.
    type: str
  compose_project_dir:
    description: The compose project directory, for O(method=compose).
    type: str
  restart_command:
    description: The restart command as an argv list, for O(method=command) (and a V(docker) upgrade).
    type: list
    elements: str
  environment:
    description: Environment variables of the commands, added to the module's own (C(DOCKER_HOST), a new image for your command).
    type: dict
    default: {}
  command_timeout:
    description:
      - Seconds a command may run before it is stopped (with every process it started) and counts as failed.
    type: float
    default: 600
  wait_ready:
    description: After the commands, wait until C(/health) answers 200 and C(/v1/models) lists the model.
    type: bool
    default: true
  url:
    description: Base URL of the server, as seen from where the module runs; required to wait until ready.
    type: str
  api_key:
    description: The server's C(--api-key), for C(/v1/models). Never logged.
    type: str
  model:
    description: The model that must be listed by C(/v1/models); any model when not given.
    type: str
  old_start_time:
    description:
      - The C(process_start_time_seconds) of the process before the restart (for example from the verdict before it),
        for O(action=wait_ready), or when the module cannot read C(/metrics) itself before it runs the commands.
    type: float
  old_reading:
    description:
      - One read of the process before the restart, as the check keeps it in its evidence (the last item of
        RV(modelops.vllm.health#module:evidence.reads), with its C(process_start_time) and each engine's
        C(counters)). Used as O(old_start_time) is; it lets a server without a start time (vLLM with
        C(--api-server-count) above 1) be told apart from the process that follows it by its counters.
    type: dict
  ready_timeout:
    description: Seconds to wait until ready.
    type: float
    default: 900
  ready_delay:
    description: Seconds between two polls while waiting.
    type: float
    default: 10
  metrics_timeout:
    description: Seconds allowed for one answer of C(/health) or C(/v1/models).
    type: float
    default: 10
  validate_certs:
    description: Verify the server's TLS certificate for C(https://) URLs.
    type: bool
    default: true
  ca_path:
    description: A PEM file of CA certificates to verify the server with.
    type: path
  use_proxy:
    description: As O(modelops.vllm.health#module:use_proxy).
    type: bool
    default: false
requirements:
  - requests (on the host that runs the module, to wait until ready)
'''

EXAMPLES = r'''
- name: Restart the vLLM unit and wait until it serves its model
  modelops.vllm.restart:
    method: systemd
    service: vllm
    url: http://127.0.0.1:8000
    model: meta-llama/Llama-3.1-8B-Instruct

- name: Recreate a compose service with the new image already in its .env file
  modelops.vllm.restart:
    action: upgrade
    method: compose
    service: vllm
    compose_project_dir: /srv/vllm
    url: http://127.0.0.1:8000
'''

RETURN = r'''
commands:
  description: The commands run (or, in check mode, that would run), each with C(argv), C(rc), C(stdout), C(stderr).
  returned: always
  type: list
  elements: dict
  sample: [{"argv": ["systemctl", "restart", "vllm"], "rc": 0, "stdout": "", "stderr": ""}]
ready:
  description:
    - The wait until ready (C(ok), C(seconds), C(health), C(models), C(polls), C(why), C(start_time),
      C(new_process)); null when not waited.
    - Ready means C(/health) 200 and the model in C(/v1/models), answered by a new process. When a process answered
      C(/metrics) before the restart (read by the module before its commands, else O(old_reading) or
      O(old_start_time)), the new one must be told apart from it by a signal the check uses, a changed
      C(process_start_time_seconds), a changed C(*_created) value, or a counter that went down (a new process counts
      from zero). C(new_process) says which. Where none can tell (vLLM with C(--api-server-count) above 1 reports no
      start time, and a process whose counters are all zero looks like a new one), the restart is not confirmed, and the
      task fails when O(ready_timeout) is over, as it does for a restart command that restarted nothing. When nothing
      answered C(/metrics) before the restart, any process that answers counts as the new one (C(new_process) null).
  returned: always
  type: dict
  sample: {"ok": true, "seconds": 41.2, "health": "HTTP 200", "models": ["tiny"], "polls": 5, "why": null,
           "new_process": "process_start_time_seconds changed from 1796004614.2 to 1796008214.9"}
'''

import math
import os
import time

from ansible.module_utils.basic import AnsibleModule, missing_required_lib

from ansible_collections.modelops.vllm.plugins.module_utils._http import HAS_REQUESTS, REQUESTS_IMPORT_ERROR, Client
from ansible_collections.modelops.vllm.plugins.module_utils._ready import (
    READY_LIMITS,
    read_process,
    reading_from_summary,
    wait_ready,
)
from ansible_collections.modelops.vllm.plugins.module_utils._redact import redact, secrets_of
from ansible_collections.modelops.vllm.plugins.module_utils._service import (
    ServiceError,
    describe_failure,
    restart_commands,
    run_argv,
    run_commands,
)
from ansible_collections.modelops.vllm.plugins.module_utils._verdict import CHECK_LIMITS, CheckError


def main():
    module = AnsibleModule(
        argument_spec=dict(
            action=dict(type='str', default='restart', choices=['restart', 'upgrade', 'wait_ready']),
            method=dict(type='str', default='systemd', choices=['systemd', 'docker', 'compose', 'command']),
            service=dict(type='str'),
            compose_project_dir=dict(type='str'),
            restart_command=dict(type='list', elements='str'),
            environment=dict(type='dict', default={}),
            command_timeout=dict(type='float', default=600),
            wait_ready=dict(type='bool', default=True),
            url=dict(type='str'),
            api_key=dict(type='str', no_log=True),
            model=dict(type='str'),
            old_start_time=dict(type='float'),
            old_reading=dict(type='dict'),
            ready_timeout=dict(type='float', default=900),
            ready_delay=dict(type='float', default=10),
            metrics_timeout=dict(type='float', default=10),
            validate_certs=dict(type='bool', default=True),
            ca_path=dict(type='path'),
            use_proxy=dict(type='bool', default=False),
        ),
        supports_check_mode=True,
    )
    p = module.params
    secrets = secrets_of({'api_key': p['api_key'], 'url': p['url']})
    module.no_log_values.update(secrets)
    waits = p['wait_ready'] or p['action'] == 'wait_ready'
    limits = list(READY_LIMITS.items()) + [
        ('metrics_timeout', CHECK_LIMITS['metrics_timeout'])]
    for key, (low, high, closed) in limits:
        value = p[key]
        if math.isnan(value) or not low <= value <= high or (value == low and not closed):
            module.fail_json(msg='%s must be %s %s and at most %s, got %s'
                             % (key, 'at least' if closed else 'greater than', low, high, value))
    if waits and not p['url']:
        module.fail_json(msg='url is required to wait until the server is ready (or set wait_ready: false)')

    commands = []
    if p['action'] != 'wait_ready':
        try:
            commands = restart_commands(p['method'], p['service'], p['compose_project_dir'], p['restart_command'],
                                        upgrade=p['action'] == 'upgrade')
        except ServiceError as exc:
            module.fail_json(msg=str(exc))
    if module.check_mode:
        module.exit_json(changed=False, commands=[{'argv': argv, 'rc': None, 'stdout': '', 'stderr': ''}
                                                  for argv in commands], ready=None,
                         msg='check mode: would run %s' % '; '.join(' '.join(argv) for argv in commands))

    client = None
    # The process before the restart, as the caller saw it (the module's own read, below, comes first).
    before = reading_from_summary(p['old_reading'], start=p['old_start_time'])
    if waits:
        if not HAS_REQUESTS:
            module.fail_json(msg=missing_required_lib('requests'), exception=REQUESTS_IMPORT_ERROR)
        try:
            client = Client(p['url'], api_key=p['api_key'], validate_certs=p['validate_certs'], ca_path=p['ca_path'],
                            metrics_timeout=p['metrics_timeout'], use_proxy=p['use_proxy'])
        except CheckError as exc:
            module.fail_json(msg=redact(str(exc), secrets))
        if commands:
            # The process before the restart: ready means another one answers.
            before = read_process(client) or before

    env = None
    if p['environment']:
        env = dict(os.environ)
        env.update((str(k), str(v)) for k, v in p['environment'].items())
    records, failed = run_commands(lambda argv: run_argv(argv, timeout=p['command_timeout'], env=env), commands)
    records = redact(records, secrets)
    if failed:
        module.fail_json(msg=redact('the restart failed: %s; the commands after it were not run' % describe_failure(failed),
                                    secrets), commands=records, ready=None, changed=True)
    ready = None
    if waits:
        ready = redact(wait_ready(client, p['ready_timeout'], p['ready_delay'], model=p['model'], sleep=time.sleep,
                                  clock=time.monotonic, before=before), secrets)
        if not ready['ok']:
            module.fail_json(msg='not ready within %g s of the restart: %s' % (p['ready_timeout'], ready['why']),
                             commands=records, ready=ready, changed=bool(records))
    module.exit_json(changed=bool(records), commands=records, ready=ready)


if __name__ == '__main__':
    main()
