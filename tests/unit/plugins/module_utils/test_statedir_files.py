"""The state directory as a root process must handle it: a directory only its owner writes, no link followed, no
FIFO opened, reads bounded, files replaced atomically, the lock waited for with a timeout."""

import fcntl
import os
import stat

import pytest

from ansible_collections.modelops.vllm.plugins.module_utils import _statedir as statedir
from ansible_collections.modelops.vllm.plugins.module_utils._statedir import MAX_READ, StateError

from tests.unit.plugins.module_utils.fakes import Clock


def mode_of(path):
    return stat.S_IMODE(os.lstat(str(path)).st_mode)


# ------------------------------------------------------------------ check_dir


def test_a_missing_directory_is_created_0750_when_asked(tmp_path):
    path = tmp_path / 'a' / 'state'
    assert statedir.check_dir(str(path)) is True
    assert path.is_dir() and mode_of(path) & 0o027 == 0


def test_a_missing_directory_is_not_created_when_not_asked(tmp_path):
    path = tmp_path / 'state'
    assert statedir.check_dir(str(path), create=False) is False
    assert not path.exists()


@pytest.mark.parametrize('mode', [0o700, 0o750, 0o755, 0o500])
def test_a_directory_only_its_owner_writes_is_trusted(tmp_path, mode):
    path = tmp_path / 'state'
    path.mkdir()
    os.chmod(str(path), mode)
    assert statedir.check_dir(str(path)) is True
    os.chmod(str(path), 0o700)


@pytest.mark.parametrize('mode, who', [(0o770, 'its group'), (0o775, 'its group'), (0o702, 'others'),
                                       (0o777, 'others'), (0o1777, 'others')])
def test_a_directory_others_can_write_is_refused_with_the_fix(tmp_path, mode, who):
    path = tmp_path / 'state'
    path.mkdir()
    os.chmod(str(path), mode)
    with pytest.raises(StateError) as caught:
        statedir.check_dir(str(path))
    assert str(caught.value) == (
        'state_dir %s is writable by %s (mode %04o): anyone who can write there could forge the restart history or '
        'plant links; make it 0750 or 0700 (chmod go-w %s)' % (path, who, mode, path))


@pytest.mark.skipif(os.geteuid() != 0, reason='giving a directory to another user needs root')
def test_a_directory_of_another_user_is_refused(tmp_path):
    path = tmp_path / 'state'
    path.mkdir()
    os.chmod(str(path), 0o750)
    os.chown(str(path), 54321, -1)
    with pytest.raises(StateError) as caught:
        statedir.check_dir(str(path))
    assert str(caught.value) == ('state_dir %s belongs to uid 54321, not to the user that runs the watchdog (uid 0) '
                                 'or root' % path)


def test_something_that_is_not_a_directory_is_refused(tmp_path):
    path = tmp_path / 'state'
    path.write_text('x')
    with pytest.raises(StateError) as caught:
        statedir.check_dir(str(path))
    assert str(caught.value) == 'state_dir %s is not a directory' % path


def test_a_directory_that_cannot_be_created_is_said(tmp_path):
    parent = tmp_path / 'file'
    parent.write_text('x')
    with pytest.raises(StateError) as caught:
        statedir.check_dir(str(parent / 'state'))
    assert str(caught.value).startswith('state_dir %s cannot be read: ' % (parent / 'state'))


# ------------------------------------------------------------------ read_text, exists, first_line


@pytest.mark.parametrize('data, text', [
    (b'', ''), (b'one\ntwo\n', 'one\ntwo\n'), (b'caf\xc3\xa9', 'caf\u00e9'), (b'bad \xff byte', 'bad \ufffd byte'),
])
def test_read_text_of_a_regular_file(tmp_path, data, text):
    path = tmp_path / 'f'
    path.write_bytes(data)
    assert statedir.read_text(str(path)) == text


def test_read_text_of_a_missing_file_is_none(tmp_path):
    assert statedir.read_text(str(tmp_path / 'none')) is None


def test_read_text_never_follows_a_link_nor_opens_a_fifo(tmp_path):
    target = tmp_path / 'target'
    target.write_text('forged')
    link = tmp_path / 'link'
    os.symlink(str(target), str(link))
    with pytest.raises(StateError) as caught:
        statedir.read_text(str(link))
    assert str(caught.value) == '%s is a symbolic link: not followed' % link
    fifo = tmp_path / 'fifo'
    os.mkfifo(str(fifo))
    with pytest.raises(StateError) as caught:
        statedir.read_text(str(fifo))  # returns at once: a FIFO never blocks the reader
    assert str(caught.value) == '%s is not a regular file' % fifo
    with pytest.raises(StateError) as caught:
        statedir.read_text(str(tmp_path))
    assert str(caught.value) == '%s is not a regular file' % tmp_path


@pytest.mark.parametrize('size, limit, ok', [(10, 10, True), (11, 10, False), (MAX_READ, MAX_READ, True),
                                             (MAX_READ + 1, MAX_READ, False), (3 * MAX_READ, MAX_READ, False)])
def test_read_text_is_bounded(tmp_path, size, limit, ok):
    path = tmp_path / 'big'
    path.write_bytes(b'x' * size)
    if ok:
        assert len(statedir.read_text(str(path), limit)) == size
    else:
        with pytest.raises(StateError) as caught:
            statedir.read_text(str(path), limit)
        assert str(caught.value) == '%s is larger than %d bytes' % (path, limit)


def test_exists_sees_anything_and_follows_nothing(tmp_path):
    os.symlink(str(tmp_path / 'nowhere'), str(tmp_path / 'dangling'))
    os.mkfifo(str(tmp_path / 'fifo'))
    assert statedir.exists(str(tmp_path / 'dangling')) is True
    assert statedir.exists(str(tmp_path / 'fifo')) is True
    assert statedir.exists(str(tmp_path)) is True
    assert statedir.exists(str(tmp_path / 'none')) is False


@pytest.mark.parametrize('data, line', [
    ('maintenance until 14:00\nsecond line\n', 'maintenance until 14:00'),
    ('\n\n  reason after blank lines  \nx', 'reason after blank lines  '),
    ('', ''), ('\n\n', ''),
    ('r' * 1000, 'r' * 300),  # cut at 300 characters
])
def test_first_line_of_a_pause_file(tmp_path, data, line):
    path = tmp_path / 'pause'
    path.write_text(data)
    assert statedir.first_line(str(path)) == line


def test_first_line_of_anything_but_a_regular_file_is_empty(tmp_path):
    target = tmp_path / 'target'
    target.write_text('forged reason')
    os.symlink(str(target), str(tmp_path / 'link'))
    os.mkfifo(str(tmp_path / 'fifo'))
    big = tmp_path / 'big'
    big.write_bytes(b'x' * (MAX_READ + 1))
    for name in ('link', 'fifo', 'missing', 'big'):
        assert statedir.first_line(str(tmp_path / name)) == '', name
    assert statedir.first_line(str(tmp_path)) == ''


# ------------------------------------------------------------------ the lock


def test_the_lock_file_is_created_a_regular_file_and_locked(tmp_path):
    path = str(tmp_path / '.lock')
    fd = statedir.open_lock(path)
    try:
        assert stat.S_ISREG(os.fstat(fd).st_mode)
        assert statedir.lock(fd, 5) is not None
    finally:
        os.close(fd)


def test_a_planted_link_is_never_the_lock(tmp_path):
    target = tmp_path / 'etc-passwd'
    target.write_text('x')
    path = tmp_path / '.lock'
    os.symlink(str(target), str(path))
    with pytest.raises(StateError) as caught:
        statedir.open_lock(str(path))
    assert str(caught.value) == '%s is a symbolic link: not followed' % path
    os.mkfifo(str(tmp_path / 'fifo'))
    with pytest.raises(StateError) as caught:
        statedir.open_lock(str(tmp_path / 'fifo'))
    assert str(caught.value) == '%s is not a regular file' % (tmp_path / 'fifo')
    with pytest.raises(StateError) as caught:
        statedir.open_lock(str(tmp_path / 'no' / '.lock'))
    assert str(caught.value).startswith('cannot open the lock %s: ' % (tmp_path / 'no' / '.lock'))


def test_a_lock_held_by_another_is_waited_for_up_to_the_timeout(tmp_path):
    path = str(tmp_path / '.lock')
    holder = statedir.open_lock(path)
    waiter = statedir.open_lock(path)
    try:
        fcntl.flock(holder, fcntl.LOCK_EX)
        clock = Clock(0.0)
        assert statedir.lock(waiter, 2, sleep=clock.sleep, clock=clock) is None
        assert 2 < clock() < 2.5 and set(clock.sleeps) == {0.1}
        # Released during the wait: taken, and the seconds waited are returned.
        clock = Clock(0.0)

        def sleep(seconds):
            clock.sleep(seconds)
            if len(clock.sleeps) == 4:
                fcntl.flock(holder, fcntl.LOCK_UN)

        assert statedir.lock(waiter, 30, sleep=sleep, clock=clock) == pytest.approx(0.4)
    finally:
        os.close(holder)
        os.close(waiter)


# ------------------------------------------------------------------ write_text, remove, append_line, tail_lines


def test_write_text_replaces_a_file_atomically_with_its_mode(tmp_path):
    path = tmp_path / 'state.json'
    path.write_text('old')
    statedir.write_text(str(path), 'new')
    assert path.read_text() == 'new' and mode_of(path) == 0o640
    statedir.write_text(str(path), 'newer', mode=0o600)
    assert path.read_text() == 'newer' and mode_of(path) == 0o600
    assert sorted(os.listdir(str(tmp_path))) == ['state.json']  # no temporary file left


def test_write_text_replaces_a_planted_link_and_never_writes_through_it(tmp_path):
    target = tmp_path / 'target'
    target.write_text('untouched')
    path = tmp_path / 'state.json'
    os.symlink(str(target), str(path))
    statedir.write_text(str(path), 'mine')
    assert not path.is_symlink() and path.read_text() == 'mine'
    assert target.read_text() == 'untouched'


def test_write_text_that_fails_leaves_no_temporary_file(tmp_path):
    with pytest.raises(TypeError):
        statedir.write_text(str(tmp_path / 'state.json'), b'not text')
    assert os.listdir(str(tmp_path)) == []


def test_remove(tmp_path):
    path = tmp_path / 'f'
    path.write_text('x')
    assert statedir.remove(str(path)) is True
    assert statedir.remove(str(path)) is False
    target = tmp_path / 'target'
    target.write_text('kept')
    os.symlink(str(target), str(tmp_path / 'link'))
    assert statedir.remove(str(tmp_path / 'link')) is True
    assert target.read_text() == 'kept'
    (tmp_path / 'dir').mkdir()
    with pytest.raises(StateError) as caught:
        statedir.remove(str(tmp_path / 'dir'))
    assert str(caught.value).startswith('cannot remove %s: ' % (tmp_path / 'dir'))


def test_append_line_rotates_keeping_the_given_number_of_files(tmp_path):
    path = tmp_path / 'log'
    for number in range(6):
        statedir.append_line(str(path), 'line %d' % number, max_bytes=13, keep=2)
    assert path.read_text() == 'line 5\n'
    assert (tmp_path / 'log.1').read_text() == 'line 4\n'  # two lines (14 bytes) do not fit in 13
    assert (tmp_path / 'log.2').read_text() == 'line 3\n'
    assert not (tmp_path / 'log.3').exists()


def test_append_line_keeps_lines_within_the_bound_and_ends_each_once(tmp_path):
    path = tmp_path / 'log'
    statedir.append_line(str(path), 'a\n', max_bytes=4)
    statedir.append_line(str(path), 'b', max_bytes=4)  # exactly 4 bytes: no rotation
    assert path.read_text() == 'a\nb\n' and mode_of(path) == 0o640
    assert not (tmp_path / 'log.1').exists()


def test_append_line_never_writes_through_a_link_or_into_a_fifo(tmp_path):
    target = tmp_path / 'target'
    target.write_text('untouched\n')
    os.symlink(str(target), str(tmp_path / 'link'))
    os.mkfifo(str(tmp_path / 'fifo'))
    for name in ('link', 'fifo'):
        with pytest.raises(StateError) as caught:
            statedir.append_line(str(tmp_path / name), 'x')
        assert str(caught.value) == '%s is not a regular file' % (tmp_path / name)
    assert target.read_text() == 'untouched\n'


@pytest.mark.parametrize('count, lines', [(2, ['c', 'd']), (10, ['a', 'b', 'c', 'd']), (0, []), (-1, [])])
def test_tail_lines(tmp_path, count, lines):
    path = tmp_path / 'log'
    path.write_text('a\nb\nc\nd\n')
    assert statedir.tail_lines(str(path), count) == lines


def test_tail_lines_of_what_cannot_be_trusted_is_empty(tmp_path):
    target = tmp_path / 'target'
    target.write_text('forged\n')
    os.symlink(str(target), str(tmp_path / 'link'))
    assert statedir.tail_lines(str(tmp_path / 'link'), 5) == []
    assert statedir.tail_lines(str(tmp_path / 'missing'), 5) == []
    big = tmp_path / 'big'
    big.write_text('x\n' * 100)
    assert statedir.tail_lines(str(big), 5, limit=10) == []


def test_tail_json_names_the_file_and_line_of_damage_within_the_tail(tmp_path):
    path = tmp_path / 'v.jsonl'
    path.write_text('{"n": 1}\nnot json\n\n{"n": 2}\n' + 'A' * 500 + '\n')
    records, damaged = statedir.tail_json(str(path), 4)
    assert records == [{'n': 2}]
    assert damaged == ['%s line 2 is not a JSON object: %r' % (path, 'not json'),
                       '%s line 5 is not a JSON object: %r' % (path, 'A' * 120)]


@pytest.mark.parametrize('line', ['[' * 100000, '{"a": ' * 100000, '1e999999', 'null', '"a string"'])
def test_json_lines_of_hostile_lines_names_them_and_goes_on(line):
    records, damaged = statedir.json_lines([line, '{"ok": true}'])
    assert records == [{'ok': True}]
    assert damaged == ['line 1 is not a JSON object: %r' % line[:120]]
