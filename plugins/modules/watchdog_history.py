#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) modelops.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r'''
---
module: watchdog_history
short_description: Read the vLLM watchdog's history on a host - what each run found, every restart and what came of it
version_added: 0.1.0
description:
  - Reads what the P(modelops.vllm.watchdog#role) role keeps in its state directory on the host, for each instance
    there (or those of O(names)), and says it in one line per event. The verdict of every run
    (C(<name>.verdicts.jsonl), and its rotated C(.1) and C(.2)), the record of a failed restart
    (C(<name>.restart-failed)) and the evidence files of the restarts (C(evidence/<name>-<UTC time>.json)).
  - An event is a run, or consecutive runs with the same verdict and action (O(show)), or a restart or host reboot
    with its outcome (what the next run found, the record of its failure, or the next step when its memory did not
    come back) and its evidence file. A last line per instance counts its runs by verdict, its restarts, and the runs
    that asked a human.
  - It never writes. Every file is read as the watchdog's gate reads it. A symbolic link or a FIFO is never followed or
    waited on, and only the end of a verdict file is read (O(max_bytes)). A line that is not a JSON object is skipped
    and counted. Text from the files is shown as one line, clipped.
  - The playbook C(modelops.vllm.history) runs it on every host of the watchdog, over the same connection, and prints
    the fleet's lines.
author:
  - modelops.vllm maintainers (@modelops)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: full
    details:
      - It only reads; check mode changes nothing.
  diff_mode:
    support: none
  platform:
    platforms: posix
options:
  state_dir:
    description:
      - The watchdog's state directory on the host (the role's C(vllm_watchdog_state_dir)). It is root's, 0750, by
        default, so the task needs C(become).
    type: path
    default: /var/lib/vllm-watchdog
  names:
    description:
      - The instances to read. Empty, every instance with a verdict history in O(state_dir), including instances that
        are no longer in the inventory.
    type: list
    elements: str
    default: []
  since:
    description:
      - The start of the window. A duration back from now (V(24h), V(90m), V(2d), V(1w), V(1h30m)), a date or a time in
        UTC (V(2026-12-01), V(2026-12-01T03:00)), a time with its offset (V(2026-12-01T03:00+01:00)), or V(all).
      - The outcome of the window's last restart is read from the run after it even when the window ends there.
    type: str
    default: 24h
  show:
    description:
      - V(changes), one line per change (consecutive runs with the same verdict and action are one line, with their
        count), every restart and host reboot a line of its own.
      - V(actions), only the restarts, the host reboots, the steps after them, and the runs that asked a human.
      - V(all), one line per run.
    type: str
    choices: [changes, actions, all]
    default: changes
  host:
    description: The name that leads every line (C(<host>/<instance>)); the inventory name of the host.
    type: str
  max_bytes:
    description:
      - Bytes read from the end of each verdict file (4096 to 67108864). The watchdog rotates them at 1 MiB
        (C(vllm_watchdog_history_max_bytes)). A file that is larger has only its end read, and a line says so.
    type: int
    default: 4194304
  max_lines:
    description: Event lines returned per instance (the latest; 1 to 10000). A line says how many were left out.
    type: int
    default: 500
notes:
  - What to do about each verdict, and each case where the watchdog asks a human, is in the collection's
    C(docs/runbook.md) (C(ansible-galaxy collection list modelops.vllm) shows where the collection is installed).
seealso:
  - module: modelops.vllm.watchdog_gate
    description: What writes the verdict history, the restart history and the evidence.
'''

EXAMPLES = r'''
- name: What the watchdog found and did on this host, the last 24 hours
  modelops.vllm.watchdog_history:
    state_dir: /var/lib/vllm-watchdog
    host: "{{ inventory_hostname }}"
  become: true
  register: history

- name: One line per event
  ansible.builtin.debug:
    msg: "{{ history.lines }}"

- name: Only the restarts since a night's start, in UTC
  modelops.vllm.watchdog_history:
    host: "{{ inventory_hostname }}"
    since: "2026-12-01T18:00"
    show: actions
  become: true
'''

RETURN = r'''
lines:
  description: Every instance's lines, in the order of RV(instances). Each instance's event lines, oldest first, then a
    line per thing that could not be read, then its summary.
  returned: always
  type: list
  elements: str
  sample:
    - "gb10-01/vllm: 2026-12-01T03:05:00Z busy - 3 request(s) in flight and the engine moved within 5.0 s (...) [41 runs,
      the last 2026-12-01T06:25:00Z]"
    - "gb10-01/vllm: 2026-12-01T06:30:00Z stuck - 3 request(s) in flight and no counter or KV-cache gauge moved across
      two waits of 5.0 s (...); watchdog: restart (restart: stuck (restart 1 of at most 3 in 24h00m)) -> next run
      2026-12-01T06:35:00Z: idle [evidence /var/lib/vllm-watchdog/evidence/vllm-20261201T063000Z.json]"
    - "gb10-01/vllm: 48 run(s) since 2026-11-30T12:00:00Z: 41 busy, 6 idle, 1 stuck; 1 restart(s), 0 host reboot(s),
      0 run(s) that asked a human; the last run 2026-12-01T11:55:00Z: idle, no action"
instances:
  description: One entry per instance read.
  returned: always
  type: list
  elements: dict
  contains:
    name:
      description: The instance.
      type: str
    lines:
      description: Its lines (as in RV(lines)).
      type: list
      elements: str
    events:
      description:
        - Its events, oldest first, each with C(kind) (C(runs), C(restart), C(reboot), C(step)), C(time), C(until) and
          C(runs) (a group of runs), C(state), C(action), C(reason), C(decision), C(outcome) and C(evidence).
      type: list
      elements: dict
    counts:
      description: Runs in the window per verdict.
      type: dict
    runs:
      description: Runs in the window.
      type: int
    restarts:
      description: Restarts decided in the window.
      type: int
    reboots:
      description: Host reboots decided in the window.
      type: int
    needs_human:
      description: Runs in the window that asked a human.
      type: int
    last:
      description: The last run (C(time), C(state), C(action)), in the window or not; null when there is none.
      type: dict
    failed_restart:
      description: Whether a failed restart is recorded now (the host fails on every run until it is cleared).
      type: bool
since:
  description: The start of the window (UTC), or null for V(all).
  returned: always
  type: str
  sample: "2026-11-30T12:00:00Z"
found:
  description: Whether the state directory exists.
  returned: always
  type: bool
'''

import os
import time

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.modelops.vllm.plugins.module_utils import _history as history
from ansible_collections.modelops.vllm.plugins.module_utils import _statedir as statedir


def read(params, now):
    """The lines and the instances of one host's history (the module's result without ``changed``)."""
    since = history.since_epoch(params['since'], now)
    state_dir = params['state_dir']
    host = history.one_line(params['host'] or os.uname()[1], 200)
    out = {'lines': [], 'instances': [], 'since': history.iso(since) if since is not None else None,
           'found': os.path.isdir(state_dir)}
    if not out['found']:
        out['lines'].append('%s/*: no watchdog history here: %s does not exist (the watchdog never ran on this host, '
                            'or vllm_watchdog_state_dir points elsewhere)' % (host, state_dir))
        return out
    if params['names']:
        names, left, problem = [n for n in params['names'] if statedir.file_name(n) == n], 0, None
        out['lines'].extend('%s/%s: not read: not a plain file name' % (host, history.one_line(n, 100))
                            for n in params['names'] if statedir.file_name(n) != n)
    else:
        names, left, problem = history.list_instances(state_dir)
    if problem:
        raise statedir.StateError(problem)
    if not names and not out['lines']:
        out['lines'].append('%s/*: no verdict history in %s yet (the watchdog writes one line per instance and run)'
                            % (host, state_dir))
    for name in names:
        found = history.read_instance(state_dir, name, params['max_bytes'])
        said = history.report('%s/%s' % (host, name), found, since, params['show'], params['max_lines'])
        out['instances'].append(dict(said, name=name))
        out['lines'].extend(said['lines'])
    if left:
        out['lines'].append('%s/*: %d more instance(s) with a history in %s were not read (at most %d)'
                            % (host, left, state_dir, history.MAX_INSTANCES))
    return out


def main():
    module = AnsibleModule(
        argument_spec=dict(
            state_dir=dict(type='path', default='/var/lib/vllm-watchdog'),
            names=dict(type='list', elements='str', default=[]),
            since=dict(type='str', default='24h'),
            show=dict(type='str', choices=list(history.SHOW), default='changes'),
            host=dict(type='str'),
            max_bytes=dict(type='int', default=history.MAX_BYTES),
            max_lines=dict(type='int', default=history.MAX_LINES),
        ),
        supports_check_mode=True,
    )
    p = module.params
    if not 4096 <= p['max_bytes'] <= history.MAX_BYTES_LIMIT:
        module.fail_json(msg='max_bytes must be from 4096 to %d, got %d' % (history.MAX_BYTES_LIMIT, p['max_bytes']))
    if not 1 <= p['max_lines'] <= 10000:
        module.fail_json(msg='max_lines must be from 1 to 10000, got %d' % p['max_lines'])
    try:
        result = read(p, time.time())
    except ValueError as exc:
        module.fail_json(msg=str(exc))
    except (statedir.StateError, OSError) as exc:
        module.fail_json(msg='the watchdog history cannot be read: %s (the state directory is root\'s: run with become)'
                         % history.one_line(str(exc)))
    module.exit_json(changed=False, **result)


if __name__ == '__main__':
    main()
