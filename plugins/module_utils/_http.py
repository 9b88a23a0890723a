# -*- coding: utf-8 -*-
# Copyright (c) modelops.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

"""HTTP reads of one vLLM server, through ``requests``.

Private to this collection. Every request has a whole-answer deadline (a
server that trickles bytes or never finishes is cut off), and none outlives the
check's overall deadline; a body size cap (``max_bytes`` for ``/metrics``, at
most ``JSON_MAX_BYTES`` for the JSON endpoints); redirects followed only on the
same server; the API key sent only to the ``/v1/`` endpoints that need it.

Environment proxies (``HTTP_PROXY``, ``HTTPS_PROXY``, ``ALL_PROXY``, ``.netrc``)
are ignored unless ``use_proxy`` is set, and a loopback URL never goes through
a proxy: a health check of a server on this host must not depend on, or hand
its key to, whatever proxy the host's environment names.

Errors come back as ``Fetched`` values, never as exceptions, except
configuration errors (``CheckError``): a bad URL, a TLS failure, an API key
that cannot be sent in an HTTP header, any request that could not be sent.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import importlib.util
import json
import threading
import time

from urllib.parse import urljoin

from ansible_collections.modelops.vllm.plugins.module_utils._urls import (
    DEFAULT_MAX_BYTES,
    display_url,
    is_loopback,
    origin,
    url_secrets,
    validate_api_key,
    validate_url,
)
from ansible_collections.modelops.vllm.plugins.module_utils._types import CheckError, Fetched
from ansible_collections.modelops.vllm.plugins.module_utils._vllm import PROFILE

# requests is imported where a request is made, not with this module: a check started in the
# background (the task returns at once) and everything that only shows a URL do not pay for it.
HAS_REQUESTS = importlib.util.find_spec('requests') is not None
REQUESTS_IMPORT_ERROR = None if HAS_REQUESTS else 'ImportError: No module named requests'

# /version, /health, /v1/models and the probe's answer: a real one is a few KB.
JSON_MAX_BYTES = 1024 * 1024
MAX_REDIRECTS = 3
_REDIRECTS = (301, 302, 303, 307, 308)
# Exceptions raised while a request is prepared, before anything goes on the wire.
_UNSENT = (UnicodeError, ValueError, TypeError, LookupError)


def connection_args():
    """The options of a module that reaches a vLLM server through this client, for its argument spec (a fresh copy
    each call); doc fragment ``modelops.vllm.connection`` documents them (community.docker's ``DOCKER_COMMON_ARGS``)."""
    return dict(
        api_key=dict(type='str', no_log=True),
        validate_certs=dict(type='bool', default=True),
        ca_path=dict(type='path'),
        use_proxy=dict(type='bool', default=False),
    )


def _timed_out(timeout, answered):
    """What a request that ran out of time is, whichever timer ended it (the worker's join or the socket's own
    timeout: they race, and on a loaded host either may win): ``timeout`` before a status line came back,
    ``incomplete`` once one did (its status ``answered``)."""
    if answered is None:
        return 'timeout', 'no answer in %s s' % round(timeout, 3)
    return 'incomplete', 'the answer started but did not complete in %s s' % round(timeout, 3)


def _classify(exc, timeout, answered=None):
    """Map a requests exception to a Fetched error kind and message (``answered``: the status, once it came back)."""
    from requests import exceptions as rexc  # pylint: disable=import-outside-toplevel
    text = str(exc)
    if isinstance(exc, rexc.SSLError):
        return 'tls', text
    if isinstance(exc, (rexc.ConnectTimeout, rexc.ReadTimeout)):
        return _timed_out(timeout, answered)
    if isinstance(exc, (rexc.InvalidURL, rexc.MissingSchema, rexc.InvalidSchema)):
        raise CheckError('invalid url (%s)' % type(exc).__name__)
    if isinstance(exc, rexc.ConnectionError):
        lowered = text.lower()
        if 'read timed out' in lowered:
            return _timed_out(timeout, answered)
        if 'name or service not known' in lowered or 'nodename nor servname' in lowered \
                or 'failed to resolve' in lowered or 'name resolution' in lowered:
            return 'refused', 'the host name does not resolve'
        if 'newconnectionerror' in lowered or 'connection refused' in lowered or 'no route to host' in lowered \
                or 'network is unreachable' in lowered:
            return 'refused', 'connection refused'
        return 'dropped', text
    if isinstance(exc, (rexc.ChunkedEncodingError, rexc.ContentDecodingError)):
        return 'dropped', text
    return 'dropped', text


class Client(object):
    """The reads and the probe of one server (the ``server`` of Judge), at the endpoints of its engine
    ``profile`` (vLLM's by default)."""

    def __init__(self, url, api_key=None, validate_certs=True, ca_path=None, metrics_timeout=10.0,
                 probe_timeout=30.0, max_bytes=DEFAULT_MAX_BYTES, probe_api='completions',
                 clock=time.monotonic, ends=None, use_proxy=False, profile=PROFILE):
        self.profile = profile
        validate_url(url)
        validate_api_key(api_key)
        if api_key and url_secrets(url):
            raise CheckError('url has credentials and api_key is set: both would go in the Authorization header; '
                             'use one of them')
        self.base = url.rstrip('/') + '/'
        self.api_key = api_key
        self.verify = (ca_path or True) if validate_certs else False
        self.metrics_timeout = float(metrics_timeout)
        self.probe_timeout = float(probe_timeout)
        self.max_bytes = int(max_bytes)
        self.probe_api = probe_api
        self.clock = clock
        self.ends = ends  # the check's overall deadline, on ``clock``; None for none
        # Environment proxies (and .netrc) only when asked for, and never for this machine.
        self.trust_env = bool(use_proxy) and not is_loopback(url)

    def _session(self):
        """A session of its own for each request, closed after it: one request per connection. vLLM's API server
        closes a connection idle for VLLM_HTTP_TIMEOUT_KEEP_ALIVE, 5 s (uvicorn's timeout_keep_alive), and the
        check's reads are ``interval`` apart, 5 s by default: a kept-alive connection would be reused just as the
        server closes it (a reset, on a loaded host), and the read fail. ``Connection: close`` tells the server."""
        import requests  # pylint: disable=import-outside-toplevel
        session = requests.Session()
        session.trust_env = self.trust_env
        session.headers['User-Agent'] = 'modelops.vllm.health'
        session.headers['Connection'] = 'close'
        return session

    # -- the endpoints -------------------------------------------------------

    def metrics(self):
        # A Prometheus client library answers OpenMetrics if asked: ask for text.
        return self.request('GET', self.profile.metrics_path, self.metrics_timeout, headers={'Accept': 'text/plain'},
                            text_only=True, max_bytes=self.max_bytes)

    def health(self):
        return self.request('GET', self.profile.health_path, self.metrics_timeout)

    def version(self):
        return self.request('GET', self.profile.version_path, self.metrics_timeout)

    def models(self):
        return self.request('GET', self.profile.models_path, self.metrics_timeout, auth=True)

    def is_paused(self):
        # The engine's pause API (vLLM's: _vllm.PAUSE_PATH): not under /v1/, so sent without the key.
        return self.request('GET', self.profile.pause_path, self.metrics_timeout)

    def probe(self, model):
        """One token, temperature 0: the smallest request that needs the engine."""
        if self.probe_api == 'chat':
            path = self.profile.probe_paths['chat']
            body = {'messages': [{'role': 'user', 'content': 'ping'}]}
        else:
            path = self.profile.probe_paths['completions']
            body = {'prompt': 'ping'}
        body.update({'max_tokens': 1, 'temperature': 0, 'stream': False})
        if model:
            body['model'] = model
        return self.request('POST', path, self.probe_timeout, auth=True, body=body)

    # -- the mechanics ---------------------------------------------------------

    def request(self, method, path, timeout, headers=None, auth=False, body=None, text_only=False,
                max_bytes=JSON_MAX_BYTES):
        """One request with a whole-answer deadline; never raises but CheckError."""
        started = self.clock()
        if self.ends is not None:
            left = self.ends - started
            if left <= 0:
                return Fetched(error='deadline', message='the check\'s overall deadline has passed', seconds=0.0)
            timeout = min(timeout, left)
        outcome = {}
        args = (outcome, method, path, timeout, headers, auth, body, text_only, min(max_bytes, self.max_bytes))
        worker = threading.Thread(target=self._worker, args=args)
        worker.daemon = True
        worker.start()
        # The worker's socket timeouts cut a silent server off; this cuts off one
        # that trickles bytes or never finishes. An abandoned worker dies with us.
        worker.join(timeout)
        seconds = self.clock() - started
        if worker.is_alive():
            # A status line and headers that came back mean the server (or something in front of it) answered.
            kind, message = _timed_out(timeout, outcome.get('answered'))
            return Fetched(error=kind, status=outcome.get('answered'), message=message, seconds=seconds)
        if 'config_error' in outcome:
            raise CheckError(outcome['config_error'])
        fetched = outcome.get('fetched') or Fetched(error='client', message='the request ended without an answer')
        fetched.seconds = seconds
        return fetched

    def _worker(self, outcome, method, path, timeout, headers, auth, body, text_only, max_bytes):
        try:
            outcome['fetched'] = self._do(method, path, timeout, headers, auth, body, text_only, max_bytes, outcome)
        except CheckError as exc:
            outcome['config_error'] = str(exc)
        except Exception as exc:  # pylint: disable=broad-except
            # Anything unexpected is still an answer we can report, never a traceback, and never
            # taken for a server that did not answer.
            outcome['fetched'] = Fetched(error='client', message='%s: %s' % (type(exc).__name__, exc))

    def _do(self, method, path, timeout, headers, auth, body, text_only, max_bytes, outcome):
        from requests import exceptions as rexc  # pylint: disable=import-outside-toplevel
        url = urljoin(self.base, path)
        send_headers = dict(headers or {})
        if auth and self.api_key:
            send_headers['Authorization'] = 'Bearer %s' % self.api_key
        data = None
        if body is not None:
            data = json.dumps(body)
            send_headers['Content-Type'] = 'application/json'
        for dummy in range(MAX_REDIRECTS + 1):
            with self._session() as session:  # each hop, a redirect's too, on a connection of its own
                try:
                    response = session.request(method, url, headers=send_headers, data=data, timeout=timeout,
                                               verify=self.verify, allow_redirects=False, stream=True)
                except (rexc.InvalidHeader, rexc.InvalidURL, rexc.MissingSchema, rexc.InvalidSchema) as exc:
                    raise CheckError('the request to /%s could not be sent (%s)' % (path, type(exc).__name__))
                except rexc.RequestException as exc:
                    kind, message = _classify(exc, timeout)
                    return Fetched(error=kind, message=message)
                except _UNSENT as exc:
                    # Raised while the request was prepared or its headers encoded: nothing was sent, so
                    # this says nothing about the server.
                    raise CheckError('the request to /%s could not be sent (%s)' % (path, type(exc).__name__))
                outcome['answered'] = response.status_code
                try:
                    if response.status_code in _REDIRECTS and response.headers.get('Location'):
                        try:
                            target = urljoin(url, response.headers['Location'])
                            other = origin(target) != origin(url)
                        except ValueError:
                            return Fetched(error='redirect', message='a redirect to a location that is not a URL')
                        if other:
                            return Fetched(error='redirect', message='redirected to another server (%s); point url at '
                                           'the %s server itself' % (display_url(target)[:200], self.profile.title))
                        url = target
                        continue
                    return self._read_body(response, text_only, max_bytes, timeout)
                finally:
                    response.close()
        return Fetched(error='redirect', message='more than %d redirects' % MAX_REDIRECTS)

    def _read_body(self, response, text_only, max_bytes, timeout):
        from requests import exceptions as rexc  # pylint: disable=import-outside-toplevel
        status = response.status_code
        ctype = response.headers.get('Content-Type', '')
        if text_only and status == 200 and 'html' in ctype.lower():
            return Fetched(status=status, error='invalid',
                           message='answered an HTML page (Content-Type %s), not Prometheus text' % ctype)
        declared = response.headers.get('Content-Length')
        if declared and declared.isdigit() and len(declared) < 20 and int(declared) > max_bytes:
            return Fetched(status=status, error='too_large',
                           message='the body is %s bytes, over the cap of %d' % (declared, max_bytes))
        body = bytearray()
        try:
            # Decompressed as it arrives (gzip): the cap counts what would be kept, not the wire.
            for chunk in response.iter_content(65536):
                if len(body) + len(chunk) > max_bytes:
                    return Fetched(status=status, error='too_large',
                                   message='the body is over the cap of %d bytes' % max_bytes)
                body += chunk
        except rexc.RequestException as exc:
            kind, message = _classify(exc, timeout, answered=status)
            return Fetched(status=status, error=kind, message=message)
        text = body.decode('utf-8', 'replace')
        del body
        return Fetched(status=status, text=text)
