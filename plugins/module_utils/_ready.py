# -*- coding: utf-8 -*-
# Copyright (c) modelops.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

"""Wait until a restarted vLLM server is ready: a new process, ``/health`` 200, the model in ``/v1/models``.

Private to this collection. The reads go through the check's HTTP client (deadlines, size caps,
the key only to ``/v1/``, environment proxies as the health check treats them); the sleep and the
clock are injected.

"A new process": a restart command may return before the old process is gone (a ``command``
method that only asks for a restart, a unit that stops slowly). The old process can still answer
``/health`` for a moment, so when the start time of the process before the restart is known
(``process_start_time_seconds``, see ``start_time``), ready also means that it changed.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.modelops.vllm.plugins.module_utils._prometheus import ExpositionError
from ansible_collections.modelops.vllm.plugins.module_utils._readings import ReadingError, read_text
from ansible_collections.modelops.vllm.plugins.module_utils._verdict import model_ids

# The wait until ready: (smallest, largest, whether the smallest itself is allowed), as in _verdict.CHECK_LIMITS.
READY_LIMITS = {
    'ready_timeout': (0, 86400, False),
    'ready_delay': (0, 3600, False),
}


def start_time(client):
    """The server process's start time from /metrics, or None when it cannot be known."""
    fetched = client.metrics()
    if fetched.error or fetched.status != 200:
        return None
    try:
        return read_text(fetched.text).start_time
    except (ExpositionError, ReadingError):
        return None


def wait_ready(client, timeout, delay, model=None, sleep=None, clock=None, old_start=None):
    """Poll until ready or ``timeout`` seconds: returns {'ok', 'seconds', 'health', 'models', 'polls', 'why',
    'start_time'}."""
    started = clock()
    polls = 0
    health = models = new_start = None
    while True:
        polls += 1
        fetched = client.health()
        health = fetched.describe()
        if fetched.status != 200:
            why = '/health answered %s' % health
        else:
            new_start = start_time(client) if old_start is not None else None
            if new_start is not None and new_start == old_start:
                why = 'the process that answers started at %s, before the restart: it was not restarted (yet)' % old_start
            else:
                listed = client.models()
                models = model_ids(listed) or []
                if models and (not model or model in models):
                    return {'ok': True, 'seconds': round(clock() - started, 3), 'health': health, 'models': models,
                            'polls': polls, 'why': None, 'start_time': new_start}
                wanted = 'the model %s' % model if model else 'any model'
                why = '/v1/models answered %s without %s' % (listed.describe(), wanted)
        if clock() - started + delay > timeout:
            return {'ok': False, 'seconds': round(clock() - started, 3), 'health': health, 'models': models,
                    'polls': polls, 'why': why, 'start_time': new_start}
        sleep(delay)
