# -*- coding: utf-8 -*-
# Copyright (c) modelops.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r'''
name: _watchdog_history
short_description: Internal - The fleet's watchdog history, as the playbook modelops.vllm.history prints it
version_added: 0.1.0
author: modelops.vllm maintainers (@modelops)
description:
  - Internal to the playbook C(modelops.vllm.history) and the P(modelops.vllm.local_timer#role) role, not an interface
    of the collection; it may change or go in any release.
  - Takes the host names of the play (C(ansible_play_hosts_all)) and gathers what M(modelops.vllm.watchdog_history)
    returned on each (the registered variable O(register)), in the order of the hosts, and a headline for the fleet.
  - A host whose history could not be read (it did not answer, the module failed) is a line of its own, never left
    out.
options:
  _input:
    description: The host names of the play.
    type: list
    elements: str
    required: true
  hostvars:
    description: The C(hostvars) of the play.
    type: dict
    required: true
  register:
    description: The name of the variable the history task registered on each host.
    type: str
    default: _vllm_history
'''

EXAMPLES = r'''
- name: The fleet's history, one line per event and a headline
  ansible.builtin.debug:
    msg: "{{ _report.lines + [_report.headline] }}"
  vars:
    _report: "{{ ansible_play_hosts_all | modelops.vllm._watchdog_history(hostvars) }}"
  run_once: true
'''

RETURN = r'''
_value:
  description: The report.
  type: dict
  contains:
    lines:
      description: Every host's lines, host by host.
      type: list
      elements: str
    headline:
      description: One line for the fleet.
      type: str
    restarts:
      description: C(<host>/<instance>) of every instance restarted in the window, with the count (C(gb10-01/vllm (2))).
      type: list
      elements: str
    reboots:
      description: C(<host>/<instance>) of every instance whose host was rebooted in the window, with the count.
      type: list
      elements: str
    needs_human:
      description: C(<host>/<instance>) of every instance with a run in the window that asked a human, or a failed restart
        recorded now.
      type: list
      elements: str
    not_read:
      description: The hosts whose history could not be read, and why.
      type: list
      elements: str
'''

from ansible.errors import AnsibleFilterError

from ansible_collections.modelops.vllm.plugins.plugin_utils._hostvars import each_host


def _said(text, limit=500):
    return ' '.join(str(text).split())[:limit]


def watchdog_history(hosts, hostvars, register='_vllm_history'):
    lines, restarts, reboots, human, not_read = [], [], [], [], []
    instances = runs = 0
    since = None
    for host, variables in each_host(hosts, hostvars, 'watchdog_history'):
        result = variables.get(register)
        if not isinstance(result, dict) or result.get('skipped'):
            not_read.append('%s (no result: it failed before the history was read)' % host)
            lines.append('%s/*: history NOT READ: the host failed before its history was read (see above)' % host)
            continue
        if result.get('unreachable') or result.get('failed'):
            why = _said(result.get('msg') or 'no message')
            word = 'UNREACHABLE' if result.get('unreachable') else 'NOT READ'
            not_read.append('%s (%s)' % (host, why))
            lines.append('%s/*: history %s: %s' % (host, word, why))
            continue
        said = result.get('lines')
        if not isinstance(said, list):
            raise AnsibleFilterError('watchdog_history: the result of %s has no list of lines' % host)
        lines.extend(str(line) for line in said)
        since = since or result.get('since')
        for item in result.get('instances') or []:
            if not isinstance(item, dict):
                continue
            who = '%s/%s' % (host, item.get('name'))
            instances += 1
            runs += int(item.get('runs') or 0)
            if item.get('restarts'):
                restarts.append('%s (%d)' % (who, item['restarts']))
            if item.get('reboots'):
                reboots.append('%s (%d)' % (who, item['reboots']))
            if item.get('needs_human') or item.get('failed_restart'):
                human.append(who)
    window = 'since %s' % since if since else 'in all its history'
    named = [', '.join(items) or 'none' for items in (restarts, reboots, human, [h.split(' ', 1)[0] for h in not_read])]
    headline = ('vLLM watchdog history %s: %d instance(s) on %d host(s), %d run(s); restarts: %s; host reboots: %s; '
                'asked a human: %s; not read: %s' % tuple([window, instances, len(hosts) - len(not_read), runs] + named))
    return {'lines': lines, 'headline': headline, 'restarts': restarts, 'reboots': reboots, 'needs_human': human,
            'not_read': not_read}


class FilterModule(object):
    def filters(self):
        return {'_watchdog_history': watchdog_history}
