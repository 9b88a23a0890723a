# -*- coding: utf-8 -*-
# Copyright (c) modelops.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

"""Wait until a restarted vLLM server is ready: ``/health`` answers 200 and the model is in ``/v1/models``.

Private to this collection. The reads go through the check's HTTP client (deadlines, size caps,
the key only to ``/v1/``, environment proxies as the health check treats them); the sleep and the
clock are injected.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.modelops.vllm.plugins.module_utils._verdict import model_ids


def wait_ready(client, timeout, delay, model=None, sleep=None, clock=None):
    """Poll until ready or ``timeout`` seconds: returns {'ok', 'seconds', 'health', 'models', 'polls', 'why'}."""
    started = clock()
    polls = 0
    health = models = None
    while True:
        polls += 1
        fetched = client.health()
        health = fetched.describe()
        if fetched.status == 200:
            listed = client.models()
            ids = model_ids(listed) or []
            models = ids
            if ids and (not model or model in ids):
                return {'ok': True, 'seconds': round(clock() - started, 3), 'health': health, 'models': ids,
                        'polls': polls, 'why': None}
            why = ('/v1/models answered %s without %s' % (listed.describe(), 'the model %s' % model if model
                                                           else 'any model'))
        else:
            why = '/health answered %s' % health
        if clock() - started + delay > timeout:
            return {'ok': False, 'seconds': round(clock() - started, 3), 'health': health, 'models': models,
                    'polls': polls, 'why': why}
        sleep(delay)
