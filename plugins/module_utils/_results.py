# -*- coding: utf-8 -*-
# Copyright (c) modelops.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

"""The results of the watchdog role on one host, in the form of ``vllm_watchdog_results`` (the contract).

Private to this collection. Used by ``modelops.vllm.watchdog_gate`` (which returns them as the host's
fact, so that a healthy host needs no other task) and by the ``watchdog_results`` filter (after a
restart, and for a host that did not answer).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.modelops.vllm.plugins.module_utils._urls import display_url

# What the watchdog did, in words for the one-line report.
WORDS = {
    'none': 'no action',
    'restarted': 'restarted',
    'restart failed': 'restart FAILED',
    'would restart (check mode)': 'would restart (check mode)',
    'restart stopped': 'restart STOPPED, NEEDS A HUMAN',
    'rebooted': 'REBOOTED the host',
    'reboot failed': 'reboot FAILED',
    'would reboot (check mode)': 'would reboot the host (check mode)',
    'fail': 'NEEDS A HUMAN',
    'unreachable': 'host UNREACHABLE, not restarted',
}


def _line(result):
    after = ' -> now %s' % result['after'] if result.get('after') else ''
    what = WORDS.get(result['action'], result['action'])
    evidence = ' [evidence %s: %s]' % (result['evidence_file'], result['evidence']) \
        if result.get('evidence_file') and result.get('evidence') else ''
    state = result['state']
    if state == 'unknown' and result.get('reason'):
        # Why the check could not judge (HTTP 401 (check api_key), a timeout): the one thing to fix.
        reason = ' '.join(str(result['reason']).split())
        state = 'unknown (%s)' % (reason if len(reason) <= 200 else reason[:197] + '...')
    return '%s/%s: %s - watchdog: %s (%s)%s%s' % (result['host'], result['instance'], state, what,
                                                  result['decision'], after, evidence)


def _one(host, instance, **values):
    result = {'host': host, 'instance': instance.get('name'), 'url': display_url(instance.get('url')),
              'state': 'unknown', 'reason': '', 'action': 'none', 'decision': '', 'restarted': False, 'after': None,
              'after_reason': None, 'failed': False, 'unreachable': False, 'evidence_file': None,
              'textfile_error': None, 'rebooted': False, 'evidence': None}
    result.update(values)
    result['line'] = ' '.join(_line(result).split())
    return result


def watchdog_results(gate, host, instances, done=None, check_mode=False, unreachable=''):
    """One result per instance from the gate's result (or its failure, or an unreachable host) and the restarts' outcomes."""
    if not isinstance(gate, dict) or not isinstance(instances, (list, tuple)):
        raise ValueError('watchdog_results expects the gate result (a dict) and the instances (a list)')
    if not all(isinstance(i, dict) for i in instances) or not isinstance(done or {}, dict):
        raise ValueError('watchdog_results expects every instance as a dict and the restarts done as a dict by name')
    done = done or {}
    if unreachable or gate.get('unreachable'):
        why = unreachable or str(gate.get('msg') or 'unreachable')
        return [_one(host, i, state='unreachable', action='unreachable', failed=True, unreachable=True,
                     reason='the host does not answer over SSH (%s)' % why[:300],
                     decision='a host that answers nothing (a wedged GB10) is never counted healthy and never '
                              'restarted by this role; look at it, or power-cycle it '
                              '(vllm_watchdog_unreachable_command)') for i in instances]
    decided = dict((d.get('name'), d) for d in gate.get('instances') or [] if isinstance(d, dict))
    # The host's node_exporter textfile (one per host) that could not be written: every instance of the host says it.
    textfile_error = gate.get('textfile_error') or None
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
                  'decision': decision.get('decision') or '', 'evidence_file': decision.get('evidence_file'),
                  'evidence': decision.get('evidence'), 'textfile_error': textfile_error}
        if outcome.get('ranks_evidence'):
            # An instance across hosts: where the other ranks' evidence is kept, on their hosts, and what it holds.
            values['evidence'] = '; '.join(w for w in (values['evidence'], 'the other ranks: %s'
                                                       % str(outcome['ranks_evidence'])[:800]) if w)
        if action == 'restart' and outcome.get('escalated') and not check_mode:
            # The restart stopped vLLM and its memory did not come back: not started; the gate took the next step.
            error, escalation = str(outcome.get('error') or '')[:400], str(outcome.get('escalation') or '')[:800]
            # The gate's reason for the next step names what failed already: say it once.
            values['decision'] = ('%s; then: %s' % (values['decision'], escalation) if error.strip() in escalation
                                  else '%s; %s; then: %s' % (values['decision'], error, escalation))
            if outcome['escalated'] == 'reboot':
                action = 'reboot'
            else:
                values.update(action='restart stopped', failed=True)
        if values.get('action'):
            pass
        elif action == 'restart':
            if check_mode:
                values.update(action='would restart (check mode)')
            elif outcome.get('error'):
                values.update(action='restart failed', failed=True,
                              decision='%s; the restart failed: %s' % (values['decision'], str(outcome['error'])[:400]))
            else:
                values.update(action='restarted', restarted=True, after=outcome.get('after'),
                              after_reason=outcome.get('after_reason'))
        elif action == 'reboot':
            if check_mode:
                values.update(action='would reboot (check mode)')
            elif outcome.get('reboot_error'):
                values.update(action='reboot failed', failed=True, unreachable=bool(outcome.get('unreachable')),
                              decision='%s; the reboot failed: %s'
                              % (values['decision'], str(outcome['reboot_error'])[:400]))
            else:
                values.update(action='rebooted', rebooted=True, after=outcome.get('after'),
                              after_reason=outcome.get('after_reason'))
        else:
            values.update(action=action, failed=action == 'fail')
        out.append(_one(host, instance, **values))
    return out
