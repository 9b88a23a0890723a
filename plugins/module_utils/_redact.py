# -*- coding: utf-8 -*-
# Copyright (c) modelops.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

"""Secrets out of everything a check returns.

Private to this collection. Ansible's ``no_log`` masks an option's exact value
in what the module returns; an exception message can carry the same secret
escaped (``repr`` turns a newline into ``\\n``), JSON-encoded or URL-quoted, and
those forms pass ``no_log`` untouched. ``forms`` lists every spelling of each
secret, longest first, and ``redact`` replaces them all, in every string of a
result, keys included.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json

from urllib.parse import quote, quote_plus

from ansible_collections.modelops.vllm.plugins.module_utils._urls import url_secrets

MASK = '********'


def forms(secrets):
    """Every spelling of each non-empty secret that an error message or a result could carry."""
    out = set()
    for secret in secrets:
        if not isinstance(secret, str) or not secret:
            continue
        out.update((secret, repr(secret)[1:-1], json.dumps(secret)[1:-1], json.dumps(secret, ensure_ascii=False)[1:-1],
                    quote(secret, safe=''), quote_plus(secret), secret.strip()))
    out.discard('')
    return sorted(out, key=len, reverse=True)


def secrets_of(spec):
    """Every spelling of the secrets of one server's options: its api_key, a password in its url."""
    return forms([spec.get('api_key')] + url_secrets(spec.get('url')))


def redact(value, spellings):
    """``value`` (str, list, tuple, dict, or anything else) with every spelling replaced by MASK."""
    if not spellings:
        return value
    if isinstance(value, str):
        for spelling in spellings:
            if spelling in value:
                value = value.replace(spelling, MASK)
        return value
    if isinstance(value, dict):
        return dict((redact(k, spellings), redact(v, spellings)) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return type(value)(redact(v, spellings) for v in value)
    return value
