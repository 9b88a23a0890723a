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
version_added: 1.0.0
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
  - With O(release_memory) (the watchdog's way), a restart of V(systemd), V(docker) or V(compose) is a stop, a wait
    until the host's memory is back, then a start (C(systemctl stop), then C(systemctl start); C(docker stop), C(docker
    start); C(docker compose ... stop), C(... start)). A plain restart starts the new process the moment the old one is
    gone, while the unified memory of a GB10 may still be held (or pinned by the driver after a failed process). The
    wait lasts until C(MemAvailable) in O(meminfo) is at least O(memory_threshold) (or O(memory_fraction) of what the host
    had available just before the last start that came up healthy, kept in O(memory_baseline)), for up to
    O(memory_timeout) seconds. Memory that does not come back means vLLM is not started (it stays stopped) and the task
    fails with RV(memory.released=false), and the watchdog then takes its next step (a host reboot, or a human). The
    V(command) method has a single command, so there is no wait between its stop and its start.
  - Nothing after a stop leaves the server down without a word. A baseline that cannot be trusted (not JSON, nested
    past reason, more memory than this host's C(MemTotal), written on a host of another size, another host or another
    boot, from the future) is no threshold, and vLLM is started (RV(memory.baseline_ignored) names the file and why).
    A memory wait that fails in a way it did not expect starts vLLM too. A stop that fails is followed by the start
    (a service that still runs is not changed by it) and the task fails. The one case where vLLM stays stopped is memory
    that did not come back, and the message says so, naming the threshold and where it came from.
author:
  - modelops.vllm maintainers (@modelops)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - modelops.vllm.connection
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
      - V(stop) and V(start) run only the stop or only the start commands of V(systemd), V(docker) or V(compose), for
        an instance that spans hosts, which is stopped and started rank by rank on each of its hosts
        (docs/multinode.md). With O(release_memory), a stop then waits until the host's memory is back, and fails with
        RV(memory.released=false) when it is not. A start waits until the server is ready only with O(wait_ready)
        and O(url) (a rank that serves no HTTP of its own is started with O(wait_ready=false)).
    type: str
    choices: [restart, upgrade, wait_ready, stop, start]
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
        C(reads) in RV(modelops.vllm.health#module:evidence), with its C(process_start_time) and each engine's
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
  release_memory:
    description:
      - For O(action=restart) of V(systemd), V(docker) or V(compose), stop, wait until the memory is back, then start
        (see the description). Ignored for V(command).
    type: bool
    default: false
  meminfo:
    description: The host's C(/proc/meminfo), whose C(MemAvailable) is waited for (a test points it at a file).
    type: path
    default: /proc/meminfo
  memory_threshold:
    description:
      - MiB of C(MemAvailable) the host must have again after vLLM stopped before it is started. V(0) takes
        O(memory_fraction) of the baseline in O(memory_baseline); without a baseline (no restart by this module came
        up healthy yet) there is no threshold and no wait.
    type: float
    default: 0
  memory_fraction:
    description: The part of the baseline (greater than 0, at most 1) that must be available again.
    type: float
    default: 0.9
  memory_timeout:
    description: Seconds to wait for the memory to come back. Past them vLLM is not started and the task fails.
    type: float
    default: 300
  memory_delay:
    description: Seconds between two reads of O(meminfo) while waiting.
    type: float
    default: 5
  memory_baseline:
    description:
      - A file (in the watchdog's state directory) with what the host had available just before the last start that
        came up healthy (C({"available_kb", "total_kb", "boot_id", "host", "at"})). Read for the threshold; rewritten
        after a start that came up ready. Trusted only when it was written on this host, in this boot, for as much
        memory as this host has (C(MemTotal) in O(meminfo)), and says no more was available than that.
    type: path
  setting_prefix:
    description:
      - What the memory wait's words put before a setting's name (V(memory_threshold)). The
        P(modelops.vllm.watchdog#role) role passes V(vllm_watchdog_), so that they name its variable.
    type: str
    default: ''
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
memory:
  description:
    - With O(release_memory), the wait between the stop and the start. C(released) (false - vLLM was not started),
      C(available_kb) (C(MemAvailable) at its end), C(threshold_kb) (null - no threshold), C(threshold) (where the
      threshold comes from), C(seconds), C(polls), C(why), C(baseline_written) (the baseline kept for the next time),
      C(baseline_ignored) (only when O(memory_baseline) was not trusted, the file and why).
  returned: with O(release_memory), for a method that can stop and start
  type: dict
  sample: {"released": true, "available_kb": 115343360, "threshold_kb": 103809024, "seconds": 12.1, "polls": 4,
           "threshold": "90% of the 110.0 GiB available before the last start that came up healthy", "why": null,
           "baseline_written": true}
  contains:
    released:
      description: Whether C(MemAvailable) came back above the threshold in time; V(false) - vLLM was not started.
      returned: always
      type: bool
    baseline_ignored:
      description:
        - The O(memory_baseline) file that was not trusted, and why (garbage, more than this host has, another host,
          size or boot, the future). It gave no threshold, and vLLM was started.
      returned: when O(memory_baseline) exists and was not trusted
      type: str
      sample: "/var/lib/modelops-vllm/watchdog/vllm.memory.json: it says 480.0 GiB were available, more than this host
        has (MemTotal 125.0 GiB)"
'''

from ansible.module_utils.basic import AnsibleModule, missing_required_lib

from ansible_collections.modelops.vllm.plugins.module_utils import _restart
from ansible_collections.modelops.vllm.plugins.module_utils._http import HAS_REQUESTS, REQUESTS_IMPORT_ERROR, Client, connection_args
from ansible_collections.modelops.vllm.plugins.module_utils._redact import redact, secrets_of
from ansible_collections.modelops.vllm.plugins.module_utils._service import METHODS, ServiceError
from ansible_collections.modelops.vllm.plugins.module_utils._settings import (
    CHECK_SETTINGS, MEMORY_SETTINGS, READY_SETTINGS, option_specs)
from ansible_collections.modelops.vllm.plugins.module_utils._types import CheckError


def argument_spec():
    return dict(
        connection_args(),
        action=dict(type='str', default='restart', choices=['restart', 'upgrade', 'wait_ready', 'stop', 'start']),
        method=dict(type='str', default='systemd', choices=list(METHODS)),
        service=dict(type='str'),
        compose_project_dir=dict(type='str'),
        restart_command=dict(type='list', elements='str'),
        environment=dict(type='dict', default={}),
        wait_ready=dict(type='bool', default=True),
        url=dict(type='str'),
        model=dict(type='str'),
        old_start_time=dict(type='float'),
        old_reading=dict(type='dict'),
        release_memory=dict(type='bool', default=False),
        meminfo=dict(type='path', default='/proc/meminfo'),
        memory_baseline=dict(type='path'),
        setting_prefix=dict(type='str', default=''),
        # command_timeout, ready_timeout, ready_delay, metrics_timeout and the memory wait's: the catalogue's.
        metrics_timeout=option_specs(CHECK_SETTINGS)['metrics_timeout'],
        **dict(option_specs(READY_SETTINGS), **option_specs(MEMORY_SETTINGS))
    )


def main():
    """The options and the client here; what runs, in order, and what it returns: module_utils/_restart.py."""
    module = AnsibleModule(argument_spec=argument_spec(), supports_check_mode=True)
    p = module.params
    secrets = secrets_of({'api_key': p['api_key'], 'url': p['url']})
    module.no_log_values.update(secrets)
    for problem in _restart.problems(p):
        module.fail_json(msg=problem)
    try:
        commands, split = _restart.commands_of(p)
    except ServiceError as exc:
        module.fail_json(msg=str(exc))
    if module.check_mode:
        module.exit_json(**_restart.check_mode_result(commands))
    client = None
    if _restart.waits(p):
        if not HAS_REQUESTS:
            module.fail_json(msg=missing_required_lib('requests'), exception=REQUESTS_IMPORT_ERROR)
        try:
            client = Client(p['url'], api_key=p['api_key'], validate_certs=p['validate_certs'], ca_path=p['ca_path'],
                            metrics_timeout=p['metrics_timeout'], use_proxy=p['use_proxy'])
        except CheckError as exc:
            module.fail_json(msg=redact(str(exc), secrets))
    failed, result = _restart.perform(p, commands, split, client, secrets)
    if failed:
        module.fail_json(msg=failed, **result)
    module.exit_json(**result)


if __name__ == '__main__':
    main()
