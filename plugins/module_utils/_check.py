# -*- coding: utf-8 -*-
# Copyright (c) modelops.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

"""Check one server, or many at once: every server in its own thread, so the
waits between reads are paid once for all of them, not once per server.

Private to this collection. Whatever happens, a check returns a result of its
own server: a configuration error is a result with ``error`` set, anything
unexpected is ``unknown`` with the exception's name (never a traceback), no
check outlives its overall deadline, and no secret (the API key, a password in
the URL) is left in a result in any spelling.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import threading
import time

from ansible_collections.modelops.vllm.plugins.module_utils import _statedir as statedir
from ansible_collections.modelops.vllm.plugins.module_utils._http import Client
from ansible_collections.modelops.vllm.plugins.module_utils._redact import redact, secrets_of
from ansible_collections.modelops.vllm.plugins.module_utils._freeze import DEFAULT_LIMIT, Freeze
from ansible_collections.modelops.vllm.plugins.module_utils._stall import Window, fresh
from ansible_collections.modelops.vllm.plugins.module_utils._urls import display_url
from ansible_collections.modelops.vllm.plugins.module_utils._types import CheckError, clip
from ansible_collections.modelops.vllm.plugins.module_utils._settings import check_deadline
from ansible_collections.modelops.vllm.plugins.module_utils._verdict import Judge, check_proxy
from ansible_collections.modelops.vllm.plugins.module_utils import _vllm

# The engines a check knows, by name: each an engine profile (_vllm.EngineProfile) that the client, the
# window and the judge receive. A second engine is one entry here (its profile, its fixtures and a simulator
# mode); which one a check uses is ``check_one``'s ``engine``, not a module option.
ENGINES = {_vllm.NAME: _vllm.PROFILE}
DEFAULT_ENGINE = _vllm.NAME

# The options that may differ per server; the others are shared.
PER_SERVER = ('name', 'url', 'kind', 'api_key', 'model', 'probe_api')
# Seconds a check waits for another check of the same server to let go of its progress memory: none. The
# other check holds it for its whole duration, and waiting would shift this check's reads in time.
MEMORY_LOCK_TIMEOUT = 0.0


def progress_file(state_dir, name):
    """Where the progress memory of a server lives: ``<state_dir>/<name>.progress.json``, the name made
    a plain file name (and told apart by a short hash when it had to be changed): ``_statedir.paths``."""
    return statedir.paths(state_dir, statedir.file_name(name))['progress']


def _boot_id():
    try:
        with open('/proc/sys/kernel/random/boot_id') as handle:
            return handle.read(64).strip() or None
    except (IOError, OSError):
        return None


class Memory(object):
    """The memory of one server in ``state_dir`` across checks: the progress window's streaks (the window rule)
    and the engines' freezes (how long nothing has moved, for ``freeze_limit``). Read under a lock held for the
    whole check (a second check of the same server meanwhile goes without it), written back atomically, never
    in check mode. Every fault leaves this check without the memory, and the evidence says why: it can only
    delay a finding, never make one."""

    def __init__(self, spec, name, url, profile=_vllm.PROFILE):
        self.profile = profile
        self.fd = None
        self.path = None
        self.write = not spec.get('_check_mode')
        self.url = url
        window = float(spec.get('stall_window') or 0)
        limit = spec.get('freeze_limit')
        self.limit = float(DEFAULT_LIMIT if limit is None else limit)
        self.wait = float(spec.get('freeze_wait') or 0)
        state_dir = spec.get('state_dir')
        self.window = self.freeze = None
        if not state_dir:
            self._without('no state_dir: the rule needs a memory across checks', window)
            self.freeze.note = 'no state_dir: a freeze is measured within this check alone'
        else:
            self._open(state_dir, name, window)

    def _without(self, why, window, boot=None):
        self.window = Window(None, window, off='stall_window is 0' if window <= 0 else why, profile=self.profile)
        self.freeze = Freeze(None, self.limit, self.wait, boot=boot, remember=False)
        self.freeze.note = 'the memory across checks is not used: %s' % why

    def _open(self, state_dir, name, window):
        try:
            if not statedir.check_dir(state_dir, create=self.write):
                return self._without('state_dir %s does not exist (check mode creates nothing)' % state_dir, window)
            files = statedir.paths(state_dir, statedir.file_name(name))
            self.path = files['progress']
            if self.write:
                self.fd = statedir.open_lock(files['progress_lock'])
                if statedir.lock(self.fd, MEMORY_LOCK_TIMEOUT) is None:
                    self.close()
                    return self._without('another check of this server holds its progress memory', window)
            text = statedir.read_text(self.path)
        except (statedir.StateError, OSError) as exc:
            self.close()
            return self._without('the progress memory cannot be used: %s' % clip(exc), window)
        memory, note = None, None
        if text is not None:
            try:
                memory = json.loads(text)
            except (ValueError, RecursionError):
                note = 'the progress memory was not JSON: started afresh'
            if isinstance(memory, dict) and memory.get('url') != self.url:
                memory, note = None, 'the server has another url than at the last check: started afresh'
        boot = _boot_id()
        if window > 0:
            self.window = Window(memory, window, boot=boot, note=note, profile=self.profile)
        else:
            self.window = Window(None, 0, off='stall_window is 0', profile=self.profile)
        self.freeze = Freeze(memory.get('frozen') if isinstance(memory, dict) else None, self.limit, self.wait,
                             boot=boot)
        if note and not self.freeze.note:
            self.freeze.note = note
        return None

    def keep(self, state):
        """Write the memory back (not in check mode) after a check that said ``state``; a failure is a note in
        the evidence. A check that could not judge (``unknown``) keeps the freezes it found in the memory."""
        try:
            if self.fd is not None and self.write:
                streaks = self.window.memory if not self.window.off and self.window.memory else fresh()
                memory = dict(streaks, url=self.url, frozen=self.freeze.memory(judged=state != 'unknown'))
                statedir.write_text(self.path, json.dumps(memory, sort_keys=True) + '\n')
        except (statedir.StateError, OSError, TypeError, ValueError) as exc:
            self.window.summary['note'] = 'the progress memory could not be written: %s' % clip(exc)
        finally:
            self.close()

    def close(self):
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


def summary_line(result):
    """One line a person reads: name, verdict, reason."""
    return '%s: %s - %s' % (result.get('name'), result.get('state'), result.get('reason'))


def check_one(spec, sleep=time.sleep, clock=time.time, client_class=Client, monotonic=time.monotonic,
              engine=DEFAULT_ENGINE):
    """Check one server. ``spec`` has the module's options; ``engine`` names its profile in ``ENGINES``.
    Returns the result dict; a configuration error (TLS, bad URL, a request that cannot be sent)
    is a result with ``error`` set."""
    profile = ENGINES[engine]
    checked_at = time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())
    deadline = check_deadline(spec['interval'], spec['probe_timeout'], spec['metrics_timeout'],
                              spec.get('freeze_wait') or 0)
    name = spec.get('name') or display_url(spec['url'])
    memory = None
    try:
        client = client_class(spec['url'], api_key=spec.get('api_key'), validate_certs=spec['validate_certs'],
                              ca_path=spec.get('ca_path'), metrics_timeout=spec['metrics_timeout'],
                              probe_timeout=spec['probe_timeout'], max_bytes=spec['metrics_max_bytes'],
                              probe_api=spec.get('probe_api') or 'completions', clock=monotonic,
                              ends=monotonic() + deadline, use_proxy=spec.get('use_proxy', False), profile=profile)
        if spec.get('kind') == 'proxy':
            result = check_proxy(client)
        else:
            memory = Memory(spec, name, display_url(spec['url']), profile)
            result = Judge(client, interval=spec['interval'], model=spec.get('model'), sleep=sleep, clock=clock,
                           probe_timeout=spec['probe_timeout'], metrics_timeout=spec['metrics_timeout'],
                           monotonic=monotonic, deadline=deadline, window=memory.window, profile=profile,
                           freeze=memory.freeze).run()
            memory.keep(result['state'])
        result['error'] = None
    except CheckError as exc:
        result = {'state': 'unknown', 'reason': 'the check cannot run as configured: %s' % exc, 'error': str(exc)}
    except Exception as exc:  # pylint: disable=broad-except
        # A surprise of one check is that server's unknown, never a traceback and never the others' loss.
        result = {'state': 'unknown', 'error': None,
                  'reason': 'the check failed unexpectedly (%s: %s): not judged' % (type(exc).__name__, clip(exc))}
    finally:
        if memory is not None:
            memory.close()
    result.update(name=name, url=display_url(spec['url']),
                  kind=spec.get('kind') or 'backend', checked_at=checked_at)
    result['line'] = summary_line(result)
    return redact(result, secrets_of(spec))


def check_many(specs, workers=256, **kwargs):
    """Check every spec concurrently (at most ``workers`` at a time); results in the order of specs."""
    results = [None] * len(specs)
    pending = list(enumerate(specs))
    lock = threading.Lock()

    def work():
        while True:
            with lock:
                if not pending:
                    return
                index, spec = pending.pop(0)
            try:
                results[index] = check_one(spec, **kwargs)
            except Exception as exc:  # pylint: disable=broad-except
                # check_one catches its own surprises; this is the last guard, so that one server's
                # failure never loses the verdicts of the others.
                failed = {'state': 'unknown', 'error': None, 'name': spec.get('name') or display_url(spec['url']),
                          'url': display_url(spec['url']), 'kind': spec.get('kind') or 'backend',
                          'reason': 'the check failed unexpectedly (%s): not judged' % type(exc).__name__}
                failed['line'] = summary_line(failed)
                results[index] = redact(failed, secrets_of(spec))

    threads = [threading.Thread(target=work) for dummy in range(max(1, min(workers, len(specs))))]
    for thread in threads:
        thread.daemon = True
        thread.start()
    for thread in threads:
        thread.join()
    return results
