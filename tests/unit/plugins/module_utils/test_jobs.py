"""A check in the background and its result read once it is done: the file's layout, the wait, the clean-up."""

import json
import os
import stat
import tempfile
import time

import pytest

from ansible_collections.modelops.vllm.plugins.module_utils._jobs import (
    CHECK_MODE_PREFIX,
    STALE,
    read_results,
    start_background,
    verdicts_from,
)

from tests.unit.plugins.module_utils.fakes import Clock


def private_dir(tmp_path, name='jobs'):
    path = tmp_path / name
    path.mkdir(mode=0o750)
    os.chmod(str(path), 0o750)
    return str(path)


def write(path, data):
    with open(path, 'w') as handle:
        handle.write(data if isinstance(data, str) else json.dumps(data))
    return path


# ------------------------------------------------------------------ read_results


@pytest.mark.parametrize('data', [
    {'servers': [], 'changed': False},
    # Ansible's own async layout, finished.
    {'started': 1, 'finished': 1, 'ansible_job_id': 'j1', 'servers': []},
    {'started': True, 'finished': True},
    {'failed': True, 'msg': 'the background check failed: RuntimeError: x'},
    {},
])
def test_a_finished_result_is_read_once_and_its_file_removed(tmp_path, data):
    path = write(str(tmp_path / 'check-1.json'), data)
    assert read_results(path, 0) == (data, None)
    assert not os.path.lexists(path)
    assert read_results(path, 0) == (None, "the check's result file %s does not exist" % path)


@pytest.mark.parametrize('data', [
    {'started': True, 'finished': False},
    {'started': 1, 'finished': 0, 'ansible_job_id': 'j1'},  # Ansible's async wrapper, still running
    '{"servers": [',  # being replaced right now
    '[1, 2]',  # not an object: never taken for a result
    '',
])
def test_a_result_not_there_yet_is_waited_for_then_said(tmp_path, data):
    path = write(str(tmp_path / 'check-1.json'), data)
    clock = Clock()
    assert read_results(path, 3, sleep=clock.sleep, clock=clock) == (None, 'the check did not finish within 3 s')
    assert 3 < clock() - 1000.0 < 3.5  # waited the timeout, polling every 0.2 s
    assert set(clock.sleeps) == {0.2}
    assert os.path.exists(path)  # left for a later read


def test_a_result_that_arrives_during_the_wait_is_taken(tmp_path):
    path = write(str(tmp_path / 'check-1.json'), {'started': True, 'finished': False})
    slept = []

    def sleep(seconds):
        slept.append(seconds)
        if len(slept) == 3:
            write(path, {'servers': [{'name': 'chat'}]})

    now = [0.0]
    result = read_results(path, 60, sleep=sleep, clock=lambda: now[0])
    assert result == ({'servers': [{'name': 'chat'}]}, None)
    assert slept == [0.2, 0.2, 0.2]


def test_a_result_that_cannot_be_trusted_is_not_read(tmp_path):
    target = write(str(tmp_path / 'elsewhere.json'), {'servers': []})
    link = str(tmp_path / 'check-1.json')
    os.symlink(target, link)
    result, why = read_results(link, 0)
    assert result is None
    assert why == "the check's result cannot be read: %s is a symbolic link: not followed" % link
    fifo = str(tmp_path / 'check-2.json')
    os.mkfifo(fifo)
    assert read_results(fifo, 0) == (None, "the check's result cannot be read: %s is not a regular file" % fifo)


# ------------------------------------------------------------------ start_background


def wait_for(path, timeout=20):
    result, why = read_results(path, timeout)
    assert why is None, why
    return result


def test_the_work_runs_in_the_background_and_its_result_is_read(tmp_path):
    directory = private_dir(tmp_path)
    path = start_background(lambda: {'servers': [{'name': 'chat', 'state': 'idle'}]}, directory, 30)
    assert os.path.dirname(path) == directory
    name = os.path.basename(path)
    assert name.startswith('check-') and name.endswith('.json')
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert wait_for(path) == {'servers': [{'name': 'chat', 'state': 'idle'}]}
    assert os.listdir(directory) == []


def test_work_that_returns_at_once_still_starts_as_started_not_finished(tmp_path):
    directory = private_dir(tmp_path)

    def slow():
        time.sleep(1)
        return {'servers': []}

    path = start_background(slow, directory, 30)
    with open(path) as handle:
        assert json.load(handle) == {'started': True, 'finished': False}
    assert wait_for(path) == {'servers': []}


def test_work_that_raises_is_a_failed_result(tmp_path):
    def boom():
        raise ValueError('no such host')

    path = start_background(boom, private_dir(tmp_path), 30)
    assert wait_for(path) == {'failed': True, 'msg': 'the background check failed: ValueError: no such host'}


@pytest.mark.slow
def test_work_past_its_limit_is_a_failed_result(tmp_path):
    def forever():
        time.sleep(60)

    path = start_background(forever, private_dir(tmp_path), 0.2)  # at least one second
    assert wait_for(path) == {'failed': True, 'msg': 'the background check failed: RuntimeError: the background '
                                                     'check ran for more than 0 s'}


def test_the_directory_is_created_private_when_missing(tmp_path):
    directory = str(tmp_path / 'new' / 'jobs')
    path = start_background(lambda: {'servers': []}, directory, 30)
    assert stat.S_IMODE(os.stat(directory).st_mode) & 0o027 == 0
    assert wait_for(path) == {'servers': []}


def test_in_check_mode_a_missing_directory_is_not_created_and_nothing_is_left(tmp_path):
    directory = str(tmp_path / 'missing')
    path = start_background(lambda: {'servers': []}, directory, 30, create=False)
    assert not os.path.exists(directory)
    private = os.path.dirname(path)
    assert os.path.dirname(private) == tempfile.gettempdir()
    assert os.path.basename(private).startswith(CHECK_MODE_PREFIX)
    assert wait_for(path) == {'servers': []}
    assert not os.path.exists(private)


def test_in_check_mode_an_existing_directory_is_used(tmp_path):
    directory = private_dir(tmp_path)
    path = start_background(lambda: {'servers': []}, directory, 30, create=False)
    assert os.path.dirname(path) == directory
    assert wait_for(path) == {'servers': []}
    assert os.path.isdir(directory)  # the role's own directory stays


def test_results_nobody_collected_are_removed_by_a_later_start(tmp_path):
    directory = private_dir(tmp_path)
    old = write(os.path.join(directory, 'check-old.json'), {'servers': []})
    recent = write(os.path.join(directory, 'check-recent.json'), {'servers': []})
    other = write(os.path.join(directory, 'old-notes.json'), {})
    past = time.time() - STALE - 60
    for path in (old, other):
        os.utime(path, (past, past))
    path = start_background(lambda: {'servers': []}, directory, 30)
    assert not os.path.exists(old)
    assert os.path.exists(recent) and os.path.exists(other)
    wait_for(path)


@pytest.mark.parametrize('mode, why', [(0o770, 'its group'), (0o757, 'others')])
def test_a_directory_others_can_write_is_refused(tmp_path, mode, why):
    from ansible_collections.modelops.vllm.plugins.module_utils._statedir import StateError
    directory = private_dir(tmp_path)
    os.chmod(directory, mode)
    with pytest.raises(StateError) as caught:
        start_background(lambda: {'servers': []}, directory, 30)
    assert 'is writable by %s' % why in str(caught.value)
    assert os.listdir(directory) == []


# ------------------------------------------------------------------ verdicts_from


@pytest.mark.parametrize('result, why, expected', [
    (None, 'the check did not finish within 3 s', ({}, 'the check did not finish within 3 s')),
    ({'servers': [{'name': 'h/chat', 'state': 'idle'}, 'junk', {'name': 'h/embed', 'state': 'stuck'}]}, None,
     ({'h/chat': {'name': 'h/chat', 'state': 'idle'}, 'h/embed': {'name': 'h/embed', 'state': 'stuck'}}, None)),
    ({'servers': []}, None, ({}, None)),
    ({'failed': True, 'msg': 'the background check failed: OSError: x'}, None,
     ({}, 'the check failed: the background check failed: OSError: x')),
    ({'servers': 'x'}, None, ({}, 'the check failed: no verdicts')),
    ({}, None, ({}, 'the check failed: no verdicts')),
    ({'msg': 'm' * 5000}, None, ({}, 'the check failed: %s' % ('m' * 500))),
])
def test_verdicts_from_a_result(result, why, expected):
    assert verdicts_from(result, why) == expected
