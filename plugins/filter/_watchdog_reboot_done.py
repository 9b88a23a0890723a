# -*- coding: utf-8 -*-
# Copyright (c) modelops.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r'''
name: _watchdog_reboot_done
short_description: Internal - What a host reboot of the modelops.vllm.watchdog role did, per instance
version_added: 1.0.0
author: modelops.vllm maintainers (@modelops)
description:
  - Internal to the P(modelops.vllm.watchdog#role) role, not an interface of the collection; it may change or go in any
    release.
  - Takes what was done per instance name (the role's C(_vllm_watchdog_done)) and returns a copy with what the host
    reboot did merged into each rebooted instance's entry.
  - After the reboot (O(ready) and O(after)), an instance that is not ready again gets C(reboot_error), which says
    that it is not ready after the host reboot and the message of its wait; one that is gets C(after) and
    C(after_reason), its verdict when checked again.
  - When the reboot failed (O(failed_for)), each of those instances gets C(reboot_error) (O(error)) and
    C(unreachable) (O(unreachable)).
options:
  _input:
    description: What was done, per instance name.
    type: dict
    required: true
  ready:
    description: The C(results) of the looped C(action=wait_ready) task, each with its loop item as C(_i).
    type: list
    elements: dict
  after:
    description: The C(results) of the looped check after the reboot, in the same order as O(ready).
    type: list
    elements: dict
  failed_for:
    description: The instance names the reboot was for, when it failed.
    type: list
    elements: str
  error:
    description: Why the reboot failed (with O(failed_for)).
    type: str
  unreachable:
    description: Whether the host did not come back (with O(failed_for)).
    type: bool
    default: false
'''

EXAMPLES = r'''
- name: What the reboot did
  ansible.builtin.set_fact:
    done: "{{ done | modelops.vllm._watchdog_reboot_done(ready.results, after.results) }}"

- name: What the reboot did, when it failed
  ansible.builtin.set_fact:
    done: "{{ done | modelops.vllm._watchdog_reboot_done(failed_for=names, error=why, unreachable=gone) }}"
'''

RETURN = r'''
_value:
  description: What was done, per instance name, with the reboot's outcome merged in.
  type: dict
'''

from ansible.errors import AnsibleFilterError


def is_ready(result):
    """Whether one wait_ready result says the server is ready: ready.ok, with ready missing or empty as not."""
    return bool((result.get('ready') or {}).get('ok', False))


def _merge(done, name, outcome):
    entry = dict(done.get(name) or {})
    entry.update(outcome)
    done[name] = entry


def watchdog_reboot_done(done, ready=None, after=None, failed_for=None, error=None, unreachable=False):
    if not isinstance(done, dict):
        raise AnsibleFilterError('watchdog_reboot_done expects a dict of what was done, got %s' % type(done).__name__)
    out = dict(done)
    if failed_for is not None:
        if ready is not None or after is not None:
            raise AnsibleFilterError('watchdog_reboot_done: give either ready and after, or failed_for')
        if not isinstance(failed_for, (list, tuple)):
            raise AnsibleFilterError('watchdog_reboot_done: failed_for must be a list of names')
        for name in failed_for:
            _merge(out, name, {'reboot_error': error, 'unreachable': unreachable})
        return out
    ready = [] if ready is None else ready
    after = [] if after is None else after
    if not isinstance(ready, (list, tuple)) or not isinstance(after, (list, tuple)):
        raise AnsibleFilterError('watchdog_reboot_done: ready and after must be lists of results')
    for index, result in enumerate(ready):
        try:
            name = result['_i']['name']
        except (KeyError, TypeError):
            raise AnsibleFilterError('watchdog_reboot_done: a wait_ready result without its instance (_i.name)')
        if not is_ready(result):
            outcome = {'reboot_error': 'not ready after the host reboot: %s' % (result.get('msg', '?'),)}
        else:
            checked = (after[index] if index < len(after) else None) or {}  # no check: no verdict after it
            outcome = {'after': checked.get('state'), 'after_reason': checked.get('reason')}
        _merge(out, name, outcome)
    return out


class FilterModule(object):
    def filters(self):
        return {'_watchdog_reboot_done': watchdog_reboot_done}
