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

from ansible_collections.modelops.vllm.plugins.module_utils._types import CheckError

# The largest /metrics answer the check accepts by default (a real one is about 50 KB per engine).
DEFAULT_MAX_BYTES = 16 * 1024 * 1024


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


def validate_url(url):
    """Raise CheckError unless url is an absolute http(s) base URL (the message never shows a password)."""
    if not isinstance(url, str) or any(ord(char) < 33 or ord(char) == 127 for char in url):
        raise CheckError('url must be an absolute http:// or https:// URL without spaces or control characters, '
                         'got %r' % (display_url(url),))
    parts = _split(url)
    if parts.scheme not in ('http', 'https') or not parts.hostname:
        raise CheckError('url must be an absolute http:// or https:// URL of the server, got %r' % (display_url(url),))
    if parts.query or parts.fragment:
        raise CheckError('url must be the base URL of the server, without a query or fragment: %r'
                         % (display_url(url),))


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
