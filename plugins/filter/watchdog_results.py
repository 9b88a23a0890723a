# -*- coding: utf-8 -*-
# Copyright (c) modelops.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r'''
name: watchdog_results
short_description: One host's results of the modelops.vllm.watchdog role, in the form of C(vllm_watchdog_results)
version_added: 0.1.0
author: modelops.vllm maintainers (@modelops)
description:
  - Takes what M(modelops.vllm.watchdog_gate) returned for a host (or that it could not run, or that the host did not
    answer) and what the restarts did, and returns one result per instance, the contract documented in the role's
    docs (C(host), C(instance), C(url), C(state), C(reason), C(action), C(decision), C(restarted), C(after),
    C(after_reason), C(failed), C(unreachable), C(line)).
options:
  _input:
    description: The registered result of the gate task (it may be skipped, failed or unreachable).
    type: dict
    required: true
  host:
    description: The host's inventory name.
    type: str
    required: true
  instances:
    description: The host's instances (names and URLs, for a host whose gate did not run).
    type: list
    elements: dict
    required: true
  done:
    description: Per instance name, what its restart did (C(after), C(after_reason), C(error)).
    type: dict
  check_mode:
    description: Whether the play runs in check mode.
    type: bool
  unreachable:
    description: Why the host did not answer (an empty string when it did).
    type: str
'''

EXAMPLES = r'''
- name: This host's results
  ansible.builtin.set_fact:
    vllm_watchdog_results: "{{ gate | modelops.vllm.watchdog_results(inventory_hostname, instances, done) }}"
'''

RETURN = r'''
_value:
  description: One result per instance.
  type: list
  elements: dict
'''

from ansible.errors import AnsibleFilterError

from ansible_collections.modelops.vllm.plugins.module_utils._http import display_url

# What the watchdog did, in words for the one-line report.
WORDS = {
    'none': 'no action',
    'restarted': 'restarted',
    'restart failed': 'restart FAILED',
    'would restart (check mode)': 'would restart (check mode)',
    'fail': 'NEEDS A HUMAN',
    'unreachable': 'host UNREACHABLE, not restarted',
}


def _line(result):
    after = ' -> now %s' % result['after'] if result.get('after') else ''
    what = WORDS.get(result['action'], result['action'])
    return '%s/%s: %s - watchdog: %s (%s)%s' % (result['host'], result['instance'], result['state'], what,
                                                result['decision'], after)


def _one(host, instance, **values):
    result = {'host': host, 'instance': instance.get('name'), 'url': display_url(instance.get('url')),
              'state': 'unknown', 'reason': '', 'action': 'none', 'decision': '', 'restarted': False, 'after': None,
              'after_reason': None, 'failed': False, 'unreachable': False, 'evidence_file': None}
    result.update(values)
    result['line'] = ' '.join(_line(result).split())
    return result


def watchdog_results(gate, host, instances, done=None, check_mode=False, unreachable=''):
    if not isinstance(gate, dict) or not isinstance(instances, (list, tuple)):
        raise AnsibleFilterError('watchdog_results expects the gate result (a dict) and the instances (a list)')
    done = done or {}
    if unreachable or gate.get('unreachable'):
        why = unreachable or str(gate.get('msg') or 'unreachable')
        return [_one(host, i, state='unreachable', action='unreachable', failed=True, unreachable=True,
                     reason='the host does not answer over SSH (%s)' % why[:300],
                     decision='a host that answers nothing (a wedged GB10) is never counted healthy and never '
                              'restarted by this role; look at it, or power-cycle it '
                              '(vllm_watchdog_unreachable_command)') for i in instances]
    decided = dict((d.get('name'), d) for d in gate.get('instances') or [] if isinstance(d, dict))
    out = []
    for instance in instances:
        decision = decided.get(instance.get('name'))
        if decision is None:
            why = str(gate.get('msg') or 'the gate gave no decision for this instance')[:500]
            out.append(_one(host, instance, action='fail', failed=True, decision='the watchdog could not decide: %s' % why))
            continue
        action = decision.get('action') or 'none'
        outcome = done.get(instance.get('name')) or {}
        values = {'state': decision.get('state') or 'unknown', 'reason': decision.get('reason') or '',
                  'decision': decision.get('decision') or '', 'evidence_file': decision.get('evidence_file')}
        if action == 'restart':
            if check_mode:
                values.update(action='would restart (check mode)')
            elif outcome.get('error'):
                values.update(action='restart failed', failed=True,
                              decision='%s; the restart failed: %s' % (values['decision'], str(outcome['error'])[:400]))
            else:
                values.update(action='restarted', restarted=True, after=outcome.get('after'),
                              after_reason=outcome.get('after_reason'))
        else:
            values.update(action=action, failed=action == 'fail')
        out.append(_one(host, instance, **values))
    return out


class FilterModule(object):
    def filters(self):
        return {'watchdog_results': watchdog_results}
