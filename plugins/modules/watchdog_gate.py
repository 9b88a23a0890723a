#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) modelops.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r'''
---
module: watchdog_gate
short_description: Decide, under a host lock, whether the vLLM watchdog may restart a server
version_added: 0.1.0
description:
  - The one place that decides a restart for the P(modelops.vllm.watchdog#role) role. Given the verdict of
    M(modelops.vllm.health) and what the service manager says, it applies the guard rails and, when the answer is
    to restart, records the restart in the host's watchdog history before it returns.
  - The decision and the record happen under an exclusive lock on the host (C(flock) on a file in O(state_dir)), so two
    watchdog runs at the same time (a schedule and an ad-hoc run) restart a stuck server at most once; the second
    run finds the first one's restart inside the start-up grace.
  - Guard rails. Restart only on V(stuck), or on V(down) when the service is not running, or has been running longer than
    O(startup_grace) without answering. Never within O(startup_grace) of the service's start or of the last restart.
    A cooldown after each restart that doubles with every restart in O(restart_window). Past O(max_restarts) in the
    window, no restart and RV(action=fail). V(unknown) never restarts; O(unknown_limit) of them in a row give
    RV(action=fail). A pause (O(paused), or a pause file) reports only.
  - It does not restart anything itself; the role does, when RV(action=restart).
author:
  - modelops.vllm maintainers (@modelops)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: full
    details:
      - In check mode it decides and returns the action, and records nothing.
  diff_mode:
    support: none
  platform:
    platforms: posix
options:
  name:
    description:
      - Name of the vLLM instance on this host; the history is kept per name.
    type: str
    required: true
  state_dir:
    description:
      - Directory on the host for the history (C(<name>.json)), the lock (C(<name>.lock)) and the pause file.
    type: path
    required: true
  state:
    description:
      - The verdict of M(modelops.vllm.health) (RV(modelops.vllm.health#module:state)).
    type: str
    required: true
    choices: [idle, busy, stuck, restarted, starting, down, sleeping, up, unknown]
  reason:
    description:
      - The verdict's reason, kept in the history.
    type: str
    default: ''
  service:
    description:
      - What the service manager says about the vLLM service.
    type: dict
    default: {}
    suboptions:
      running:
        description:
          - Whether the service (unit, container) is running. Leave out when it cannot be known.
        type: bool
      started_at:
        description:
          - When it last started, in seconds since the epoch, as systemd's V(@1796004614), or as Docker's
            RFC 3339 V(2026-11-30T02:10:52.123456789Z).
        type: raw
      status:
        description:
          - The service manager's own word for its state (for example V(active/running), V(exited), V(failed)).
        type: str
  startup_grace:
    description:
      - Seconds after a start (or a restart) during which the server is never restarted (weights load for minutes).
    type: float
    default: 900
  cooldown:
    description:
      - Seconds after a restart before the next one may happen; doubles for every further restart in the window.
    type: float
    default: 600
  max_restarts:
    description:
      - Restarts allowed in O(restart_window). Past it, no restart and RV(action=fail).
    type: int
    default: 3
  restart_window:
    description:
      - The window, in seconds, of the restart budget and the cooldown.
    type: float
    default: 86400
  unknown_limit:
    description:
      - After this many V(unknown) verdicts in a row, RV(action=fail) (a human should look). Never a restart.
    type: int
    default: 3
  paused:
    description:
      - Report only. The file C(<state_dir>/paused) or C(<state_dir>/<name>.paused) on the host pauses the watchdog too.
    type: bool
    default: false
  lock_timeout:
    description:
      - Seconds to wait for the host lock held by another watchdog run.
    type: float
    default: 60
'''

EXAMPLES = r'''
- name: Check the server
  modelops.vllm.health:
    url: http://127.0.0.1:8000
  register: vllm

- name: Decide what to do about it
  modelops.vllm.watchdog_gate:
    name: vllm
    state_dir: /var/lib/vllm-watchdog
    state: "{{ vllm.state }}"
    reason: "{{ vllm.reason }}"
    service:
      running: true
      started_at: 1796004614
      status: active/running
  register: gate

- name: Restart only when the gate says so
  ansible.builtin.command: systemctl restart vllm
  when: gate.action == 'restart'
  changed_when: true
'''

RETURN = r'''
action:
  description: V(none), V(restart) (recorded; the caller restarts) or V(fail) (a human is needed).
  returned: always
  type: str
  sample: none
reason:
  description: One plain sentence saying why.
  returned: always
  type: str
  sample: stuck, but in cooldown - the last restart was 12m00s ago and the cooldown is now 20m00s
paused:
  description: Whether the watchdog was paused (by O(paused) or a pause file).
  returned: always
  type: bool
  sample: false
restarts_in_window:
  description: Restarts in the window, this one included when RV(action=restart).
  returned: always
  type: int
  sample: 1
budget_left:
  description: Restarts left in the window.
  returned: always
  type: int
  sample: 2
cooldown:
  description: The cooldown in force after the last restart, in seconds.
  returned: always
  type: float
  sample: 600.0
uptime:
  description: Seconds since the service started, when known.
  returned: always
  type: float
  sample: 3600.5
history:
  description: The history as kept on the host after this decision.
  returned: always
  type: dict
  sample: {"restarts": [1796004614.0], "unknown_streak": 0, "last_state": "stuck", "last_check": 1796004614.0}
waited_for_lock:
  description: Seconds spent waiting for another run's lock.
  returned: always
  type: float
  sample: 0.0
'''

import errno
import fcntl
import json
import os
import tempfile
import time

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.modelops.vllm.plugins.module_utils._decide import DEFAULTS, decide


def _read_history(path):
    try:
        with open(path) as handle:
            return json.load(handle)
    except (IOError, OSError) as exc:
        if exc.errno == errno.ENOENT:
            return None
        raise
    except ValueError:
        return None


def _write_history(path, history):
    directory = os.path.dirname(path)
    fd, tmp = tempfile.mkstemp(dir=directory, prefix='.history-')
    try:
        with os.fdopen(fd, 'w') as handle:
            json.dump(history, handle, indent=1, sort_keys=True)
            handle.flush()
            os.fsync(handle.fileno())
        os.rename(tmp, path)
    except Exception:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def _pause_note(state_dir, name):
    """'pause file PATH: first line' when a pause file exists, else None."""
    for path in (os.path.join(state_dir, '%s.paused' % name), os.path.join(state_dir, 'paused')):
        if os.path.exists(path):
            try:
                with open(path) as handle:
                    first = handle.read(300).strip().splitlines()
            except (IOError, OSError):
                first = []
            return 'pause file %s%s' % (path, ': %s' % first[0] if first else '')
    return None


def _lock(handle, timeout):
    started = time.time()
    while True:
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            return time.time() - started
        except (IOError, OSError) as exc:
            if exc.errno not in (errno.EAGAIN, errno.EACCES):
                raise
        if time.time() - started > timeout:
            return None
        time.sleep(0.1)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            name=dict(type='str', required=True),
            state_dir=dict(type='path', required=True),
            state=dict(type='str', required=True,
                       choices=['idle', 'busy', 'stuck', 'restarted', 'starting', 'down', 'sleeping', 'up', 'unknown']),
            reason=dict(type='str', default=''),
            service=dict(type='dict', default={}, options=dict(
                running=dict(type='bool'),
                started_at=dict(type='raw'),
                status=dict(type='str'),
            )),
            startup_grace=dict(type='float', default=900),
            cooldown=dict(type='float', default=600),
            max_restarts=dict(type='int', default=3),
            restart_window=dict(type='float', default=86400),
            unknown_limit=dict(type='int', default=3),
            paused=dict(type='bool', default=False),
            lock_timeout=dict(type='float', default=60),
        ),
        supports_check_mode=True,
    )
    p = module.params
    name = p['name']
    if not name or '/' in name or name.startswith('.'):
        module.fail_json(msg='name must be a plain instance name, got %r' % name)
    state_dir = p['state_dir']
    settings = dict((key, p[key]) for key in DEFAULTS)
    if not os.path.isdir(state_dir):
        if module.check_mode:
            # Nothing recorded yet: decide from an empty history, create nothing.
            decision = decide(p['state'], p['service'], None, time.time(), settings, paused=p['paused'])
            module.exit_json(changed=False, paused=p['paused'], waited_for_lock=0.0, **decision)
        try:
            os.makedirs(state_dir, 0o750)
        except OSError as exc:
            module.fail_json(msg='cannot create state_dir %s: %s' % (state_dir, exc))

    lock_path = os.path.join(state_dir, '%s.lock' % name)
    history_path = os.path.join(state_dir, '%s.json' % name)
    with open(lock_path, 'a') as lock_handle:
        waited = _lock(lock_handle, p['lock_timeout'])
        if waited is None:
            module.fail_json(msg='another watchdog run holds %s for more than %s s' % (lock_path, p['lock_timeout']))
        # The pause is read under the lock: a rollout that pauses the watchdog and then waits for
        # this lock knows that no restart is decided after its pause.
        pause_note = _pause_note(state_dir, name)
        paused = p['paused'] or pause_note is not None
        decision = decide(p['state'], p['service'], _read_history(history_path), time.time(), settings,
                          paused=paused)
        if pause_note:
            decision['reason'] += ' (%s)' % pause_note
        history = decision['history']
        history['last_reason'] = p['reason'][:500]
        history['last_action'] = decision['action']
        if not module.check_mode:
            _write_history(history_path, history)
        # The lock is released when the file is closed, after the history is on disk.
    module.exit_json(changed=False, paused=paused, waited_for_lock=round(waited, 3), **decision)


if __name__ == '__main__':
    main()
