# -*- coding: utf-8 -*-
# Copyright (c) modelops.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

"""The ranges of the collection's number settings, in one place, and the check's deadline.

Private to this collection. Each range is ``(smallest, largest, whether the smallest itself is
allowed)``, checked by ``_types.in_range`` and said by ``_types.range_words``. The modules check
their options against these tables, and the watchdog role's preflight checks the role's variables
against the same ones (the ``watchdog_instances`` filter).

This module imports nothing, on purpose: the role's preflight loads it in the task worker of every
host of a fleet (issue 28), where each module of the collection is compiled from source. A table
kept here instead of in the module that uses it costs that worker nothing but these lines.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

WEEK = 7 * 86400
YEAR = 366 * 86400

# The check's settings (the health module; the restart module's wait until ready reads metrics_timeout).
CHECK_LIMITS = {
    'interval': (0, 3600, False),
    'probe_timeout': (0, 3600, False),
    'metrics_timeout': (0, 600, False),
}

# Any finite number of seconds from 0 (what a budget's parts may be).
SECONDS = (0, 10 ** 9, True)

# The window of the stall memory, seconds; 0 is off.
WINDOW_LIMITS = (0, WEEK, True)
# The freeze a healthy server may show (freeze_limit), and how long one check may keep watching a freeze that has not
# reached it yet (freeze_wait; 0: not at all).
FREEZE_LIMIT_LIMITS = (0, WEEK, False)
FREEZE_WAIT_LIMITS = (0, WEEK, True)

# Every number option of the health module; results_timeout only when it collects a background check's file.
RESULTS_TIMEOUT_LIMITS = (0, 86400, True)
HEALTH_LIMITS = dict(CHECK_LIMITS, metrics_max_bytes=(1024, 64 * 1024 * 1024, True), workers=(1, 4096, True),
                     stall_window=WINDOW_LIMITS, freeze_limit=FREEZE_LIMIT_LIMITS, freeze_wait=FREEZE_WAIT_LIMITS)

# The restart's commands and the wait until ready (the restart module).
READY_LIMITS = {
    'command_timeout': (0, 86400, False),
    'ready_timeout': (0, 86400, False),
    'ready_delay': (0, 3600, False),
}

# A memory wait after a stop (the restart module).
MEMORY_LIMITS = {
    'memory_threshold': (0, 2 ** 40, True),      # MiB; 0: from the baseline
    'memory_fraction': (0, 1, False),
    'memory_timeout': (0, 86400, True),
    'memory_delay': (0, 3600, False),
}

# The guard rails of the one decision (the watchdog_gate module, _decide).
DECIDE_LIMITS = {
    'startup_grace': (0, WEEK, True),
    'cooldown': (0, WEEK, True),
    'max_restarts': (0, 1000, True),
    'restart_window': (0, YEAR, False),
    'unknown_limit': (1, 100000, True),
    'down_limit': (1, 100000, True),
    'paused_limit': (0, YEAR, False),
    'reboot_cooldown': (0, YEAR, True),
    'rehang_window': (0, YEAR, True),
}

# The watchdog_gate module's own bounds: its locks, the service manager's answer, the background check's file, the
# evidence it keeps.
GATE_LIMITS = {
    'lock_timeout': (0, 10 ** 9, True),
    'status_timeout': (0, 10 ** 9, True),
    'results_timeout': (0, 10 ** 9, True),
    'log_lines': (0, 10 ** 9, True),
    'history_max_bytes': (4096, 10 ** 9, True),
    'evidence_timeout': (0, 10 ** 9, True),
}

# The watchdog role's own waits: a reboot's, and the evidence commands' (the gate's).
ROLE_LIMITS = {
    'reboot_timeout': (0, 86400, False),
    'evidence_timeout': GATE_LIMITS['evidence_timeout'],
}

# Every number the watchdog role's preflight checks, by its setting's name (the role's variable without its
# vllm_watchdog_ prefix).
WATCHDOG_LIMITS = dict(CHECK_LIMITS, stall_window=WINDOW_LIMITS, freeze_limit=FREEZE_LIMIT_LIMITS,
                       freeze_wait=FREEZE_WAIT_LIMITS)
for _table in (READY_LIMITS, MEMORY_LIMITS, DECIDE_LIMITS, ROLE_LIMITS):
    WATCHDOG_LIMITS.update(_table)
del _table


def check_deadline(interval, probe_timeout, metrics_timeout, freeze_wait=0):
    """Seconds one check may take at most, from its settings: two waits, two probes and eight reads
    of the cheap endpoints (the longest path: /version, three /metrics reads, /v1/models, two
    /health reads and one more /metrics read after a restart), and the time it may keep watching a
    freeze that has not lasted ``freeze_limit`` yet (``freeze_wait``). The role's async budget adds its
    start-up margin to this same number."""
    return 2 * interval + 2 * probe_timeout + 8 * metrics_timeout + freeze_wait
