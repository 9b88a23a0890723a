# -*- coding: utf-8 -*-
# Copyright (c) modelops.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

"""The result of a background (``async``, ``poll: 0``) run of ``modelops.vllm.health``, read once it is done.

Private to this collection. Ansible's async wrapper writes ``{"started": true, "finished": false}``
to the job's results file, then replaces it with the module's own result. Reading that file from a
module on the same host (``modelops.vllm.health`` with ``results_file``, ``modelops.vllm.watchdog_gate``)
collects the verdicts in one module run, where ``async_status`` would poll (and print a
``FAILED - RETRYING`` line per poll) and need another run to remove the file.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import time

from ansible_collections.modelops.vllm.plugins.module_utils import _statedir as statedir

RESULTS_MAX = 64 * 1024 * 1024


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
        except ValueError:
            data = None  # being replaced right now: read again
        if isinstance(data, dict) and not (data.get('started') and data.get('finished') in (False, 0)):
            try:
                statedir.remove(path)
            except statedir.StateError:
                pass
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
