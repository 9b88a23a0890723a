"""The rollout's error, report line and job statistics (the filter rollout_report), table-driven; every row is also
rendered by the Jinja the role had before the filter (roles/rollout/tasks/main.yml, issue 18), which must agree."""

import re

import jinja2
import jinja2.meta
import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.modelops.vllm.plugins.filter._rollout_report import FilterModule, rollout_report, truncate

HOST = 'gb10-01'
UPGRADE = 'upgrade {"VLLM_IMAGE": "vllm/vllm-openai:v0.11.0"}'
RESTART_TASK = 'Restart | by its method, then wait until it serves its model'
VERIFY_TASK = 'Verify | the server serves again'
PAUSE_TASK = 'Pause | pause the watchdog, and wait for a watchdog run that is deciding right now'
IDLE_TASK = 'Idle | stop here, the server is still busy (vllm_rollout_when_busy is stop)'
LONG = ' '.join(['word%03d' % i for i in range(150)])  # 1199 characters: cut at a word

# --------------------------------------------------------------------------- the Jinja of the role before the filter

_ERROR = (
    "{{ _detail if _own_words else (_stage ~ ' (' ~ _task ~ ': ' ~ _detail ~ ')') if _stage | length > 0 "
    "else (_task ~ ': ' ~ _detail) }}")
_ERROR_VARS = {
    '_task': "{{ ansible_failed_task.name | default('?') }}",
    '_verdict': ("{{ ('verdict ' ~ ansible_failed_result.state ~ ': ' ~ ansible_failed_result.reason) "
                 "if ansible_failed_result.state is defined and ansible_failed_result.reason is defined else '' }}"),
    '_detail': ("{{ (ansible_failed_result.msg | default('') or ansible_failed_result.stderr | default('') or _verdict)"
                " | string | trim | truncate(600) }}"),
    '_own_words': "{{ _task is match('Restart') and _detail is match('(the restart failed|not ready within)') }}",
    '_stage': ("{{ 'not serving after the restart' if _task is match('Verify') "
               "else 'the restart failed' if _vllm_rollout_touched else '' }}"),
}
_LINE = "{{ (_failed if _vllm_rollout_error | length > 0 else (_would if ansible_check_mode else _done)) ~ _note }}"
_LINE_VARS = {
    '_took': "{{ _took_seconds | round(1) }}",
    '_failed': "{{ inventory_hostname }}: FAILED ({{ _vllm_rollout_what }}) after {{ _took }} s: {{ _vllm_rollout_error }}",
    '_would_run': "{{ _vllm_rollout_would.commands | default([]) | map(attribute='argv') | map('join', ' ') | join('; ') }}",
    '_would': ("{{ inventory_hostname }}: would {{ _vllm_rollout_what }} (check mode; now "
               "{{ _vllm_rollout_before.state | default('?') }}){{ (': ' ~ _would_run) if _would_run else '' }}"),
    '_done': ("{{ inventory_hostname }}: {{ _vllm_rollout_what }} done in {{ _took }} s; was "
              "{{ _vllm_rollout_before.state | default('?') }}, now {{ _vllm_rollout_after.state | default('?') }} "
              "({{ _vllm_rollout_after.reason | default('') }})"),
    '_note': ("{{ ('; the watchdog was already paused here (not by a rollout): ' ~ _vllm_rollout_pause.path ~ "
              "' was left as it was') if (_vllm_rollout_pause.found | default(false)) "
              "and not (_vllm_rollout_pause.ours | default(true)) else '' }}"),
}


def _render(template, names, context):
    """A task's template with its task vars (each rendered when first read, as Ansible does)."""
    env = jinja2.Environment(undefined=jinja2.ChainableUndefined)
    env.tests['match'] = lambda value, pattern: re.match(pattern, value) is not None
    values = dict(context)

    def evaluate(text):
        needed = jinja2.meta.find_undeclared_variables(env.parse(text))
        scope = {n: value(n) for n in needed if n in names or n in values}
        if text.startswith('{{') and text.endswith('}}') and text.count('{{') == 1:
            return env.compile_expression(text[2:-2])(**scope)  # one expression: its value, typed (a bool stays one)
        return env.from_string(text).render(scope)

    def value(name):
        if name not in values:
            values[name] = evaluate(names[name])
        return values[name]

    return evaluate(template)


def old_error(task, result, touched):
    context = {'ansible_failed_result': result, '_vllm_rollout_touched': touched}
    if task is not None:
        context['ansible_failed_task'] = {'name': task}
    return _render(_ERROR, _ERROR_VARS, context)


def old_line(error, took, check_mode, pause, would, before, after):
    context = {'inventory_hostname': HOST, '_vllm_rollout_what': UPGRADE, '_vllm_rollout_error': error,
               '_took_seconds': took, 'ansible_check_mode': check_mode, '_vllm_rollout_pause': pause,
               '_vllm_rollout_before': before, '_vllm_rollout_after': after}
    if would is not None:
        context['_vllm_rollout_would'] = would
    return _render(_LINE, _LINE_VARS, context)


# --------------------------------------------------------------------------- the error

NOT_READY = 'not ready within 900.0 s of the restart: /health answered nothing (Connection refused)'
RESTART_FAILED = 'the restart failed: systemctl daemon-reload exited 1: bad unit; the commands after it were not run'


@pytest.mark.parametrize('task, result, touched, expected', [
    # modelops.vllm.restart's own words, kept as they are.
    (RESTART_TASK, {'msg': NOT_READY}, True, NOT_READY),
    (RESTART_TASK, {'msg': RESTART_FAILED}, True, RESTART_FAILED),
    ('Restart | wait until it serves its model, from the controller', {'msg': '  %s\n' % NOT_READY}, True, NOT_READY),
    # A Restart task in other words: the restart failed, with the task.
    (RESTART_TASK, {'msg': 'unexpected: boom'}, True, 'the restart failed (%s: unexpected: boom)' % RESTART_TASK),
    # Own words only at the start, and only from a Restart task.
    (RESTART_TASK, {'msg': 'so: not ready within 5 s'}, True,
     'the restart failed (%s: so: not ready within 5 s)' % RESTART_TASK),
    ('Upgrade | the systemd drop-in directory', {'msg': NOT_READY}, True,
     'the restart failed (Upgrade | the systemd drop-in directory: %s)' % NOT_READY),
    # Verify: not serving after the restart, touched or not; its detail from the verdict when there is no msg.
    (VERIFY_TASK, {'state': 'down', 'reason': 'connection refused'}, True,
     'not serving after the restart (%s: verdict down: connection refused)' % VERIFY_TASK),
    (VERIFY_TASK, {'msg': '', 'stderr': '', 'state': 'stuck', 'reason': 'no progress in 60 s'}, False,
     'not serving after the restart (%s: verdict stuck: no progress in 60 s)' % VERIFY_TASK),
    ('Verify | a new process serves (its start time changed)', {'msg': 'the server that answers is the old one'}, True,
     'not serving after the restart (Verify | a new process serves (its start time changed): '
     'the server that answers is the old one)'),
    # Not touched: the task and its detail.
    (PAUSE_TASK, {'msg': 'the lock was not free within 60 s'}, False, '%s: the lock was not free within 60 s' % PAUSE_TASK),
    (IDLE_TASK, {'msg': 'the server did not become idle'}, False, '%s: the server did not become idle' % IDLE_TASK),
    # The detail: msg, else stderr, else the verdict (a verdict needs both state and reason), else nothing.
    ('Upgrade | pull the new image while the server still serves', {'msg': None, 'stderr': 'pull access denied\n'},
     False, 'Upgrade | pull the new image while the server still serves: pull access denied'),
    (PAUSE_TASK, {'state': 'down'}, False, '%s: ' % PAUSE_TASK),
    (PAUSE_TASK, {}, False, '%s: ' % PAUSE_TASK),
    (PAUSE_TASK, {'msg': ['a', 'list']}, False, "%s: ['a', 'list']" % PAUSE_TASK),
    # No task name: '?'.
    (None, {'msg': 'boom'}, False, '?: boom'),
    (None, {'msg': 'boom'}, True, 'the restart failed (?: boom)'),
    # A long detail: at most 600 characters, cut at a word.
    (PAUSE_TASK, {'msg': LONG}, False, '%s: %s...' % (PAUSE_TASK, LONG[:597].rsplit(' ', 1)[0])),
    (PAUSE_TASK, {'msg': LONG[:605]}, False, '%s: %s' % (PAUSE_TASK, LONG[:605])),
])
def test_the_error(task, result, touched, expected):
    steps = {'failed': result, 'touched': touched}
    if task is not None:
        steps['failed_task'] = task
    report = rollout_report(steps, HOST, UPGRADE)
    assert report['error'] == expected
    assert report['error'] == old_error(task, result, touched)
    assert report['stats'] == {'vllm_rollout_done': [], 'vllm_rollout_failed': [HOST]}


def test_an_error_given_is_not_classified_again():
    steps = {'error': 'given', 'failed_task': PAUSE_TASK, 'failed': {'msg': 'other'}}
    assert rollout_report(steps, HOST, UPGRADE)['error'] == 'given'
    assert rollout_report({'error': ''}, HOST, UPGRADE)['error'] == ''
    assert rollout_report({}, HOST, UPGRADE)['error'] == ''


@pytest.mark.parametrize('length', [0, 3, 599, 600, 605, 606, 700])
def test_truncate_is_jinjas(length):
    text = ('abc ' * 200)[:length]
    assert truncate(text) == jinja2.Environment().from_string('{{ t | truncate(600) }}').render(t=text)


# --------------------------------------------------------------------------- the line and the statistics

OURS = {'found': False, 'ours': True, 'path': '/var/lib/vllm-watchdog/paused'}
HUMANS = {'found': True, 'ours': False, 'path': '/var/lib/vllm-watchdog/paused'}
BEFORE = {'state': 'busy', 'reason': '2 running'}
AFTER = {'state': 'idle', 'reason': 'nothing in flight; the probe answered'}
WOULD = {'commands': [{'argv': ['systemctl', 'daemon-reload']}, {'argv': ['systemctl', 'restart', 'vllm']}]}
NOTE = '; the watchdog was already paused here (not by a rollout): /var/lib/vllm-watchdog/paused was left as it was'
DONE = [HOST]
NONE = []


@pytest.mark.parametrize('error, took, check_mode, pause, would, before, after, expected, done, failed', [
    ('', 12.345, False, OURS, {'skipped': True}, BEFORE, AFTER,
     '%s: %s done in 12.3 s; was busy, now idle (nothing in flight; the probe answered)' % (HOST, UPGRADE), DONE, NONE),
    ('', 3.0, False, {}, None, {}, {}, '%s: %s done in 3.0 s; was ?, now ? ()' % (HOST, UPGRADE), DONE, NONE),
    ('', 0.04, False, HUMANS, None, BEFORE, AFTER,
     '%s: %s done in 0.0 s; was busy, now idle (nothing in flight; the probe answered)%s' % (HOST, UPGRADE, NOTE),
     DONE, NONE),
    ('not ready within 900.0 s', 901.25, False, OURS, None, BEFORE, {},
     '%s: FAILED (%s) after 901.2 s: not ready within 900.0 s' % (HOST, UPGRADE), NONE, DONE),
    ('boom', 7.0, True, HUMANS, WOULD, BEFORE, {},
     '%s: FAILED (%s) after 7.0 s: boom%s' % (HOST, UPGRADE, NOTE), NONE, DONE),
    ('', 1.0, True, {}, WOULD, {'state': 'idle'}, {},
     '%s: would %s (check mode; now idle): systemctl daemon-reload; systemctl restart vllm' % (HOST, UPGRADE),
     NONE, NONE),
    ('', 1.0, True, HUMANS, {'commands': []}, {}, {},
     '%s: would %s (check mode; now ?)%s' % (HOST, UPGRADE, NOTE), NONE, NONE),
    ('', 1.0, True, OURS, None, BEFORE, {}, '%s: would %s (check mode; now busy)' % (HOST, UPGRADE), NONE, NONE),
    ('', 1.0, True, {'found': True}, {'commands': [{'argv': ['my-recreate', 8000]}]}, BEFORE, {},
     '%s: would %s (check mode; now busy): my-recreate 8000' % (HOST, UPGRADE), NONE, NONE),
])
def test_the_line_and_the_statistics(error, took, check_mode, pause, would, before, after, expected, done, failed):
    steps = {'error': error, 'pause': pause, 'before': before, 'after': after}
    if would is not None:
        steps['would'] = would
    report = rollout_report(steps, HOST, UPGRADE, took, check_mode)
    assert report['line'] == expected
    assert report['line'] == old_line(error, took, check_mode, pause, would, before, after)
    assert report['stats'] == {'vllm_rollout_done': done, 'vllm_rollout_failed': failed}


def test_steps_that_are_not_a_dict_are_refused():
    with pytest.raises(AnsibleFilterError, match='expects a dict'):
        rollout_report(['no'], HOST, UPGRADE)
    assert FilterModule().filters() == {'_rollout_report': rollout_report}
