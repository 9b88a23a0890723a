#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) modelops.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r'''
---
module: watchdog_pause
short_description: Pause or resume the vLLM watchdog on a host, the way the watchdog's own lock expects
version_added: 1.0.0
description:
  - Writes or removes the pause file C(<state_dir>/paused) that the P(modelops.vllm.watchdog#role) role honours (the
    watchdog restarts nothing on the host while it exists), for work on the host such as a rollout.
  - After writing the pause, it takes and releases each instance's lock (C(<state_dir>/<name>.lock)) once, so a
    watchdog run that was deciding right then has finished, and every later decision sees the pause.
  - A pause file it did not write (without its O(owner) marker, for example an empty file a human touched) is never
    changed or removed; RV(ours) says so.
  - The same safe file handling as M(modelops.vllm.watchdog_gate). No symbolic link is followed, and a state directory
    writable by group or others is refused.
author:
  - modelops.vllm maintainers (@modelops)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: full
    details:
      - In check mode it says whether the pause would be written or removed, and changes nothing.
  diff_mode:
    support: none
  platform:
    platforms: posix
options:
  state_dir:
    description: The watchdog's state directory on the host.
    type: path
    required: true
  state:
    description:
      - V(present) pauses, V(absent) resumes (removes the pause if it is this owner's), V(failed) keeps the pause with
        a reason for a human (the work did not complete).
    type: str
    choices: [present, absent, failed]
    default: present
  reason:
    description: Why, written into the pause file (the watchdog shows its first line).
    type: str
    default: ''
  details:
    description: More lines for the pause file, one per key and value (for a human), for example the commands a rollout ran.
    type: dict
    default: {}
  owner:
    description: Who pauses; a pause file is this owner's when it carries C(paused_by <owner>).
    type: str
    default: modelops.vllm rollout
  names:
    description:
      - The instances whose locks to wait for after pausing (V(present) only; V(failed) keeps a pause that is already in
        force, and waits for nothing).
    type: list
    elements: str
    default: [vllm]
  lock_timeout:
    description: Seconds to wait for each lock.
    type: float
    default: 60
'''

EXAMPLES = r'''
- name: Pause the watchdog while this host is worked on
  modelops.vllm.watchdog_pause:
    state_dir: /var/lib/vllm-watchdog
    reason: rolling upgrade to vllm/vllm-openai:v0.11.0
  register: pause

- name: Resume it
  modelops.vllm.watchdog_pause:
    state_dir: /var/lib/vllm-watchdog
    state: absent
'''

RETURN = r'''
path:
  description: The pause file.
  returned: always
  type: str
  sample: /var/lib/vllm-watchdog/paused
found:
  description: Whether a pause file was there before.
  returned: always
  type: bool
ours:
  description: Whether the pause file is (or would be) this owner's to write and remove; false for a human's pause.
  returned: always
  type: bool
waited_for_lock:
  description: Seconds spent waiting for the instances' locks.
  returned: always
  type: float
'''

import json
import math
import os
import time

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.modelops.vllm.plugins.module_utils import _statedir as statedir


def main():
    module = AnsibleModule(
        argument_spec=dict(
            state_dir=dict(type='path', required=True),
            state=dict(type='str', default='present', choices=['present', 'absent', 'failed']),
            reason=dict(type='str', default=''),
            owner=dict(type='str', default='modelops.vllm rollout'),
            details=dict(type='dict', default={}),
            names=dict(type='list', elements='str', default=['vllm']),
            lock_timeout=dict(type='float', default=60),
        ),
        supports_check_mode=True,
    )
    p = module.params
    path = statedir.paths(p['state_dir'])['paused']
    marker = 'paused_by: %s' % p['owner']
    if math.isnan(p['lock_timeout']) or not 0 <= p['lock_timeout'] <= 86400:
        module.fail_json(msg='lock_timeout must be from 0 to 86400, got %s' % p['lock_timeout'])
    if any('/' in name or name.startswith('.') or not name for name in p['names']):
        module.fail_json(msg='names must be plain instance names, got %s' % ', '.join(map(repr, p['names'])))
    try:
        exists = statedir.check_dir(p['state_dir'], create=p['state'] != 'absent' and not module.check_mode)
    except statedir.StateError as exc:
        module.fail_json(msg=str(exc))
    found = statedir.exists(path)
    try:
        text = statedir.read_text(path) if found else None
    except (statedir.StateError, OSError):
        text = ''  # not a regular file, or not readable: something a human put there, theirs
    ours = not found or marker in (text or '')
    result = dict(path=path, found=found, ours=ours, waited_for_lock=0.0, changed=False)
    if not ours or module.check_mode or (p['state'] == 'absent' and not exists):
        module.exit_json(**result)
    try:
        if p['state'] == 'absent':
            result['changed'] = statedir.remove(path)
            module.exit_json(**result)
        content = ('# The vLLM watchdog is paused on this host (%s).\n%s\nsince: %s\nstate: %s\nreason: %s\n'
                   % ('remove this file to resume it' if p['state'] == 'failed' else 'it resumes when the work is done',
                      marker, time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime()),
                      'failed' if p['state'] == 'failed' else 'in progress', json.dumps(p['reason'])))
        content += ''.join('%s: %s\n' % (str(key).replace('\n', ' ')[:100], json.dumps(value))
                           for key, value in sorted(p['details'].items()))
        statedir.write_text(path, content, mode=0o644)
        result['changed'] = True
        if p['state'] == 'failed':
            module.exit_json(**result)
        waited = 0.0
        for name in p['names']:
            fd = statedir.open_lock(statedir.paths(p['state_dir'], name)['lock'])
            try:
                seconds = statedir.lock(fd, p['lock_timeout'])
            finally:
                os.close(fd)
            if seconds is None:
                module.fail_json(msg='paused, but a watchdog run still holds the lock of %s after %s s'
                                 % (name, p['lock_timeout']), **result)
            waited += seconds
        result['waited_for_lock'] = round(waited, 3)
    except (statedir.StateError, OSError) as exc:
        module.fail_json(msg='cannot %s the watchdog: %s' % ('resume' if p['state'] == 'absent' else 'pause', exc),
                         **result)
    module.exit_json(**result)


if __name__ == '__main__':
    main()
