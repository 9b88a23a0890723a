# -*- coding: utf-8 -*-
# Copyright (c) modelops.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

"""Check one server, or many at once: every server in its own thread, so the
waits between reads are paid once for all of them, not once per server.

Private to this collection.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import threading
import time

from ansible_collections.modelops.vllm.plugins.module_utils._http import Client
from ansible_collections.modelops.vllm.plugins.module_utils._verdict import CheckError, Judge, check_proxy

# The options that may differ per server; the others are shared.
PER_SERVER = ('name', 'url', 'kind', 'api_key', 'model', 'probe_api')


def check_one(spec, sleep=time.sleep, clock=time.time, client_class=Client):
    """Check one server. ``spec`` has the module's options. Returns the result
    dict; a configuration error (TLS, bad URL) is a result with ``error`` set."""
    checked_at = time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())
    try:
        client = client_class(spec['url'], api_key=spec.get('api_key'), validate_certs=spec['validate_certs'],
                              ca_path=spec.get('ca_path'), metrics_timeout=spec['metrics_timeout'],
                              probe_timeout=spec['probe_timeout'], max_bytes=spec['metrics_max_bytes'],
                              probe_api=spec.get('probe_api') or 'completions')
        if spec.get('kind') == 'proxy':
            result = check_proxy(client)
        else:
            result = Judge(client, interval=spec['interval'], model=spec.get('model'), sleep=sleep, clock=clock,
                           probe_timeout=spec['probe_timeout'], metrics_timeout=spec['metrics_timeout']).run()
        result['error'] = None
    except CheckError as exc:
        result = {'state': 'unknown', 'reason': 'the check cannot run as configured: %s' % exc, 'error': str(exc)}
    result.update(name=spec.get('name') or spec['url'], url=spec['url'], kind=spec.get('kind') or 'backend',
                  checked_at=checked_at)
    return result


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
                # One server's surprise must not lose the verdicts of the others.
                results[index] = {'state': 'unknown', 'reason': 'the check failed: %s: %s' % (type(exc).__name__, exc),
                                  'error': str(exc), 'name': spec.get('name') or spec['url'], 'url': spec['url'],
                                  'kind': spec.get('kind') or 'backend'}

    threads = [threading.Thread(target=work) for dummy in range(max(1, min(workers, len(specs))))]
    for thread in threads:
        thread.daemon = True
        thread.start()
    for thread in threads:
        thread.join()
    return results
