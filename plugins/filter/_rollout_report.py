# -*- coding: utf-8 -*-
# Copyright (c) modelops.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r'''
name: _rollout_report
short_description: Internal - One host's outcome of the modelops.vllm.rollout role, its report line and its job statistics
version_added: 1.0.0
author: modelops.vllm maintainers (@modelops)
description:
  - Internal to the P(modelops.vllm.rollout#role) role, not an interface of the collection; it may change or go in any
    release.
  - The rollout's twin of P(modelops.vllm._watchdog_results#filter). Takes what the rollout's steps registered on a host
    and returns the error (why the host failed, or an empty string), the host's report line and its C(set_stats) data.
  - >-
    The error is classified from the failed task and its result (C(ansible_failed_task), C(ansible_failed_result) in
    the rescue), unless O(_input.error) already gives it. M(modelops.vllm.restart) says itself what failed (V(the
    restart failed: ...), V(not ready within ...)), so its words are kept as they are; a failed V(Verify) step is
    V(not serving after the restart (<task>: <detail>\)), any other step after the host was touched V(the restart
    failed (<task>: <detail>\)), and a step before that V(<task>: <detail>). The detail is the result's C(msg), else
    its C(stderr), else its verdict (V(verdict <state>: <reason>)), at most 600 characters.
options:
  _input:
    description: The rollout's steps on this host.
    type: dict
    required: true
    suboptions:
      error:
        description: The error already classified (an empty string when the host did not fail). Given, the failed task is not read.
        type: str
      failed_task:
        description: The name of the task that failed (C(ansible_failed_task.name)).
        type: str
      failed:
        description: What the failed task returned (C(ansible_failed_result)).
        type: dict
      touched:
        description: Whether the host was restarted (or a restart was tried) before the failure.
        type: bool
      pause:
        description: The registered result of the pause (M(modelops.vllm.watchdog_pause)).
        type: dict
      would:
        description: The registered result of the restart in check mode (its C(commands)).
        type: dict
      before:
        description: The verdict before the restart (C(state), C(reason)).
        type: dict
      after:
        description: The verdict after the restart (C(state), C(reason)).
        type: dict
  host:
    description: The host's inventory name.
    type: str
    required: true
  what:
    description: What the rollout does to the host, V(restart) or V(upgrade <new environment as JSON>).
    type: str
    required: true
  took:
    description: Seconds the rollout of the host took (rounded to a tenth in the line).
    type: float
    default: 0
  check_mode:
    description: Whether the play runs in check mode.
    type: bool
    default: false
'''

EXAMPLES = r'''
- name: Failed | what went wrong (in the rescue of the rollout's block)
  ansible.builtin.set_fact:
    _vllm_rollout_error: >-
      {{ ({'failed_task': ansible_failed_task.name | default('?'), 'failed': ansible_failed_result,
           'touched': _vllm_rollout_touched} | modelops.vllm._rollout_report(inventory_hostname, _vllm_rollout_what)).error }}

- name: Report | this host
  ansible.builtin.debug:
    msg: "{{ _report.line }}"
  vars:
    _report: >-
      {{ {'error': _vllm_rollout_error, 'pause': _vllm_rollout_pause, 'would': _vllm_rollout_would,
          'before': _vllm_rollout_before, 'after': _vllm_rollout_after}
         | modelops.vllm._rollout_report(inventory_hostname, _vllm_rollout_what,
                                        now().timestamp() - _vllm_rollout_started | float, ansible_check_mode) }}
'''

RETURN = r'''
_value:
  description: The host's outcome.
  type: dict
  contains:
    error:
      description: Why the host failed, or an empty string.
      type: str
    line:
      description: >-
        The host's report line: C(<host>: <what> done in <s> s; was <state>, now <state> (<reason>\)),
        C(<host>: FAILED (<what>\) after <s> s: <error>) or, in check mode, C(<host>: would <what> (check mode; now
        <state>\): <commands>), then a note when the watchdog was already paused by someone else.
      type: str
    stats:
      description: The C(set_stats) data, C(vllm_rollout_done) and C(vllm_rollout_failed) (the host, or no host).
      type: dict
'''

import re

from ansible.errors import AnsibleFilterError

# The words of modelops.vllm.restart when it says itself what failed.
OWN_WORDS = re.compile('(the restart failed|not ready within)')
DETAIL_LENGTH = 600


def _text(value):
    return u'%s' % (value,)


def truncate(text, length=DETAIL_LENGTH, end='...', leeway=5):
    """Jinja's truncate filter with its defaults: a text longer than length + leeway is cut at a word, then end."""
    if len(text) <= length + leeway:
        return text
    return text[:length - len(end)].rsplit(' ', 1)[0] + end


def classify(task, result, touched):
    """Why the host failed, from the failed task's name and what it returned."""
    result = result or {}
    task = _text(task)
    verdict = ''
    if 'state' in result and 'reason' in result:
        verdict = u'verdict %s: %s' % (result['state'], result['reason'])
    detail = truncate(_text(result.get('msg', '') or result.get('stderr', '') or verdict).strip())
    if re.match('Restart', task) and OWN_WORDS.match(detail):
        return detail
    if re.match('Verify', task):
        stage = 'not serving after the restart'
    elif touched:
        stage = 'the restart failed'
    else:
        stage = ''
    if stage:
        return u'%s (%s: %s)' % (stage, task, detail)
    return u'%s: %s' % (task, detail)


def _commands(result):
    return '; '.join(' '.join(_text(arg) for arg in command['argv']) for command in (result or {}).get('commands', []))


def report_line(host, what, error, took, check_mode, pause, would, before, after):
    """The host's one line."""
    if error:
        line = u'%s: FAILED (%s) after %s s: %s' % (host, what, round(float(took), 1), error)
    elif check_mode:
        run = _commands(would)
        line = u'%s: would %s (check mode; now %s)%s' % (host, what, before.get('state', '?'), (': ' + run) if run else '')
    else:
        line = u'%s: %s done in %s s; was %s, now %s (%s)' % (
            host, what, round(float(took), 1), before.get('state', '?'), after.get('state', '?'), after.get('reason', ''))
    if pause.get('found', False) and not pause.get('ours', True):
        line += u'; the watchdog was already paused here (not by a rollout): %s was left as it was' % (pause['path'],)
    return line


def rollout_report(steps, host, what, took=0, check_mode=False):
    if not isinstance(steps, dict):
        raise AnsibleFilterError('rollout_report expects a dict of the rollout steps, got %s' % type(steps).__name__)
    if steps.get('error') is not None:
        error = _text(steps['error'])
    elif steps.get('failed') is not None:
        error = classify(steps.get('failed_task', '?'), steps['failed'], steps.get('touched', False))
    else:
        error = ''
    parts = dict((key, steps.get(key) or {}) for key in ('pause', 'would', 'before', 'after'))
    return {
        'error': error,
        'line': report_line(host, what, error, took, check_mode, **parts),
        'stats': {'vllm_rollout_done': [] if error or check_mode else [host],
                  'vllm_rollout_failed': [host] if error else []},
    }


class FilterModule(object):
    def filters(self):
        return {'_rollout_report': rollout_report}
