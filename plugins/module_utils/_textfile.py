# -*- coding: utf-8 -*-
# Copyright (c) modelops.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

"""The watchdog's verdicts as a file for node_exporter's textfile collector.

Private to this collection. ``text`` is pure: the results of one gate run (each with its ``name``,
``state``, ``action`` and ``history``) and the time in, the Prometheus text format out. ``write``
replaces the file atomically (``_statedir.write_text``, mode 0644) and returns why it could not, or
None: a metric that never exists cannot alert on its absence, so the caller says it (a warning).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import errno
import os

from ansible_collections.modelops.vllm.plugins.module_utils import _statedir as statedir
from ansible_collections.modelops.vllm.plugins.module_utils._types import FAIL, NONE, REBOOT, RESTART, STATES

# Every verdict a check can give (the one list, _types), and the one a controller-side check adds.
TEXTFILE_STATES = list(STATES) + ['unreachable']
TEXTFILE_ACTIONS = (NONE, RESTART, REBOOT, FAIL)


def _label(value):
    return str(value).replace('\\', '\\\\').replace('"', '\\"').replace('\n', '\\n')


def _int(value):
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


def text(results, now):
    """The watchdog's verdicts in the Prometheus text format, for node_exporter's textfile collector."""
    lines = []

    def family(name, kind, text):
        lines.append('# HELP %s %s' % (name, text))
        lines.append('# TYPE %s %s' % (name, kind))

    family('vllm_watchdog_verdict', 'gauge', 'The verdict of the vLLM watchdog\'s last check: 1 for the state it found.')
    for r in results:
        for state in TEXTFILE_STATES:
            lines.append('vllm_watchdog_verdict{vllm_instance="%s",state="%s"} %d'
                         % (_label(r['name']), state, 1 if r.get('state') == state else 0))
    family('vllm_watchdog_action', 'gauge', 'What the vLLM watchdog decided on its last run: 1 for the action.')
    for r in results:
        for action in TEXTFILE_ACTIONS:
            lines.append('vllm_watchdog_action{vllm_instance="%s",action="%s"} %d'
                         % (_label(r['name']), action, 1 if r.get('action') == action else 0))
    family('vllm_watchdog_needs_human', 'gauge', 'Whether the vLLM watchdog stopped and asks a human (1).')
    for r in results:
        lines.append('vllm_watchdog_needs_human{vllm_instance="%s"} %d' % (_label(r['name']), 1 if r.get('action') == FAIL else 0))
    family('vllm_watchdog_restarts_total', 'counter', 'Restarts of vLLM the vLLM watchdog decided, ever.')
    for r in results:
        total = (r.get('history') or {}).get('restarts_total', 0)
        lines.append('vllm_watchdog_restarts_total{vllm_instance="%s"} %d' % (_label(r['name']), _int(total)))
    family('vllm_watchdog_reboots_total', 'counter', 'Host reboots the vLLM watchdog decided for this instance, ever.')
    for r in results:
        total = (r.get('history') or {}).get('reboots_total', 0)
        lines.append('vllm_watchdog_reboots_total{vllm_instance="%s"} %d' % (_label(r['name']), _int(total)))
    family('vllm_watchdog_last_run_timestamp_seconds', 'gauge', 'When the vLLM watchdog last ran, in seconds since the epoch.')
    for r in results:
        lines.append('vllm_watchdog_last_run_timestamp_seconds{vllm_instance="%s"} %.3f' % (_label(r['name']), now))
    return '\n'.join(lines) + '\n'


def write(path, results, now):
    """Replace ``path`` atomically with ``text(results, now)`` (mode 0644): None, or why it could not be written."""
    try:
        statedir.write_text(path, text(results, now), mode=0o644)
    except (statedir.StateError, OSError) as exc:
        return ('the textfile %s could not be written (%s): Prometheus gets no vllm_watchdog_* metric from this host, '
                'so no alert can fire on it' % (path, _why(path, exc)))
    return None


def _why(path, exc):
    """Why a file could not be written, the same words on every host (never the name of a temporary file)."""
    directory = os.path.dirname(path) or '.'
    if isinstance(exc, OSError) and exc.errno == errno.ENOENT and not os.path.isdir(directory):
        return 'its directory %s does not exist' % directory
    if isinstance(exc, OSError) and exc.strerror:
        return '%s in %s' % (exc.strerror, directory)
    return str(exc)
