# -*- coding: utf-8 -*-
# Copyright (c) modelops.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

"""The watchdog's state directory on a host, handled as a root process must handle it.

Private to this collection. The gate runs as root and decides restarts from what this
directory holds, so it trusts nothing in it:

* the directory must not be writable by group or others, and must belong to the user
  that runs the gate or to root (``check_dir``);
* files are opened without following symbolic links, must be regular files (a FIFO
  would block a reader forever), and are read up to a bound (``read_text``);
* the lock file is created without following a planted link (``open_lock``), and the
  lock is waited for with a timeout;
* the layout of the directory is spelled once (``paths``);
* files are replaced atomically (``write_text``) and logs rotated at a size bound
  (``append_line``), each line appended on a line of its own even after a cut one; ``json_lines`` reads
  such a log and names the lines that are damaged instead of stopping at them.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import errno
import hashlib
import fcntl
import json
import os
import re
import stat
import tempfile
import time

# No state file of the watchdog comes near this; a larger one is not read.
MAX_READ = 1024 * 1024
_NOFOLLOW = getattr(os, 'O_NOFOLLOW', 0)
_CLOEXEC = getattr(os, 'O_CLOEXEC', 0)


class StateError(Exception):
    """The state directory or a file in it cannot be trusted or used."""


def paths(state_dir, name=None):
    """The watchdog's files in ``state_dir``, the one place their names are spelled.

    Always the host's: ``paused`` (the pause file of every instance), ``evidence`` (the directory of the hangs'
    evidence), ``checks`` (the background checks' results). With an instance ``name`` (a plain file name) also
    its own: ``lock``, ``history`` (``<name>.json``), ``failed`` (``<name>.restart-failed``), ``verdicts``
    (``<name>.verdicts.jsonl``, rotated to ``.1``, ``.2``), ``instance_paused`` (``<name>.paused``), ``memory``
    (``<name>.memory.json``, the memory baseline of the restart module), and the health check's progress memory
    ``progress`` (``<name>.progress.json``) with its ``progress_lock``. The health check names a server by any
    string: ``file_name`` makes it a plain file name first."""
    join = os.path.join
    out = {
        'paused': join(state_dir, 'paused'),
        'evidence': join(state_dir, 'evidence'),
        'checks': join(state_dir, 'checks'),
    }
    if name is not None:
        out.update({
            'lock': join(state_dir, '%s.lock' % name),
            'history': join(state_dir, '%s.json' % name),
            'failed': join(state_dir, '%s.restart-failed' % name),
            'verdicts': join(state_dir, '%s.verdicts.jsonl' % name),
            'instance_paused': join(state_dir, '%s.paused' % name),
            'memory': join(state_dir, '%s.memory.json' % name),
            'progress': join(state_dir, '%s.progress.json' % name),
            'progress_lock': join(state_dir, '%s.progress.lock' % name),
        })
    return out


def file_name(name):
    """A server's name as a plain file name: other characters become ``_``, at most 100 of them, no leading dot,
    and a short hash of the name added when it had to be changed (two names never share a file)."""
    plain = re.sub(r'[^A-Za-z0-9_.-]', '_', name)[:100].lstrip('.') or '_'
    if plain != name:
        plain += '-' + hashlib.sha1(name.encode('utf-8', 'replace')).hexdigest()[:10]
    return plain


def _owner_ok(st):
    return st.st_uid in (os.geteuid(), 0)


def check_dir(path, create=True):
    """Make sure ``path`` is a directory only its owner can write (create it 0750 if asked).

    Returns True when it exists afterwards (False: missing and not created)."""
    try:
        st = os.stat(path)
    except OSError as exc:
        if exc.errno != errno.ENOENT:
            raise StateError('state_dir %s cannot be read: %s' % (path, exc.strerror))
        if not create:
            return False
        try:
            os.makedirs(path, 0o750)
        except OSError as exc:
            raise StateError('cannot create state_dir %s: %s' % (path, exc.strerror))
        st = os.stat(path)
    if not stat.S_ISDIR(st.st_mode):
        raise StateError('state_dir %s is not a directory' % path)
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise StateError('state_dir %s is writable by %s (mode %04o): anyone who can write there could forge the '
                         'restart history or plant links; make it 0750 or 0700 (chmod go-w %s)'
                         % (path, 'others' if st.st_mode & stat.S_IWOTH else 'its group', stat.S_IMODE(st.st_mode),
                            path))
    if not _owner_ok(st):
        raise StateError('state_dir %s belongs to uid %d, not to the user that runs the watchdog (uid %d) or root'
                         % (path, st.st_uid, os.geteuid()))
    return True


def _open_regular(path, flags, mode=0o600):
    """os.open without following a link at ``path``, non-blocking (a FIFO returns at once); the file must be regular."""
    try:
        fd = os.open(path, flags | _NOFOLLOW | os.O_NONBLOCK | _CLOEXEC, mode)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise StateError('%s is a symbolic link: not followed' % path)
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise StateError('%s is not a regular file' % path)
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_text(path, limit=MAX_READ):
    """The file's text, or None when it does not exist. StateError when it cannot be trusted."""
    try:
        fd = _open_regular(path, os.O_RDONLY)
    except OSError as exc:
        if exc.errno == errno.ENOENT:
            return None
        raise StateError('%s cannot be read: %s' % (path, exc.strerror))
    try:
        data = os.read(fd, limit + 1)
        chunks = [data]
        while data and sum(len(c) for c in chunks) <= limit:
            data = os.read(fd, limit + 1)
            chunks.append(data)
    except OSError as exc:
        raise StateError('%s cannot be read: %s' % (path, exc.strerror))
    finally:
        os.close(fd)
    raw = b''.join(chunks)
    if len(raw) > limit:
        raise StateError('%s is larger than %d bytes' % (path, limit))
    return raw.decode('utf-8', 'replace')


def exists(path):
    """Whether anything (a file, a FIFO, a link) is at ``path``; never follows a link."""
    try:
        os.lstat(path)
        return True
    except OSError:
        return False


def first_line(path, limit=300):
    """The first line of a regular file (a pause file's reason), '' for anything else."""
    try:
        text = read_text(path, MAX_READ)
    except (StateError, OSError):
        return ''
    lines = (text or '')[:limit].strip().splitlines()
    return lines[0] if lines else ''


def open_lock(path):
    """Open (create) the lock file safely: never through a planted link, only a regular file."""
    try:
        return _open_regular(path, os.O_RDWR | os.O_CREAT)
    except OSError as exc:
        raise StateError('cannot open the lock %s: %s' % (path, exc.strerror))


def lock(fd, timeout, sleep=time.sleep, clock=time.monotonic):
    """Take an exclusive flock, waiting up to ``timeout`` seconds: the seconds waited, or None."""
    started = clock()
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return clock() - started
        except (IOError, OSError) as exc:
            if exc.errno not in (errno.EAGAIN, errno.EACCES):
                raise
        if clock() - started > timeout:
            return None
        sleep(0.1)


def write_text(path, text, mode=0o640):
    """Replace ``path`` atomically (a link planted there is replaced, never followed)."""
    directory = os.path.dirname(path) or '.'
    fd, tmp = tempfile.mkstemp(dir=directory, prefix='.%s-' % os.path.basename(path))
    try:
        with os.fdopen(fd, 'w') as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, mode)
        os.rename(tmp, path)
    except BaseException:
        if os.path.lexists(tmp):
            os.unlink(tmp)
        raise


def remove(path):
    """Remove a file if it is there (a link is removed, not followed)."""
    try:
        os.unlink(path)
        return True
    except OSError as exc:
        if exc.errno == errno.ENOENT:
            return False
        raise StateError('cannot remove %s: %s' % (path, exc.strerror))


def append_line(path, line, max_bytes=1024 * 1024, keep=2):
    """Append one line; past ``max_bytes`` the file moves to ``path.1`` (``path.1`` to ``path.2``, ...)."""
    try:
        st = os.lstat(path)
        if not stat.S_ISREG(st.st_mode):
            raise StateError('%s is not a regular file' % path)
        size = st.st_size
    except OSError as exc:
        if exc.errno != errno.ENOENT:
            raise StateError('%s cannot be read: %s' % (path, exc.strerror))
        size = 0
    if size and size + len(line) + 1 > max_bytes:
        for index in range(keep, 0, -1):
            older = '%s.%d' % (path, index)
            newer = path if index == 1 else '%s.%d' % (path, index - 1)
            if exists(newer):
                os.rename(newer, older)
    fd = _open_regular(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o640)
    try:
        data = (line.rstrip('\n') + '\n').encode('utf-8')
        end = os.fstat(fd).st_size
        if end and os.pread(fd, 1, end - 1) != b'\n':
            # The last line was cut (a crash, a full disk): this one starts on a line of its own, never glued to it.
            data = b'\n' + data
        os.write(fd, data)
    finally:
        os.close(fd)


def json_lines(lines, first=1):
    """The JSON objects of ``lines`` and the lines that are not one: ``(records, damaged)``, where each damaged
    line is named by its number (counted from ``first``) and its first characters. Blank lines are skipped."""
    records, damaged = [], []
    for number, line in enumerate(lines, first):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except (ValueError, RecursionError):
            record = None
        if isinstance(record, dict):
            records.append(record)
        else:
            damaged.append('line %d is not a JSON object: %r' % (number, line[:120]))
    return records, damaged


def tail_lines(path, count, limit=MAX_READ):
    """The last ``count`` lines of a file ([] when it is missing or cannot be trusted)."""
    return _tail(path, count, limit)[1]


def _tail(path, count, limit):
    try:
        text = read_text(path, limit)
    except (StateError, OSError):
        return 1, []
    lines = (text or '').splitlines()
    kept = lines[-count:] if count > 0 else []
    return len(lines) - len(kept) + 1, kept


def tail_json(path, count, limit=MAX_READ):
    """The JSON objects of the last ``count`` lines of a JSON-lines file, and its damaged lines among them, each
    named by the file and its line number: ``(records, damaged)``."""
    first, lines = _tail(path, count, limit)
    records, damaged = json_lines(lines, first)
    return records, ['%s %s' % (path, problem) for problem in damaged]


def read_tail(path, limit=MAX_READ):
    """The end of a file that may be large: its last ``limit`` bytes, from the first whole line in them.

    ``(text, cut)``: ``cut`` is True when the file was longer, so its first lines were left out. ``(None, False)``
    when it does not exist. StateError when it cannot be trusted (a link, a FIFO, a directory): the same rules as
    ``read_text``, and never more than ``limit`` + 1 bytes read, however large the file."""
    try:
        fd = _open_regular(path, os.O_RDONLY)
    except OSError as exc:
        if exc.errno == errno.ENOENT:
            return None, False
        raise StateError('%s cannot be read: %s' % (path, exc.strerror))
    try:
        size = os.fstat(fd).st_size
        cut = size > limit
        # One byte before the window too: whether the window starts on a line of its own.
        start = size - limit - 1 if cut else 0
        chunks, want = [], size - start
        while want > 0:
            data = os.pread(fd, want, start + sum(len(c) for c in chunks))
            if not data:
                break
            chunks.append(data)
            want -= len(data)
    except OSError as exc:
        raise StateError('%s cannot be read: %s' % (path, exc.strerror))
    finally:
        os.close(fd)
    raw = b''.join(chunks)
    if cut:
        # Only what follows the first line break is a whole line (a line longer than the window is not read).
        newline = raw.find(b'\n')
        raw = raw[newline + 1:] if newline >= 0 else b''
    return raw.decode('utf-8', 'replace'), cut
