# -*- coding: utf-8 -*-
# Copyright (c) modelops.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

"""The catalogue of the collection's settings: each number's range, the guard rails' and the gate's types and
defaults, and the check's deadline.

Private to this collection. Each range is ``(smallest, largest, whether the smallest itself is
allowed)``, checked by ``_types.in_range`` and said by ``_types.range_words``. The modules check
their options against these tables and build the argument specs of the settings catalogued with a
type and a default from them (``option_specs``); the watchdog role's preflight checks the role's
variables against the same ranges (the ``watchdog_instances`` filter). tests/unit/test_settings.py
keeps the role's defaults and argument specs, and the modules' documentation, equal to them.

This module imports nothing, on purpose: the role's preflight loads it in the task worker of every
host of a fleet (issue 28), where each module of the collection is compiled from source. A table
kept here instead of in the module that uses it costs that worker nothing but these lines.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

WEEK = 7 * 86400
YEAR = 366 * 86400

# Any finite number of seconds from 0 (what a budget's parts may be).
SECONDS = (0, 10 ** 9, True)

# The freeze a healthy server may show, seconds: vLLM's own stall watchdog (WatchdogConfig.timeout) and
# VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS are 300 s; a kernel JIT on Blackwell takes 30-70 s.
FREEZE_LIMIT = 300.0

# Each table: name: (type, default, range or None), the name as the modules' option and the watchdog role's
# vllm_watchdog_<name>. A module's default is the catalogue's; where the watchdog role's default differs on purpose,
# WATCHDOG_ROLE_DEFAULTS says it.

# The check's settings (the health module; the restart module's wait until ready reads metrics_timeout).
CHECK_SETTINGS = {
    'interval': ('float', 5.0, (0, 3600, False)),
    'probe_timeout': ('float', 30.0, (0, 3600, False)),
    'metrics_timeout': ('float', 10.0, (0, 600, False)),
}

# The health module's own: the largest /metrics answer it accepts (a real one is about 50 KB per engine) and how many
# servers one run checks at once.
HEALTH_SETTINGS = {
    'metrics_max_bytes': ('int', 16 * 1024 * 1024, (1024, 64 * 1024 * 1024, True)),
    'workers': ('int', 256, (1, 4096, True)),
}

# The check's memories: the stall window (0: off), the freeze a healthy server may show (freeze_limit) and how long
# one check may keep watching a freeze that has not reached it yet (freeze_wait; 0: not at all).
MEMORY_OF_CHECKS = {
    'stall_window': ('float', 0, (0, WEEK, True)),
    'freeze_limit': ('float', FREEZE_LIMIT, (0, WEEK, False)),
    'freeze_wait': ('float', 0, (0, WEEK, True)),
}

# The restart's commands and the wait until ready (the restart module).
READY_SETTINGS = {
    'command_timeout': ('float', 600, (0, 86400, False)),
    'ready_timeout': ('float', 900, (0, 86400, False)),
    'ready_delay': ('float', 10, (0, 3600, False)),
}

# A memory wait after a stop (the restart module).
MEMORY_SETTINGS = {
    'memory_threshold': ('float', 0, (0, 2 ** 40, True)),      # MiB; 0: from the baseline
    'memory_fraction': ('float', 0.9, (0, 1, False)),
    'memory_timeout': ('float', 300, (0, 86400, True)),
    'memory_delay': ('float', 5, (0, 3600, False)),
}

# The guard rails of the one decision: the watchdog_gate module's options, _decide's settings (and the rollout's,
# where it shares them); reboot is a switch.
GUARD_RAILS = {
    'startup_grace': ('float', 900, (0, WEEK, True)),
    'cooldown': ('float', 600, (0, WEEK, True)),
    'max_restarts': ('int', 3, (0, 1000, True)),
    'restart_window': ('float', 86400, (0, YEAR, False)),
    'unknown_limit': ('int', 3, (1, 100000, True)),
    'down_limit': ('int', 3, (1, 100000, True)),
    'paused_limit': ('float', 3600, (0, YEAR, False)),
    'reboot': ('bool', False, None),
    'reboot_cooldown': ('float', 21600, (0, YEAR, True)),
    'rehang_window': ('float', 3600, (0, YEAR, True)),
}

# The watchdog_gate module's own bounds: its locks, the service manager's answer, the background check's file (the
# health_results module's results_timeout too: it collects that file), the evidence it keeps.
GATE_SETTINGS = {
    'lock_timeout': ('float', 60, (0, 10 ** 9, True)),
    'status_timeout': ('float', 30, (0, 10 ** 9, True)),
    'results_timeout': ('float', 300, (0, 10 ** 9, True)),
    'log_lines': ('int', 200, (0, 10 ** 9, True)),
    'history_max_bytes': ('int', 1024 * 1024, (4096, 10 ** 9, True)),
    'evidence_timeout': ('float', 60, (0, 10 ** 9, True)),
}

# The watchdog role's own: a reboot's wait (the role waits, no module).
ROLE_SETTINGS = {
    'reboot_timeout': ('float', 1800, (0, 86400, False)),
}

# The rollout role's own: how long it waits for a busy server to be idle, how often it looks, and how many checks
# after a restart must find it serving.
ROLLOUT_SETTINGS = {
    'idle_timeout': ('float', 1800, (0, WEEK, True)),
    'idle_delay': ('float', 10, (0, 3600, False)),
    'verify_retries': ('int', 3, (1, 1000, True)),
}

# Where the watchdog role's default is not the module's, and why.
WATCHDOG_ROLE_DEFAULTS = {
    # A GB10's systemctl restart: a hung vLLM is killed after systemd's 90 s stop timeout, then its unified memory is
    # released; the restart module's 600 s is for a command of one's own that may wait for more.
    'command_timeout': 300,
    # The role keeps the check's memory in its state dir and runs every few minutes: the stall window is on (three
    # times the longest healthy stretch without tokens users report, vllm#54919). A module run alone has no schedule.
    'stall_window': 1200,
    # A run of the role watches a freeze up to the limit, so that a hang is restarted in the run that found it; a
    # module run alone reports what it saw at once.
    'freeze_wait': FREEZE_LIMIT,
}


def defaults_of(table):
    """name: default, for a table of (type, default, range)."""
    return dict((name, entry[1]) for name, entry in table.items())


def limits_of(table):
    """name: range, for the entries of a table of (type, default, range) that have one."""
    return dict((name, entry[2]) for name, entry in table.items() if entry[2] is not None)


def option_specs(table):
    """The argument spec of each setting of a table of (type, default, range)."""
    return dict((name, dict(type=entry[0], default=entry[1])) for name, entry in table.items())


CHECK_LIMITS = limits_of(CHECK_SETTINGS)
READY_LIMITS = limits_of(READY_SETTINGS)
MEMORY_LIMITS = limits_of(MEMORY_SETTINGS)
DECIDE_DEFAULTS = defaults_of(GUARD_RAILS)
DECIDE_LIMITS = limits_of(GUARD_RAILS)
GATE_LIMITS = limits_of(GATE_SETTINGS)

# The health_results module's results_timeout: the gate's (either collects a background check's file).
RESULTS_TIMEOUT_LIMITS = GATE_SETTINGS['results_timeout'][2]
# Every number option of the health module.
HEALTH_LIMITS = dict(limits_of(CHECK_SETTINGS), **dict(limits_of(HEALTH_SETTINGS), **limits_of(MEMORY_OF_CHECKS)))

# Every number the watchdog role's preflight checks, by its setting's name (the role's variable without its
# vllm_watchdog_ prefix).
WATCHDOG_LIMITS = {}
for _table in (CHECK_SETTINGS, MEMORY_OF_CHECKS, READY_SETTINGS, MEMORY_SETTINGS, GUARD_RAILS, GATE_SETTINGS,
               ROLE_SETTINGS):
    WATCHDOG_LIMITS.update(limits_of(_table))
del _table

# Every number the rollout role's preflight checks, by its setting's name (the role's variable without its
# vllm_rollout_ prefix): the check's, its freeze limit and wait, the restart's, the lock's wait and its own.
ROLLOUT_LIMITS = dict(limits_of(CHECK_SETTINGS), freeze_limit=MEMORY_OF_CHECKS['freeze_limit'][2],
                      freeze_wait=MEMORY_OF_CHECKS['freeze_wait'][2], lock_timeout=GATE_SETTINGS['lock_timeout'][2],
                      **dict(limits_of(READY_SETTINGS), **limits_of(ROLLOUT_SETTINGS)))


# How many times a busy server's check waits ``interval`` before it judges (the longest path of _verdict.busy_path).
WAITS = 2


def check_deadline(interval, probe_timeout, metrics_timeout, freeze_wait=0):
    """Seconds one check may take at most, from its settings: two waits, two probes and eight reads
    of the cheap endpoints (the longest path: /version, three /metrics reads, /v1/models, two
    /health reads and one more /metrics read after a restart), and the time it may keep watching a
    freeze that has not lasted ``freeze_limit`` yet (``freeze_wait``). The role's async budget adds its
    start-up margin to this same number."""
    return WAITS * interval + 2 * probe_timeout + 8 * metrics_timeout + freeze_wait
