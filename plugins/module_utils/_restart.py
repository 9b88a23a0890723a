# -*- coding: utf-8 -*-
# Copyright (c) modelops.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

"""The one place that performs a restart: what modelops.vllm.restart runs, in order, and what it returns.

Private to this collection. It decides nothing (``_decide`` does, through the gate); it runs the commands of a
method (``_service``), waits for the host's memory between a stop and a start (``_host``) and for the server to be
ready (``_ready``), and keeps the memory baseline of a start that came up healthy. The module builds its options and
its client and hands them here; everything that touches the world is injected (``run``, ``sleep``, ``clock``), so
each step is tested without the module (tests/unit/plugins/module_utils/test_restart_flow.py).

``params`` is the module's: ``action``, ``method``, ``service``, ``compose_project_dir``, ``restart_command``,
``environment``, ``wait_ready``, ``url``, ``model``, ``old_start_time``, ``old_reading``, ``release_memory``,
``meminfo``, ``memory_baseline``, ``setting_prefix`` and the catalogue's numbers (``command_timeout``,
``ready_timeout``, ``ready_delay``, ``metrics_timeout``, ``memory_*``).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import time

from ansible_collections.modelops.vllm.plugins.module_utils import _host
from ansible_collections.modelops.vllm.plugins.module_utils import _statedir as statedir
from ansible_collections.modelops.vllm.plugins.module_utils._ready import (
    read_process,
    reading_from_summary,
    still_answers,
    wait_ready,
)
from ansible_collections.modelops.vllm.plugins.module_utils._redact import redact
from ansible_collections.modelops.vllm.plugins.module_utils._service import (
    STOP_START_METHODS,
    ServiceError,
    commands_failed,
    restart_commands,
    run_argv,
    run_commands,
    stop_start_commands,
    stop_then_start,
)
from ansible_collections.modelops.vllm.plugins.module_utils._settings import (
    CHECK_LIMITS, MEMORY_LIMITS, READY_LIMITS)
from ansible_collections.modelops.vllm.plugins.module_utils._types import in_range, range_words


def invalid_settings(p):
    """What is wrong with the numbers, against the catalogue's ranges: one sentence each."""
    limits = dict(READY_LIMITS, metrics_timeout=CHECK_LIMITS['metrics_timeout'], **MEMORY_LIMITS)
    return ['%s must be %s, got %s' % (key, range_words(bounds), p[key])
            for key, bounds in limits.items() if in_range(p[key], bounds) is None]


def waits(p):
    """Whether the action ends by waiting until the server is ready (a stop never does)."""
    return bool((p['wait_ready'] and p['action'] != 'stop') or p['action'] == 'wait_ready')


def problems(p):
    """What makes the options unusable, before anything runs: the ranges, then a wait without a URL."""
    found = invalid_settings(p)
    if waits(p) and not p['url']:
        found.append('url is required to wait until the server is ready (or set wait_ready: false)')
    return found


def commands_of(p):
    """(every command in order, (stop commands, start commands) or None): what the action runs. With release_memory a
    restart is split in two, to wait for the memory in between, where its method can be (your own command cannot).
    Raises ServiceError for a method's missing setting."""
    if p['action'] == 'wait_ready':
        return [], None
    if p['action'] in ('stop', 'start'):
        split = stop_start_commands(p['method'], p['service'], p['compose_project_dir'])
        if split is None:
            raise ServiceError('the %s method has no %s of its own (only %s have)'
                               % (p['method'], p['action'], ', '.join(STOP_START_METHODS)))
        return (split[0] if p['action'] == 'stop' else split[1]), None
    commands = restart_commands(p['method'], p['service'], p['compose_project_dir'], p['restart_command'],
                                upgrade=p['action'] == 'upgrade')
    split = None
    if p['release_memory'] and p['action'] == 'restart':
        split = stop_start_commands(p['method'], p['service'], p['compose_project_dir'])  # None: not split (command)
    return (split[0] + split[1], split) if split else (commands, None)


def check_mode_result(commands):
    """What check mode returns: the commands it would run, none of them run."""
    return dict(changed=False, commands=[{'argv': argv, 'rc': None, 'stdout': '', 'stderr': ''} for argv in commands],
                ready=None, msg='check mode: would run %s' % '; '.join(' '.join(argv) for argv in commands))


def this_host(p):
    """(MemTotal in kB or None, boot id or None, host name) of the host the module runs on."""
    info, dummy = _host.read_meminfo(p['meminfo'])
    return (info or {}).get('MemTotal'), _host.read_boot_id(), os.uname()[1]


def wait_for_memory(p, sleep=time.sleep, clock=time.monotonic):
    """Wait until MemAvailable is back (see _host.wait_memory); the result says against what. A baseline that cannot
    be trusted here (garbage, more than this host has, of another host or boot) is no threshold: vLLM is started."""
    total_kb, boot_id, host = this_host(p)
    baseline, distrust = _host.read_baseline(p['memory_baseline'], total_kb, boot_id, host, time.time())
    threshold_kb, source = _host.memory_threshold(p['memory_threshold'], p['memory_fraction'], baseline, distrust,
                                                  p['memory_baseline'], prefix=p.get('setting_prefix') or '')
    memory = _host.wait_memory(lambda: _host.mem_available_kb(p['meminfo']), threshold_kb, p['memory_timeout'],
                               p['memory_delay'], sleep=sleep, clock=clock)
    memory.update(threshold_kb=threshold_kb, threshold=source, baseline_written=False)
    if distrust:
        memory['baseline_ignored'] = '%s: %s' % (p['memory_baseline'], distrust)
    return memory


def after_stop(p, client, before, sleep=time.sleep, clock=time.monotonic):
    """What follows a stop that returned, before the start: (how the process from before still answers or None, the
    memory wait). Never raises: whatever goes wrong here, vLLM is started (a stopped server is the worst outcome),
    and the memory wait says what went wrong."""
    try:
        still = still_answers(client, before)
    except Exception:  # pylint: disable=broad-except
        still = None  # nothing shows that it still answers: the stop is taken as done
    if still:
        return still, None
    try:
        return None, wait_for_memory(p, sleep, clock)
    except Exception as exc:  # pylint: disable=broad-except
        return None, {'released': True, 'available_kb': None, 'threshold_kb': None, 'seconds': None, 'polls': 0,
                      'threshold': 'none', 'baseline_written': False,
                      'why': 'the wait for the memory failed (%s: %s), so vLLM is started without it rather than left '
                             'stopped' % (type(exc).__name__, str(exc)[:200])}


def keep_baseline(p, memory, ready):
    """After a start that came up ready: what the host had available just before it, for the next threshold."""
    if not p['memory_baseline'] or memory.get('available_kb') is None or not (ready or {}).get('ok'):
        return False
    try:
        total_kb, boot_id, host = this_host(p)
        record = _host.baseline_record(memory['available_kb'], total_kb, boot_id, host, time.time())
        statedir.write_text(p['memory_baseline'], json.dumps(record) + '\n')
    except Exception:  # pylint: disable=broad-except
        return False  # bookkeeping after a start that worked: never a failure of the restart
    return True


def environment(extra):
    """The commands' environment: this process's, with the option's variables over it (None: inherited as it is)."""
    if not extra:
        return None
    env = dict(os.environ)
    env.update((str(k), str(v)) for k, v in extra.items())
    return env


def perform(p, commands, split, client, secrets, run=run_argv, sleep=time.sleep, clock=time.monotonic):
    """Run the action: its commands (split in a stop, the memory wait and a start when ``split``), then the wait until
    the server is ready (with a ``client``, when the action waits). Returns (what failed in one sentence, or None;
    the module's result: ``changed``, ``commands``, ``ready`` and, after a memory wait, ``memory``), every text
    with ``secrets`` masked."""
    # The process before the restart, as the caller saw it; the module's own read, when it has a client, comes first.
    before = reading_from_summary(p['old_reading'], start=p['old_start_time'])
    if client is not None and commands:
        before = read_process(client) or before  # ready means that another process answers
    env = environment(p['environment'])

    def run_one(argv):
        return run(argv, timeout=p['command_timeout'], env=env)

    memory = None
    if split:
        records, why, memory = stop_then_start(run_one, split[0], split[1],
                                               lambda: after_stop(p, client, before, sleep, clock),
                                               url=p['url'], meminfo=p['meminfo'])
    else:
        records, failed = run_commands(run_one, commands)
        why = commands_failed(failed) if failed else None
        if not why and p['action'] == 'stop' and p['release_memory']:
            memory = wait_for_memory(p, sleep, clock)
            if not memory['released']:
                why = 'stopped, and the memory did not come back (%s): not started' % (memory.get('why') or '?')
    records = redact(records, secrets)
    if why:
        return redact(why, secrets), dict(changed=True, commands=records, ready=None,
                                          **({'memory': memory} if memory is not None else {}))
    ready = None
    if client is not None and waits(p):
        ready = redact(wait_ready(client, p['ready_timeout'], p['ready_delay'], model=p['model'], sleep=sleep,
                                  clock=clock, before=before), secrets)
        if not ready['ok']:
            return ('not ready within %g s of the restart: %s' % (p['ready_timeout'], ready['why']),
                    dict(changed=bool(records), commands=records, ready=ready, memory=memory))
    if memory is not None:
        memory['baseline_written'] = keep_baseline(p, memory, ready)
    result = dict(changed=bool(records), commands=records, ready=ready)
    if memory is not None:
        result['memory'] = memory
    return None, result
