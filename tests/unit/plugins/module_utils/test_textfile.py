"""The node_exporter textfile: the text from the results (table-driven), and its atomic write."""

import os

import pytest

from ansible_collections.modelops.vllm.plugins.module_utils import _textfile as textfile
from ansible_collections.modelops.vllm.plugins.module_utils._types import STATES

NOW = 1796004614.25


def samples(text):
    """{(name, labels): value} of a text, parsed by Prometheus' own parser (what node_exporter reads)."""
    from prometheus_client.parser import text_string_to_metric_families
    return dict(((s.name, tuple(sorted(s.labels.items()))), s.value)
                for family in text_string_to_metric_families(text) for s in family.samples)


def test_the_states_are_every_verdict_and_unreachable():
    assert textfile.TEXTFILE_STATES == list(STATES) + ['unreachable']
    assert textfile.TEXTFILE_ACTIONS == ('none', 'restart', 'reboot', 'fail')


@pytest.mark.parametrize('result, expected', [
    ({'name': 'chat', 'state': 'busy', 'action': 'none', 'history': {}},
     {('vllm_watchdog_verdict', (('state', 'busy'), ('vllm_instance', 'chat'))): 1,
      ('vllm_watchdog_verdict', (('state', 'idle'), ('vllm_instance', 'chat'))): 0,
      ('vllm_watchdog_action', (('action', 'none'), ('vllm_instance', 'chat'))): 1,
      ('vllm_watchdog_needs_human', (('vllm_instance', 'chat'),)): 0,
      ('vllm_watchdog_restarts_total', (('vllm_instance', 'chat'),)): 0,
      ('vllm_watchdog_reboots_total', (('vllm_instance', 'chat'),)): 0}),
    ({'name': 'chat', 'state': 'stuck', 'action': 'fail', 'history': {'restarts_total': 3, 'reboots_total': 1}},
     {('vllm_watchdog_verdict', (('state', 'stuck'), ('vllm_instance', 'chat'))): 1,
      ('vllm_watchdog_action', (('action', 'fail'), ('vllm_instance', 'chat'))): 1,
      ('vllm_watchdog_action', (('action', 'restart'), ('vllm_instance', 'chat'))): 0,
      ('vllm_watchdog_needs_human', (('vllm_instance', 'chat'),)): 1,
      ('vllm_watchdog_restarts_total', (('vllm_instance', 'chat'),)): 3,
      ('vllm_watchdog_reboots_total', (('vllm_instance', 'chat'),)): 1}),
    # Counters that cannot be true (negative, a bool, not a number, no history) are 0, never a crash.
    ({'name': 'x', 'state': 'unreachable', 'action': 'restart', 'history': {'restarts_total': -2, 'reboots_total': True}},
     {('vllm_watchdog_verdict', (('state', 'unreachable'), ('vllm_instance', 'x'))): 1,
      ('vllm_watchdog_restarts_total', (('vllm_instance', 'x'),)): 0,
      ('vllm_watchdog_reboots_total', (('vllm_instance', 'x'),)): 0}),
    ({'name': 'x', 'state': 'nonsense', 'history': None},
     {('vllm_watchdog_verdict', (('state', 'unknown'), ('vllm_instance', 'x'))): 0,
      ('vllm_watchdog_action', (('action', 'none'), ('vllm_instance', 'x'))): 0,
      ('vllm_watchdog_restarts_total', (('vllm_instance', 'x'),)): 0}),
    # A name with a quote, a backslash and a newline is escaped as the text format wants it.
    ({'name': 'em"b\\ed\nx', 'state': 'idle', 'action': 'none'},
     {('vllm_watchdog_verdict', (('state', 'idle'), ('vllm_instance', 'em"b\\ed\nx'))): 1}),
])
def test_the_text_of_one_result(result, expected):
    found = samples(textfile.text([result], NOW))
    for key, value in expected.items():
        assert found[key] == value, key
    assert found[('vllm_watchdog_last_run_timestamp_seconds', (('vllm_instance', result['name']),))] == 1796004614.25


def test_one_sample_per_state_and_action_of_every_instance():
    results = [{'name': 'a', 'state': 'idle', 'action': 'none'}, {'name': 'b', 'state': 'down', 'action': 'restart'}]
    found = samples(textfile.text(results, NOW))
    for name in ('a', 'b'):
        states = [k for k in found if k[0] == 'vllm_watchdog_verdict' and ('vllm_instance', name) in k[1]]
        actions = [k for k in found if k[0] == 'vllm_watchdog_action' and ('vllm_instance', name) in k[1]]
        assert len(states) == len(textfile.TEXTFILE_STATES) and len(actions) == 4
        assert sum(found[k] for k in states) == 1 and sum(found[k] for k in actions) == 1


@pytest.mark.parametrize('results', [[], [{'name': 'a', 'state': 'idle', 'action': 'none'}]])
def test_every_family_has_help_and_type_and_the_text_ends_its_line(results):
    text = textfile.text(results, NOW)
    assert text.endswith('\n')
    for name, kind in (('vllm_watchdog_verdict', 'gauge'), ('vllm_watchdog_action', 'gauge'),
                       ('vllm_watchdog_needs_human', 'gauge'), ('vllm_watchdog_restarts_total', 'counter'),
                       ('vllm_watchdog_reboots_total', 'counter'),
                       ('vllm_watchdog_last_run_timestamp_seconds', 'gauge')):
        assert '# TYPE %s %s\n' % (name, kind) in text
        assert '# HELP %s ' % name in text


def test_the_write_is_atomic_0644_and_leaves_no_temporary_file(tmp_path):
    path = tmp_path / 'vllm_watchdog.prom'
    path.write_text('old\n')
    results = [{'name': 'a', 'state': 'idle', 'action': 'none'}]
    assert textfile.write(str(path), results, NOW) is None
    assert path.read_text() == textfile.text(results, NOW)
    assert oct(os.stat(str(path)).st_mode & 0o777) == '0o644'
    assert [p.name for p in tmp_path.iterdir()] == ['vllm_watchdog.prom']


@pytest.mark.parametrize('make, why', [
    (lambda tmp: str(tmp / 'missing-dir' / 'vllm_watchdog.prom'), 'missing-dir does not exist'),
    (str, 'Is a directory'),
])
def test_a_write_that_fails_says_why_and_creates_nothing(tmp_path, make, why):
    path = make(tmp_path)
    before = sorted(os.listdir(str(tmp_path)))
    error = textfile.write(path, [{'name': 'a', 'state': 'idle', 'action': 'none'}], NOW)
    assert error.startswith('the textfile %s could not be written (' % path) and why in error, error
    assert 'no alert can fire on it' in error
    assert sorted(os.listdir(str(tmp_path))) == before
