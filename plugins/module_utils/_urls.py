# -*- coding: utf-8 -*-
# Copyright (c) modelops.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

"""URLs and keys of a vLLM server: checked, shown without a password, told loopback or not.

Private to this collection. Standard library only, so that what only shows or checks a URL (the
gate, the filters, a check started in the background) does not import ``requests``.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import ipaddress

from urllib.parse import unquote, urlsplit, urlunsplit

from ansible_collections.modelops.vllm.plugins.module_utils._settings import HEALTH_SETTINGS
from ansible_collections.modelops.vllm.plugins.module_utils._types import CheckError

# The largest /metrics answer the check accepts by default (the catalogue's metrics_max_bytes).
DEFAULT_MAX_BYTES = HEALTH_SETTINGS['metrics_max_bytes'][1]


def origin(url):
    """(scheme, host, port) of a URL: a redirect is followed only within one origin."""
    parts = urlsplit(url)
    port = parts.port or {'http': 80, 'https': 443}.get(parts.scheme)
    return parts.scheme, (parts.hostname or '').lower(), port


def _split(url):
    """urlsplit, with what it raises (a bad IPv6 literal, a port out of range) as a CheckError."""
    try:
        parts = urlsplit(url)
        parts.port  # pylint: disable=pointless-statement  # raises on a port that is not a port
        return parts
    except ValueError as exc:
        raise CheckError('url is not a valid URL (%s)' % exc)


def display_url(url):
    """The URL as it may be shown: a password in it replaced by ********."""
    if not isinstance(url, str) or '@' not in url:
        return url
    try:
        parts = urlsplit(url)
    except ValueError:
        return '<a URL that does not parse>'
    if parts.password is None:
        return url
    host = parts.netloc.rsplit('@', 1)[1]
    return urlunsplit((parts.scheme, '%s:********@%s' % (parts.username or '', host), parts.path, parts.query,
                       parts.fragment))


def url_secrets(url):
    """The password in a URL, as written and decoded (for redaction)."""
    try:
        password = urlsplit(url).password if isinstance(url, str) else None
    except ValueError:
        return []
    return [password, unquote(password)] if password else []


# The server's own endpoints, which the collection adds to the base URL itself: a URL that ends in one of them is the
# mistake of giving an endpoint (an OpenAI client's base URL ends in /v1) instead of the server.
ENDPOINTS = ('v1', 'metrics', 'health', 'version', 'ping', 'is_paused', 'docs')


def _base(parts, path):
    return urlunsplit((parts.scheme, parts.netloc, path, '', ''))


def url_mistake(url):
    """What is wrong with ``url`` as the base URL of a server, in one sentence, or None.

    The base URL is the scheme, the host, the port and, behind a reverse proxy, a path prefix; the collection adds
    ``/metrics``, ``/health`` and ``/v1/models`` itself. The sentence names the mistake and the URL that was meant
    (never a password)."""
    shown = display_url(url)
    if not isinstance(url, str) or not url.strip():
        return 'url must be the server\'s URL, such as http://127.0.0.1:8000, got %r' % (shown,)
    if any(ord(char) < 33 or ord(char) == 127 for char in url):
        return 'url must be an absolute http:// or https:// URL without spaces or control characters, got %r' % (
            shown,)
    try:
        parts = _split(url)
    except CheckError as exc:
        return '%s, got %r' % (exc, shown)
    if '://' not in url:
        meant = display_url('http://' + url.lstrip('/'))
        return 'url must start with http:// or https://, got %r: did you mean %r?' % (meant[len('http://'):], meant)
    if parts.scheme not in ('http', 'https') or not parts.hostname:
        return 'url must be an absolute http:// or https:// URL of the server, got %r' % (shown,)
    if parts.query or parts.fragment:  # never shown: a query may carry a token
        return 'url must be the base URL of the server, without a query or fragment'
    segments = [s for s in parts.path.split('/') if s]
    for index, segment in enumerate(segments):
        if segment.lower() in ENDPOINTS and (segment.lower() == 'v1' or index == len(segments) - 1):
            meant = _base(parts, '/'.join([''] + segments[:index]))
            return ('url %r names the endpoint /%s, not the server: give the server\'s own URL, %r (the collection '
                    'adds /metrics, /health and /v1/models itself%s)'
                    % (shown, '/'.join(segments[index:]), display_url(meant),
                       '; /v1 ends the base URL of an OpenAI client, not of the server' if segment.lower() == 'v1'
                       else ''))
    return None


def validate_url(url):
    """Raise CheckError unless url is an absolute http(s) base URL (the message never shows a password)."""
    mistake = url_mistake(url)
    if mistake:
        raise CheckError(mistake)


def validate_api_key(api_key):
    """Raise CheckError unless the key can go in an HTTP header as sent (the message never shows it)."""
    if not api_key:
        return
    if api_key != api_key.strip():
        raise CheckError('api_key cannot be sent in an HTTP header: it begins or ends with whitespace (a trailing '
                         'newline from a file or a vault?)')
    for char in api_key:
        code = ord(char)
        if code < 32 or code == 127:
            raise CheckError('api_key cannot be sent in an HTTP header: it has a control character')
        if code > 255:
            raise CheckError('api_key cannot be sent in an HTTP header: it has a character outside Latin-1')


def is_loopback(url):
    """Whether the URL's host is this machine (localhost, 127.0.0.0/8, ::1)."""
    host = (_split(url).hostname or '').lower()
    if host == 'localhost' or host.endswith('.localhost'):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
