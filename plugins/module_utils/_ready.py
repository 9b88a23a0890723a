# -*- coding: utf-8 -*-
# Copyright (c) modelops.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

"""Wait until a restarted vLLM server is ready: a new process, ``/health`` 200, the model in ``/v1/models``.

Private to this collection. The reads go through the check's HTTP client (deadlines, size caps,
the key only to ``/v1/``, environment proxies as the health check treats them); the sleep and the
clock are injected.

"A new process": a restart command may return without restarting anything (a ``command`` method
that only asks for a restart, a unit that stops slowly, a script that does nothing), and the old
process goes on answering ``/health``. So when a process answered ``/metrics`` before the restart
(``before``, a reading of it), ready also means that the process that answers now is another
one, by every signal the check itself uses to tell two processes apart
(``_readings.same_process``): ``process_start_time_seconds`` changed, a ``*_created`` value
changed, or a counter went down (counters start from zero in a new process). vLLM with
``--api-server-count`` above 1 reports neither a start time nor ``*_created``, so there only the
counters can tell; when nothing can, the restart is not confirmed and the wait fails. When nothing
answered before the restart (a server that was down), any process that answers is a new one.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import math

from ansible_collections.modelops.vllm.plugins.module_utils._prometheus import ExpositionError
from ansible_collections.modelops.vllm.plugins.module_utils._readings import (
    MAX_ENGINES,
    EngineReading,
    Reading,
    ReadingError,
    read_text,
    same_process,
)
from ansible_collections.modelops.vllm.plugins.module_utils._types import model_ids


def read_process(client):
    """What the server's /metrics say now, as a Reading (of the client's engine profile, when it has one), or
    None when they cannot be read."""
    fetched = client.metrics()
    if fetched.error or fetched.status != 200:
        return None
    profile = getattr(client, 'profile', None)
    try:
        return read_text(fetched.text) if profile is None else read_text(fetched.text, profile=profile)
    except (ExpositionError, ReadingError):
        return None


def _number(value):
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def reading_from_summary(summary, start=None):
    """A Reading made of one read of a check's evidence (an item of ``evidence.reads``, as
    ``Reading.summary`` writes it): its start time and each engine's counters, the signals that tell
    a new process from this one. ``start`` (a start time known otherwise) is used when the read has
    none. None when there is nothing to compare."""
    summary = summary if isinstance(summary, dict) else {}
    given = summary.get('engines') if isinstance(summary.get('engines'), dict) else {}
    engines = {}
    for key, numbers in list(given.items())[:MAX_ENGINES]:
        engine = EngineReading()
        counters = numbers.get('counters') if isinstance(numbers, dict) else None
        for name, value in (counters.items() if isinstance(counters, dict) else []):
            value = _number(value)
            if value is not None and value >= 0:
                engine.counters[str(name)] = value
        engines[str(key)] = engine
    found = _number(summary.get('process_start_time'))
    start = found if found is not None and found > 0 else _number(start)
    start = start if start is not None and start > 0 else None
    if start is None and not any(engine.counters for engine in engines.values()):
        return None
    return Reading(engines, start, {}, bool(engines))


def new_process(before, after):
    """(True, how) when ``after`` is another process than ``before``; (False, why) when it is the same one or
    nothing can tell."""
    same, how = same_process(before, after)
    if same is False:
        return True, how
    if same:
        return False, 'the process that answers is the one from before the restart (%s): it was not restarted (yet)' \
            % how
    return False, ('nothing shows that another process answers (%s; %s, and only counters that went down could '
                   'show it): the restart is not confirmed' % (how, after.profile.no_start_time_hint))


def still_answers(client, before):
    """After a stop that returned: how the process from before the restart is seen still answering ``/metrics``, or
    None (it is gone, another one answers, or nothing can tell). A stop that returned while that process still
    answers stopped another service than the server at the URL."""
    if client is None or before is None:
        return None
    after = read_process(client)
    if after is None:
        return None
    same, how = same_process(before, after)
    return how if same else None


def wait_ready(client, timeout, delay, model=None, sleep=None, clock=None, before=None):
    """Poll until ready or ``timeout`` seconds: returns {'ok', 'seconds', 'health', 'models', 'polls', 'why',
    'start_time', 'new_process'}. With ``before`` (a Reading of the process before the restart), ready also
    means that another process answers (``new_process`` says how that is known)."""
    started = clock()
    polls = 0
    health = models = new_start = proof = None
    while True:
        polls += 1
        fetched = client.health()
        health = fetched.describe()
        if fetched.status != 200:
            why = '/health answered %s' % health
        else:
            proven = True
            if before is not None:
                after = read_process(client)
                if after is None:
                    proven, why = False, ('/metrics cannot be read, so nothing shows that another process answers '
                                          'than the one before the restart')
                else:
                    new_start = after.start_time
                    proven, why = new_process(before, after)
                    proof = why if proven else None
            if proven:
                listed = client.models()
                models = model_ids(listed) or []
                if models and (not model or model in models):
                    return {'ok': True, 'seconds': round(clock() - started, 3), 'health': health, 'models': models,
                            'polls': polls, 'why': None, 'start_time': new_start, 'new_process': proof}
                wanted = 'the model %s' % model if model else 'any model'
                why = '/v1/models answered %s without %s' % (listed.describe(), wanted)
        if clock() - started + delay > timeout:
            return {'ok': False, 'seconds': round(clock() - started, 3), 'health': health, 'models': models,
                    'polls': polls, 'why': why, 'start_time': new_start, 'new_process': proof}
        sleep(delay)
