# -*- coding: utf-8 -*-
# Copyright (c) modelops.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

"""A check in the background on a host, and its result read once it is done.

Private to this collection. ``start_background`` runs a check in a detached process and returns at
once; the process writes ``{"started": true, "finished": false}`` to a new results file, then
replaces it with the result. That is the layout of Ansible's own async wrapper too, so
``read_results`` reads either. The background start is a plain module run (Ansible's ``async``
costs about one and a half: it sends the async wrapper too and waits for the job to report that it
started), and reading the file from a module on the same host (``modelops.vllm.health`` with
``results_file``, ``modelops.vllm.watchdog_gate``) collects the verdicts in one module run, where
``async_status`` would poll (and print a ``FAILED - RETRYING`` line per poll) and need another run
to remove the file.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import signal
import tempfile
import time

from ansible_collections.modelops.vllm.plugins.module_utils import _statedir as statedir

RESULTS_MAX = 64 * 1024 * 1024
# Results files of checks whose result nobody collected (a host that stopped answering) are removed
# by a later start after this many seconds.
STALE = 3600
# In check mode a missing background directory is not created: the file goes to a private temporary
# directory with this prefix instead, which the read that collects it removes (check mode leaves nothing).
CHECK_MODE_PREFIX = 'modelops-vllm-check-'


def start_background(work, directory, limit, create=True):
    """Run ``work()`` (returning a JSON-able dict) in a detached process; return the path of its results file.

    The process has no terminal and no open pipes (the SSH session that started it ends at once), runs
    for at most ``limit`` seconds (then the file says it failed), and writes the file atomically. With
    ``create`` false (check mode) a missing ``directory`` is not created: the file goes to a private
    temporary directory, removed with the file by ``read_results``.
    """
    if statedir.check_dir(directory, create=create):
        _remove_stale(directory)
    else:
        directory = tempfile.mkdtemp(prefix=CHECK_MODE_PREFIX)
    fd, path = tempfile.mkstemp(dir=directory, prefix='check-', suffix='.json')
    with os.fdopen(fd, 'w') as handle:
        handle.write(json.dumps({'started': True, 'finished': False}))
    pid = os.fork()
    if pid:
        os.waitpid(pid, 0)  # the first child leaves at once; the grandchild is nobody's child
        return path
    try:
        os.setsid()
        if os.fork():
            os._exit(0)
        devnull = os.open(os.devnull, os.O_RDWR)
        for std in (0, 1, 2):
            os.dup2(devnull, std)

        def out_of_time(signum, frame):
            raise RuntimeError('the background check ran for more than %d s' % limit)

        signal.signal(signal.SIGALRM, out_of_time)
        signal.alarm(max(1, int(limit)))
        try:
            result = work()
        except BaseException as exc:  # pylint: disable=broad-except
            result = {'failed': True, 'msg': 'the background check failed: %s: %s' % (type(exc).__name__, exc)}
        signal.alarm(0)
        statedir.write_text(path, json.dumps(result), mode=0o600)
    finally:
        os._exit(0)


def _remove_check_mode_dir(directory):
    """The private directory of a check-mode start, once its file is collected (an empty one only)."""
    if os.path.basename(directory).startswith(CHECK_MODE_PREFIX) and os.path.dirname(directory) == tempfile.gettempdir():
        try:
            os.rmdir(directory)
        except OSError:
            pass


def _remove_stale(directory, now=None):
    now = time.time() if now is None else now
    for name in os.listdir(directory):
        if name.startswith('check-') and name.endswith('.json'):
            path = os.path.join(directory, name)
            try:
                if now - os.lstat(path).st_mtime > STALE:
                    os.unlink(path)
            except OSError:
                pass


def read_results(path, timeout, sleep=time.sleep, clock=time.monotonic):
    """The finished result of a job (waiting up to ``timeout`` seconds), its file removed.
    Returns (result dict, None) or (None, why)."""
    started = clock()
    while True:
        try:
            text = statedir.read_text(path, RESULTS_MAX)
        except (statedir.StateError, OSError) as exc:
            return None, 'the check\'s result cannot be read: %s' % exc
        if text is None:
            return None, 'the check\'s result file %s does not exist' % path
        try:
            data = json.loads(text)
        except (ValueError, RecursionError):
            data = None  # being replaced right now: read again
        if isinstance(data, dict) and not (data.get('started') and data.get('finished') in (False, 0)):
            try:
                statedir.remove(path)
            except statedir.StateError:
                pass
            _remove_check_mode_dir(os.path.dirname(path))
            return data, None
        if clock() - started > timeout:
            return None, 'the check did not finish within %s s' % timeout
        sleep(0.2)


def verdicts_from(result, why):
    """({name: verdict}, None) from a health result with servers, or ({}, why) for a failed job."""
    if result is None:
        return {}, why
    servers = result.get('servers')
    if isinstance(servers, list):
        return dict((s.get('name'), s) for s in servers if isinstance(s, dict)), None
    return {}, 'the check failed: %s' % str(result.get('msg') or 'no verdicts')[:500]
