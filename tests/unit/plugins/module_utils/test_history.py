"""The watchdog's history read back for a human (_history): the window, the events and their outcomes, one line each,
and the files read as the gate reads them, bounded, whatever they hold."""

import calendar
import json
import os

import pytest
from hypothesis import given, settings, strategies as st

from ansible_collections.modelops.vllm.plugins.module_utils import _history as history
from ansible_collections.modelops.vllm.plugins.module_utils import _statedir as statedir

NOW = calendar.timegm((2026, 12, 2, 12, 0, 0, 0, 0, 0))


def at(text):
    return history.stamp_epoch(text)


def record(time, state='busy', action='none', reason=None, decision=None, **more):
    out = {'time': time, 'state': state, 'action': action, 'reason': reason or '%s reason' % state,
           'decision': decision or '%s: nothing to do' % state}
    out.update(more)
    return out


def dated(*records):
    found, undated = history.dated(list(records))
    assert undated == 0
    return found


# ------------------------------------------------------------------------------------------ the window

@pytest.mark.parametrize('text, back', [
    ('24h', 86400), ('90m', 5400), ('1h30m', 5400), ('2d', 172800), ('1w', 604800), ('45s', 45), ('0.5h', 1800),
    (' 12H ', 43200),
])
def test_a_duration_is_back_from_now(text, back):
    assert history.since_epoch(text, NOW) == NOW - back


@pytest.mark.parametrize('text, stamp', [
    ('2026-12-01', '2026-12-01T00:00:00Z'),
    ('2026-12-01T18:00', '2026-12-01T18:00:00Z'),
    ('2026-12-01 18:00:30', '2026-12-01T18:00:30Z'),
    ('2026-12-01T18:00Z', '2026-12-01T18:00:00Z'),
    ('2026-12-01T18:00+01:00', '2026-12-01T17:00:00Z'),   # 18:00 where the clock is an hour ahead of UTC
    ('2026-12-01T18:00-0230', '2026-12-01T20:30:00Z'),
])
def test_a_date_or_a_time_is_utc_unless_it_says_its_offset(text, stamp):
    assert history.iso(history.since_epoch(text, NOW)) == stamp


def test_all_is_no_window():
    assert history.since_epoch('all', NOW) is None and history.since_epoch('ALL', NOW) is None


@pytest.mark.parametrize('text', ['', '24', 'yesterday', '-1h', '2026-13-01', '2026-02-30', '2026-12-01T25:00',
                                  '1h 30m', None, 'x' * 5000, '2026-12-01T18:00+1'])
def test_anything_else_is_refused_with_the_forms_it_takes(text):
    with pytest.raises(ValueError) as info:
        history.since_epoch(text, NOW)
    message = str(info.value)
    assert message.startswith('since must be a duration (24h, 90m, 2d, 1w, 1h30m), a date or a time') and len(message) < 400


@pytest.mark.parametrize('text, ok', [
    ('2026-12-01T11:42:31Z', True), ('2026-12-01 11:42:31', False), ('2026-12-01T11:42:31', False), (None, False),
    (17, False), ('2026-12-01T24:00:00Z', False), ('2026-02-29T00:00:00Z', False), ('2028-02-29T00:00:00Z', True),
])
def test_only_the_gate_s_own_time_stamps_date_a_record(text, ok):
    assert (history.stamp_epoch(text) is not None) is ok


# -------------------------------------------------------------------------------------- names and files

def test_the_instances_are_those_with_a_verdict_history_and_a_plain_name():
    names, left = history.instance_names([
        'vllm.verdicts.jsonl', 'chat.verdicts.jsonl.1', 'embed.verdicts.jsonl.2', 'vllm.json', 'x.progress.json',
        'old.verdicts.jsonl.3', '.hidden.verdicts.jsonl', 'a b.verdicts.jsonl', 'evidence', 'paused', 17])
    assert (names, left) == (['chat', 'embed', 'vllm'], 0)


def test_at_most_so_many_instances_are_read_and_the_rest_counted():
    names, left = history.instance_names(['i%04d.verdicts.jsonl' % n for n in range(history.MAX_INSTANCES + 7)])
    assert len(names) == history.MAX_INSTANCES and left == 7


def test_an_instance_s_evidence_is_told_from_another_s_with_a_longer_name():
    files = ['vllm-20261201T114231Z.json', 'vllm-2-20261201T114231Z.json', 'vllm-20261301T114231Z.json',
             'vllm-20261201T114231Z.json.tmp', 'chat-20261201T100000Z.json']
    assert history.evidence_times(files, 'vllm') == [(at('2026-12-01T11:42:31Z'), 'vllm-20261201T114231Z.json')]
    assert [name for dummy, name in history.evidence_times(files, 'vllm-2')] == ['vllm-2-20261201T114231Z.json']


def test_read_tail_reads_the_end_of_a_big_file_from_a_whole_line(tmp_path):
    path = tmp_path / 'big'
    lines = ['%06d %s' % (n, 'x' * 40) for n in range(10000)]
    path.write_text('\n'.join(lines) + '\n')
    text, cut = statedir.read_tail(str(path), 4096)
    assert cut and text.endswith(lines[-1] + '\n')
    read = text.splitlines()
    assert read == lines[-len(read):] and 4096 - 48 <= len(text) <= 4096  # whole lines only, the last ones
    exact = tmp_path / 'exact'
    exact.write_text('a\nb\n')
    assert statedir.read_tail(str(exact), 4) == ('a\nb\n', False)
    assert statedir.read_tail(str(exact), 3) == ('b\n', True)  # 'a\n' cut at its start: left out
    assert statedir.read_tail(str(exact), 2) == ('b\n', True)  # the window starts right after a line break
    assert statedir.read_tail(str(tmp_path / 'missing'), 10) == (None, False)


def test_read_tail_of_a_line_longer_than_the_window_is_nothing(tmp_path):
    path = tmp_path / 'one'
    path.write_text('y' * 100000)
    assert statedir.read_tail(str(path), 1000) == ('', True)


def test_read_tail_never_follows_a_link_or_waits_on_a_fifo(tmp_path):
    target = tmp_path / 'target'
    target.write_text('secret\n')
    os.symlink(str(target), str(tmp_path / 'link'))
    os.mkfifo(str(tmp_path / 'fifo'))
    for name in ('link', 'fifo'):
        with pytest.raises(statedir.StateError):
            statedir.read_tail(str(tmp_path / name), 100)
    with pytest.raises(statedir.StateError):
        statedir.read_tail(str(tmp_path), 100)  # a directory


def write_history(state, name, *files):
    """``files``: the lines of the current file, then of .1, then of .2."""
    for suffix, lines in zip(('', '.1', '.2'), files):
        (state / ('%s.verdicts.jsonl%s' % (name, suffix))).write_text(''.join(line + '\n' for line in lines))


def test_read_instance_reads_the_rotated_files_oldest_first(tmp_path):
    write_history(tmp_path, 'vllm', [json.dumps(record('2026-12-01T03:00:00Z'))],
                  [json.dumps(record('2026-12-01T02:00:00Z'))], [json.dumps(record('2026-12-01T01:00:00Z')), 'cut {'])
    (tmp_path / 'vllm.restart-failed').write_text(json.dumps({'at': 5.0, 'error': 'boom'}))
    (tmp_path / 'evidence').mkdir()
    (tmp_path / 'evidence' / 'vllm-20261201T020000Z.json').write_text('{}')
    found = history.read_instance(str(tmp_path), 'vllm')
    assert [r['time'] for r in found['records']] == ['2026-12-01T01:00:00Z', '2026-12-01T02:00:00Z',
                                                     '2026-12-01T03:00:00Z']
    assert len(found['damaged']) == 1 and found['damaged'][0].startswith(str(tmp_path / 'vllm.verdicts.jsonl.2') + ' line 2 ')
    assert found['failed'] == {'at': 5.0, 'error': 'boom', 'path': str(tmp_path / 'vllm.restart-failed')}
    assert found['evidence'] == [(at('2026-12-01T02:00:00Z'), str(tmp_path / 'evidence' / 'vllm-20261201T020000Z.json'))]
    assert found['problems'] == [] and found['cut'] == []


def test_read_instance_names_what_it_cannot_trust_and_reads_the_rest(tmp_path):
    write_history(tmp_path, 'vllm', [json.dumps(record('2026-12-01T03:00:00Z'))])
    os.mkfifo(str(tmp_path / 'vllm.verdicts.jsonl.1'))  # would block a reader forever
    os.symlink('/etc/shadow', str(tmp_path / 'vllm.restart-failed'))
    (tmp_path / 'vllm.json').write_text('not json')
    (tmp_path / 'elsewhere').mkdir()
    (tmp_path / 'elsewhere' / 'vllm-20261201T030000Z.json').write_text('{}')
    os.symlink(str(tmp_path / 'elsewhere'), str(tmp_path / 'evidence'))  # a planted link: not listed through
    found = history.read_instance(str(tmp_path), 'vllm')
    assert [r['time'] for r in found['records']] == ['2026-12-01T03:00:00Z']
    assert len(found['problems']) == 4 and found['failed'] is None and found['evidence'] == [], found['problems']
    assert found['problems'][3] == '%s is a symbolic link: not followed' % (tmp_path / 'evidence')
    assert 'is not a regular file' in found['problems'][0] and found['problems'][1].endswith('vllm.json is not JSON')
    assert 'symbolic link' in found['problems'][2]


def test_read_instance_reads_only_the_end_of_a_huge_history_and_says_so(tmp_path):
    line = json.dumps(record('2026-12-01T03:00:00Z', reason='r' * 300))
    (tmp_path / 'vllm.verdicts.jsonl').write_text((line + '\n') * 20000)  # about 7 MB
    found = history.read_instance(str(tmp_path), 'vllm', max_bytes=64 * 1024)
    assert found['cut'] == [str(tmp_path / 'vllm.verdicts.jsonl')]
    assert 0 < len(found['records']) <= 64 * 1024 // len(line)
    said = history.report('h/vllm', found, None)
    assert 'h/vllm: the history before 2026-12-01T03:00:00Z was not read (only the end of %s, 65536 bytes each, is read)' \
        % (tmp_path / 'vllm.verdicts.jsonl') in said['lines']


# ------------------------------------------------------------------------------------- events and lines

def test_runs_with_the_same_verdict_and_action_are_one_event_and_a_restart_its_own_with_its_outcome():
    records = dated(record('2026-12-01T03:00:00Z'), record('2026-12-01T03:05:00Z'),
                    record('2026-12-01T03:10:00Z', 'stuck', 'restart', '2 request(s) in flight, nothing moved',
                           'restart: stuck (restart 1 of at most 3 in 24h00m)'),
                    record('2026-12-01T03:15:00Z', 'idle'), record('2026-12-01T03:20:00Z', 'idle'))
    evidence = [(at('2026-12-01T03:10:02Z'), '/s/evidence/vllm-20261201T031002Z.json')]
    listed = history.events(records, None, 'changes', evidence)
    assert [(e['kind'], e['state'], e['runs']) for e in listed] == [
        ('runs', 'busy', 2), ('restart', 'stuck', 1), ('runs', 'idle', 2)]
    lines = [history.event_line('gb10/vllm', e) for e in listed]
    assert lines == [
        'gb10/vllm: 2026-12-01T03:00:00Z busy - busy reason [2 runs, the last 2026-12-01T03:05:00Z]',
        'gb10/vllm: 2026-12-01T03:10:00Z stuck - 2 request(s) in flight, nothing moved; watchdog: restart (restart: stuck '
        '(restart 1 of at most 3 in 24h00m)) -> next run 2026-12-01T03:15:00Z: idle '
        '[evidence /s/evidence/vllm-20261201T031002Z.json]',
        'gb10/vllm: 2026-12-01T03:15:00Z idle - idle reason [2 runs, the last 2026-12-01T03:20:00Z]']
    assert [e['kind'] for e in history.events(records, None, 'all')] == ['runs', 'runs', 'restart', 'runs', 'runs']
    assert [e['kind'] for e in history.events(records, None, 'actions')] == ['restart']


def test_the_outcome_of_a_restart_is_what_came_after_it():
    restart = record('2026-12-01T03:10:00Z', 'stuck', 'restart')
    failed_next = record('2026-12-01T03:15:00Z', 'stuck', 'fail',
                         decision='the restart attempted 5m00s ago failed (not ready within 900 s): a human must look')
    step = record('2026-12-01T03:10:40Z', 'stuck', 'fail', reason='the memory did not come back',
                  decision='the next step, a host reboot, is off', step=True)
    out = [e['outcome'] for e in history.events(dated(restart, failed_next), None) if e['kind'] == 'restart']
    assert out == ['next run 2026-12-01T03:15:00Z: stuck, NEEDS A HUMAN (the restart attempted 5m00s ago failed (not '
                   'ready within 900 s): a human must look)']
    out = [e['outcome'] for e in history.events(dated(restart, step), None) if e['kind'] == 'restart']
    assert out == ['stopped: the memory did not come back; then NEEDS A HUMAN (the next step, a host reboot, is off)']
    failed = {'at': at('2026-12-01T03:11:00Z'), 'error': 'not ready', 'path': '/s/vllm.restart-failed'}
    out = [e['outcome'] for e in history.events(dated(restart), None, failed=failed) if e['kind'] == 'restart']
    assert out == ['FAILED: not ready (/s/vllm.restart-failed is kept: the host fails on every run until the server '
                   'serves again or a human removes it)']
    old = dict(failed, at=at('2026-11-30T00:00:00Z'))  # a record of an older restart says nothing of this one
    assert [e['outcome'] for e in history.events(dated(restart), None, failed=old)] == ['no run since']


def test_the_outcome_the_role_recorded_is_said_on_its_restart_s_line_and_is_no_event_of_its_own():
    # watchdog_gate's record_outcome: a step line with the outcome, right after the restart's run.
    restart = record('2026-12-01T03:10:00Z', 'stuck', 'restart', decision='restart: stuck')
    now_idle = record('2026-12-01T03:10:20Z', 'idle', 'restarted', reason='nothing in flight', step=True,
                      outcome='now idle (nothing in flight)')
    failed = record('2026-12-01T03:10:20Z', 'stuck', 'restart failed', reason='exit 5', step=True,
                    outcome='failed: systemctl stop vllm exited 5')
    later = record('2026-12-01T03:15:00Z', 'idle')
    for after, said in ((now_idle, 'now idle (nothing in flight)'), (failed, 'failed: systemctl stop vllm exited 5')):
        listed = history.events(dated(restart, after, later), None)
        assert [(e['kind'], e['outcome']) for e in listed] == [('restart', said), ('runs', None)], listed
        assert history.counts(dated(restart, after, later), None)[1]['runs'] == 2
        assert [e['kind'] for e in history.events(dated(restart, after), None, 'actions')] == ['restart']


def test_the_window_keeps_its_runs_and_still_reads_the_outcome_of_its_last_restart_from_the_run_after():
    records = dated(record('2026-11-30T03:00:00Z', 'stuck', 'restart'), record('2026-12-01T03:10:00Z', 'stuck', 'restart'),
                    record('2026-12-01T03:15:00Z', 'idle'))
    listed = history.events(records, at('2026-12-01T00:00:00Z'), 'actions')
    assert [(e['time'], e['outcome']) for e in listed] == [('2026-12-01T03:10:00Z', 'next run 2026-12-01T03:15:00Z: idle')]
    listed = history.events(records, at('2026-12-01T03:12:00Z'), 'actions')
    assert listed == []


def test_runs_that_asked_a_human_are_one_event_per_stretch_and_shown_with_actions():
    records = dated(*[record('2026-12-01T0%d:00:00Z' % h, 'unknown', 'fail', decision='could not judge %d runs' % h)
                      for h in range(3, 7)])
    listed = history.events(records, None, 'actions')
    assert [(e['runs'], e['until'], e['decision']) for e in listed] == [(4, '2026-12-01T06:00:00Z', 'could not judge 6 runs')]
    assert history.event_line('h/vllm', listed[0]) == (
        'h/vllm: 2026-12-01T03:00:00Z unknown - unknown reason; watchdog: NEEDS A HUMAN (could not judge 6 runs) '
        '[4 runs, the last 2026-12-01T06:00:00Z]')


def test_text_from_the_files_is_one_clipped_line():
    hostile = record('2026-12-01T03:00:00Z', 'stuck\n\x1b[31m', 'restart', 'line one\nline two\r\x00' + 'z' * 5000,
                     {'not': 'a string'})
    line = history.event_line('h/vllm', history.events(dated(hostile), None)[0])
    assert '\n' not in line and '\x1b' not in line and '\x00' not in line and '\r' not in line
    assert 'line one line two' in line and len(line) < 1000 and '{"not": "a string"}' in line


def test_the_summary_counts_the_window_s_runs():
    records = dated(record('2026-11-30T03:00:00Z', 'stuck', 'restart'), record('2026-12-01T03:00:00Z'),
                    record('2026-12-01T03:05:00Z'), record('2026-12-01T03:10:00Z', 'stuck', 'restart'),
                    record('2026-12-01T03:10:30Z', 'stuck', 'fail', step=True), record('2026-12-01T03:15:00Z', 'idle'))
    line = history.summary('h/vllm', records, at('2026-12-01T00:00:00Z'))
    assert line == ('h/vllm: 4 run(s) since 2026-12-01T00:00:00Z: 2 busy, 1 idle, 1 stuck; 1 restart(s), 0 host reboot(s), '
                    '0 run(s) that asked a human; the last run 2026-12-01T03:15:00Z: idle, no action')
    assert history.summary('h/vllm', [], None) == 'h/vllm: no run in all its history'


def test_a_report_keeps_the_latest_lines_and_says_how_many_it_left_out():
    records = [json.dumps(record('2026-12-01T%02d:%02d:00Z' % (n // 12, n % 12 * 5), 'busy' if n % 2 else 'idle'))
               for n in range(120)]  # every run another verdict: 120 events
    found = {'records': [json.loads(r) for r in records], 'damaged': [], 'cut': [], 'problems': [], 'history': None,
             'failed': None, 'evidence': []}
    said = history.report('h/vllm', found, None, 'changes', max_lines=10)
    assert said['lines'][0] == 'h/vllm: %d earlier line(s) of the window left out (a later since shows fewer)' % (120 - 10)
    assert len(said['lines']) == 12 and said['lines'][-1].startswith('h/vllm: 120 run(s) in all its history: ')
    assert said['runs'] == 120 and said['last'] == {'time': '2026-12-01T09:55:00Z', 'state': 'busy', 'action': 'none'}


@settings(max_examples=60, deadline=None)
@given(st.binary(max_size=4000))
def test_whatever_a_history_holds_its_report_is_lines_and_never_an_error(tmp_path_factory, data):
    state = tmp_path_factory.mktemp('state')
    (state / 'vllm.verdicts.jsonl').write_bytes(data)
    found = history.read_instance(str(state), 'vllm', max_bytes=4096)
    said = history.report('h/vllm', found, None, 'changes')
    assert said['lines'] and all(isinstance(line, str) and '\n' not in line for line in said['lines'])


def test_a_record_that_is_json_but_not_what_the_gate_writes_is_not_a_run():
    odd = {'time': '2026-12-01T03:00:00Z', 'state': ['x'], 'action': {'a': 1}}
    found = {'records': [{'time': 5}, {'state': 'stuck'}, odd],
             'damaged': [], 'cut': [], 'problems': [], 'history': None, 'failed': None, 'evidence': []}
    said = history.report('h/vllm', found, None)
    assert said['runs'] == 1 and said['lines'][-2].startswith('h/vllm: 2 line(s) of the verdict history skipped')
