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

import threading
import time

from ansible_collections.modelops.vllm.plugins.module_utils._http import Client
from ansible_collections.modelops.vllm.plugins.module_utils._redact import redact, secrets_of
from ansible_collections.modelops.vllm.plugins.module_utils._urls import display_url
from ansible_collections.modelops.vllm.plugins.module_utils._verdict import (
    CheckError,
    Judge,
    check_deadline,
    check_proxy,
    clip,
)

# The options that may differ per server; the others are shared.
PER_SERVER = ('name', 'url', 'kind', 'api_key', 'model', 'probe_api')


def summary_line(result):
    """One line a person reads: name, verdict, reason."""
    return '%s: %s - %s' % (result.get('name'), result.get('state'), result.get('reason'))


def check_one(spec, sleep=time.sleep, clock=time.time, client_class=Client, monotonic=time.monotonic):
    """Check one server. ``spec`` has the module's options. Returns the result
    dict; a configuration error (TLS, bad URL, a request that cannot be sent)
    is a result with ``error`` set."""
    checked_at = time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())
    deadline = check_deadline(spec['interval'], spec['probe_timeout'], spec['metrics_timeout'])
    try:
        client = client_class(spec['url'], api_key=spec.get('api_key'), validate_certs=spec['validate_certs'],
                              ca_path=spec.get('ca_path'), metrics_timeout=spec['metrics_timeout'],
                              probe_timeout=spec['probe_timeout'], max_bytes=spec['metrics_max_bytes'],
                              probe_api=spec.get('probe_api') or 'completions', clock=monotonic,
                              ends=monotonic() + deadline, use_proxy=spec.get('use_proxy', False))
        if spec.get('kind') == 'proxy':
            result = check_proxy(client)
        else:
            result = Judge(client, interval=spec['interval'], model=spec.get('model'), sleep=sleep, clock=clock,
                           probe_timeout=spec['probe_timeout'], metrics_timeout=spec['metrics_timeout'],
                           monotonic=monotonic, deadline=deadline).run()
        result['error'] = None
    except CheckError as exc:
        result = {'state': 'unknown', 'reason': 'the check cannot run as configured: %s' % exc, 'error': str(exc)}
    except Exception as exc:  # pylint: disable=broad-except
        # A surprise of one check is that server's unknown, never a traceback and never the others' loss.
        result = {'state': 'unknown', 'error': None,
                  'reason': 'the check failed unexpectedly (%s: %s): not judged' % (type(exc).__name__, clip(exc))}
    result.update(name=spec.get('name') or display_url(spec['url']), url=display_url(spec['url']),
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
