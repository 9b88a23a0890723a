# -*- coding: utf-8 -*-
# Copyright (c) modelops.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

"""HTTP reads of one vLLM server, through ``requests``.

Private to this collection. Every request has a whole-answer deadline (a
server that trickles bytes or never finishes is cut off), a body size cap,
redirects followed only on the same server, and the API key sent only to the
``/v1/`` endpoints that need it. Errors come back as ``Fetched`` values, never
as exceptions, except configuration errors (``CheckError``).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import threading
import time
import traceback

from urllib.parse import urljoin, urlsplit

from ansible_collections.modelops.vllm.plugins.module_utils._verdict import CheckError, Fetched

try:
    import requests
    from requests import exceptions as rexc
    HAS_REQUESTS = True
    REQUESTS_IMPORT_ERROR = None
except ImportError:  # pragma: no cover - exercised through the module's missing_required_lib
    HAS_REQUESTS = False
    REQUESTS_IMPORT_ERROR = traceback.format_exc()

DEFAULT_MAX_BYTES = 16 * 1024 * 1024
MAX_REDIRECTS = 3
_REDIRECTS = (301, 302, 303, 307, 308)


def _origin(url):
    parts = urlsplit(url)
    port = parts.port or {'http': 80, 'https': 443}.get(parts.scheme)
    return parts.scheme, (parts.hostname or '').lower(), port


def validate_url(url):
    """Raise CheckError unless url is an absolute http(s) URL."""
    parts = urlsplit(url or '')
    if parts.scheme not in ('http', 'https') or not parts.hostname:
        raise CheckError('url must be an absolute http:// or https:// URL of the server, got %r' % (url,))
    if parts.query or parts.fragment:
        raise CheckError('url must be the base URL of the server, without a query or fragment: %r' % (url,))


def _classify(exc):
    """Map a requests exception to a Fetched error kind and message."""
    text = str(exc)
    if isinstance(exc, rexc.SSLError):
        return 'tls', text
    if isinstance(exc, (rexc.ConnectTimeout, rexc.ReadTimeout)):
        return 'timeout', text
    if isinstance(exc, (rexc.InvalidURL, rexc.MissingSchema, rexc.InvalidSchema)):
        raise CheckError('invalid url: %s' % text)
    if isinstance(exc, rexc.ConnectionError):
        lowered = text.lower()
        if 'read timed out' in lowered:
            return 'timeout', text
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
    """The reads and the probe of one vLLM server (the ``server`` of Judge)."""

    def __init__(self, url, api_key=None, validate_certs=True, ca_path=None, metrics_timeout=10.0,
                 probe_timeout=30.0, max_bytes=DEFAULT_MAX_BYTES, probe_api='completions',
                 clock=time.monotonic):
        validate_url(url)
        self.base = url.rstrip('/') + '/'
        self.api_key = api_key
        self.verify = (ca_path or True) if validate_certs else False
        self.metrics_timeout = float(metrics_timeout)
        self.probe_timeout = float(probe_timeout)
        self.max_bytes = int(max_bytes)
        self.probe_api = probe_api
        self.clock = clock
        self.session = requests.Session()
        self.session.headers['User-Agent'] = 'modelops.vllm.health'

    # -- the endpoints -------------------------------------------------------

    def metrics(self):
        # A Prometheus client library answers OpenMetrics if asked: ask for text.
        return self.request('GET', 'metrics', self.metrics_timeout, headers={'Accept': 'text/plain'},
                            text_only=True)

    def health(self):
        return self.request('GET', 'health', self.metrics_timeout)

    def version(self):
        return self.request('GET', 'version', self.metrics_timeout)

    def models(self):
        return self.request('GET', 'v1/models', self.metrics_timeout, auth=True)

    def probe(self, model):
        """One token, temperature 0: the smallest request that needs the engine."""
        if self.probe_api == 'chat':
            path = 'v1/chat/completions'
            body = {'messages': [{'role': 'user', 'content': 'ping'}]}
        else:
            path = 'v1/completions'
            body = {'prompt': 'ping'}
        body.update({'max_tokens': 1, 'temperature': 0, 'stream': False})
        if model:
            body['model'] = model
        return self.request('POST', path, self.probe_timeout, auth=True, body=body)

    # -- the mechanics ---------------------------------------------------------

    def request(self, method, path, timeout, headers=None, auth=False, body=None, text_only=False):
        """One request with a whole-answer deadline; never raises but CheckError."""
        started = self.clock()
        outcome = {}
        args = (outcome, method, path, timeout, headers, auth, body, text_only)
        worker = threading.Thread(target=self._worker, args=args)
        worker.daemon = True
        worker.start()
        # The worker's socket timeouts cut a silent server off; this cuts off one
        # that trickles bytes or never finishes. An abandoned worker dies with us.
        worker.join(timeout)
        seconds = self.clock() - started
        if worker.is_alive():
            return Fetched(error='timeout', message='no complete answer in %s s' % timeout, seconds=seconds)
        if 'config_error' in outcome:
            raise CheckError(outcome['config_error'])
        fetched = outcome.get('fetched') or Fetched(error='dropped', message='no answer')
        fetched.seconds = seconds
        return fetched

    def _worker(self, outcome, method, path, timeout, headers, auth, body, text_only):
        try:
            outcome['fetched'] = self._do(method, path, timeout, headers, auth, body, text_only)
        except CheckError as exc:
            outcome['config_error'] = str(exc)
        except Exception as exc:  # pylint: disable=broad-except
            # Anything unexpected is still an answer we can report, never a traceback.
            outcome['fetched'] = Fetched(error='dropped', message='%s: %s' % (type(exc).__name__, exc))

    def _do(self, method, path, timeout, headers, auth, body, text_only):
        url = urljoin(self.base, path)
        send_headers = dict(headers or {})
        if auth and self.api_key:
            send_headers['Authorization'] = 'Bearer %s' % self.api_key
        data = None
        if body is not None:
            data = json.dumps(body)
            send_headers['Content-Type'] = 'application/json'
        for dummy in range(MAX_REDIRECTS + 1):
            try:
                response = self.session.request(method, url, headers=send_headers, data=data, timeout=timeout,
                                                verify=self.verify, allow_redirects=False, stream=True)
            except rexc.RequestException as exc:
                kind, message = _classify(exc)
                return Fetched(error=kind, message=message)
            try:
                if response.status_code in _REDIRECTS and response.headers.get('Location'):
                    target = urljoin(url, response.headers['Location'])
                    if _origin(target) != _origin(url):
                        return Fetched(error='redirect', message='redirected to another server (%s); point url at '
                                                                 'the vLLM server itself' % target)
                    url = target
                    continue
                return self._read_body(response, text_only)
            finally:
                response.close()
        return Fetched(error='redirect', message='more than %d redirects' % MAX_REDIRECTS)

    def _read_body(self, response, text_only):
        status = response.status_code
        ctype = response.headers.get('Content-Type', '')
        if text_only and status == 200 and 'html' in ctype.lower():
            return Fetched(status=status, error='invalid',
                           message='answered an HTML page (Content-Type %s), not Prometheus text' % ctype)
        declared = response.headers.get('Content-Length')
        if declared and declared.isdigit() and int(declared) > self.max_bytes:
            return Fetched(status=status, error='too_large',
                           message='the body is %s bytes, over the cap of %d' % (declared, self.max_bytes))
        chunks = []
        size = 0
        try:
            for chunk in response.iter_content(65536):
                size += len(chunk)
                if size > self.max_bytes:
                    return Fetched(status=status, error='too_large',
                                   message='the body is over the cap of %d bytes' % self.max_bytes)
                chunks.append(chunk)
        except rexc.RequestException as exc:
            kind, message = _classify(exc)
            return Fetched(status=status, error=kind, message=message)
        raw = b''.join(chunks)
        return Fetched(status=status, text=raw.decode('utf-8', 'replace'))
