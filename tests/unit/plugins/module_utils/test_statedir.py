"""The state directory's logs: a cut last line never takes the next record with it, and readers name it."""

import json

import pytest

from ansible_collections.modelops.vllm.plugins.module_utils import _statedir as statedir


def _lines(path):
    return path.read_text().split('\n')


def test_an_append_after_a_cut_line_starts_on_a_line_of_its_own(tmp_path):
    path = tmp_path / 'vllm.verdicts.jsonl'
    path.write_text('{"state": "busy", "action": "none"}\n{"state": "stu')  # cut by a crash or a full disk
    statedir.append_line(str(path), json.dumps({'state': 'stuck', 'action': 'restart'}))
    lines = _lines(path)
    assert lines[-1] == ''  # every record ends its line
    assert lines[:-1] == ['{"state": "busy", "action": "none"}', '{"state": "stu', '{"state": "stuck", "action": "restart"}']
    # The record just appended is whole, so the restart's own record is readable.
    assert json.loads(lines[2]) == {'state': 'stuck', 'action': 'restart'}


def test_appends_to_a_whole_file_add_no_blank_line(tmp_path):
    path = tmp_path / 'log.jsonl'
    for number in range(3):
        statedir.append_line(str(path), json.dumps({'n': number}))
    assert path.read_text() == '{"n": 0}\n{"n": 1}\n{"n": 2}\n'


def test_a_cut_line_in_a_file_that_rotates_is_left_in_the_older_file(tmp_path):
    path = tmp_path / 'log.jsonl'
    path.write_text('x' * 100)  # one cut line, no newline
    statedir.append_line(str(path), '{"n": 1}', max_bytes=105)
    assert path.read_text() == '{"n": 1}\n'
    assert (tmp_path / 'log.jsonl.1').read_text() == 'x' * 100


def test_json_lines_skips_and_names_the_damaged_lines():
    records, damaged = statedir.json_lines(['{"a": 1}', '{"a": 2', '', '[1, 2]', 'NaN', '{"a": 3}'], first=7)
    assert records == [{'a': 1}, {'a': 3}]
    assert [d.split(' is ')[0] for d in damaged] == ['line 8', 'line 10', 'line 11']
    assert "'{\"a\": 2'" in damaged[0]


def test_tail_json_counts_lines_from_the_start_of_the_file(tmp_path):
    path = tmp_path / 'vllm.verdicts.jsonl'
    path.write_text(''.join('{"n": %d}\n' % n for n in range(30)) + '{"n": 30, "cut\n{"n": 31}\n')
    records, damaged = statedir.tail_json(str(path), 5)
    assert [r['n'] for r in records] == [27, 28, 29, 31]
    assert damaged == ['%s line 31 is not a JSON object: %r' % (path, '{"n": 30, "cut')]


def test_tail_json_of_a_missing_file_is_empty(tmp_path):
    assert statedir.tail_json(str(tmp_path / 'none.jsonl'), 20) == ([], [])


# -- the layout, spelled once --------------------------------------------------------

@pytest.mark.parametrize('name, key, expected', [
    (None, 'paused', '/var/lib/vllm-watchdog/paused'),
    (None, 'evidence', '/var/lib/vllm-watchdog/evidence'),
    (None, 'checks', '/var/lib/vllm-watchdog/checks'),
    ('chat', 'paused', '/var/lib/vllm-watchdog/paused'),
    ('chat', 'lock', '/var/lib/vllm-watchdog/chat.lock'),
    ('chat', 'history', '/var/lib/vllm-watchdog/chat.json'),
    ('chat', 'failed', '/var/lib/vllm-watchdog/chat.restart-failed'),
    ('chat', 'verdicts', '/var/lib/vllm-watchdog/chat.verdicts.jsonl'),
    ('chat', 'instance_paused', '/var/lib/vllm-watchdog/chat.paused'),
    ('chat', 'evidence', '/var/lib/vllm-watchdog/evidence'),
])
def test_the_state_dir_layout(name, key, expected):
    assert statedir.paths('/var/lib/vllm-watchdog', name)[key] == expected


def test_without_a_name_only_the_host_s_files():
    assert sorted(statedir.paths('/s')) == ['checks', 'evidence', 'paused']
    assert sorted(statedir.paths('/s', 'x')) == ['checks', 'evidence', 'failed', 'history', 'instance_paused', 'lock',
                                                 'memory', 'paused', 'progress', 'progress_lock', 'verdicts']


@pytest.mark.parametrize('name, plain', [
    ('gb10-01/chat', 'gb10-01_chat-'),
    ('chat', 'chat'),
    ('..hidden', 'hidden-'),
    ('', '_-'),
])
def test_file_name_is_plain_and_tells_changed_names_apart(name, plain):
    got = statedir.file_name(name)
    assert got == plain if plain == name else got.startswith(plain) and len(got) == len(plain) + 10
    assert '/' not in got and not got.startswith('.')


def test_every_file_of_an_instance_is_in_the_state_dir_and_its_own():
    files = statedir.paths('/s', 'a')
    assert all(path.startswith('/s/') for path in files.values())
    assert len(set(files.values())) == len(files)
    other = statedir.paths('/s', 'b')
    own = ('lock', 'history', 'failed', 'verdicts', 'instance_paused')
    assert not set(files[key] for key in own) & set(other[key] for key in own)
