# -*- coding: utf-8 -*-
# Copyright (c) modelops.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

"""Secrets out of everything the collection keeps or prints: the one redaction.

Private to this collection. Every result of a module, every line of the verdict history and every
evidence file (the verdict, the decision, the service's log tail, and whatever later evidence is
added to it) goes through ``redact`` before it is returned or written.

Two kinds of secrets are masked, in every string of a value, keys included:

* the configured ones. Ansible's ``no_log`` masks an option's exact value in what the module
  returns; an exception message can carry the same secret escaped (``repr`` turns a newline into
  ``\\n``), JSON-encoded or URL-quoted, and those forms pass ``no_log`` untouched. ``forms`` lists
  every spelling of each secret, longest first;
* vLLM's own spellings of a key, configured here or not, as a service's log or a command line
  shows them: the start-up line ``non-default args: {... 'api_key': ['...'] ...}`` (and
  ``hf_token``), ``--api-key ...`` / ``--api-key=...`` (and ``--hf-token``), ``VLLM_API_KEY=...``,
  ``HF_TOKEN=...``, and an ``Authorization: Bearer ...`` (or ``Basic``) header. The value after
  the name is masked, whatever it is.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import re

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


# A name of a secret as vLLM, its command line or its environment spell it, with what separates it from its value:
# 'api_key': / "api_key"= / api_key: ; --api-key / --api-key= ; VLLM_API_KEY= ; Authorization: Bearer (quotes
# around the name or the header may be escaped, as in a log line that holds JSON).
_Q = r'(?:\\{0,2}["\'])?'
_NAME = (r'(?:' + _Q + r'(?:api_key|hf_token)' + _Q + r'\s*[:=]\s*'
         r'|--(?:api-key|hf-token)(?:\s*=\s*|\s+)'
         r'|\b(?:VLLM_API_KEY|OPENAI_API_KEY|HF_TOKEN|HUGGING_FACE_HUB_TOKEN)\s*[:=]\s*'
         r'|authorization' + _Q + r'\s*[:=]\s*' + _Q + r'\s*(?:bearer|basic)\s+)')
# Its value: a list, a quoted string (its quotes maybe escaped), or a bare word.
_VALUE = r'(?:\[[^\]]*\]?|\\?"[^"\\]*(?:\\[^"][^"\\]*)*(?:\\?")?|\\?\'[^\'\\]*(?:\\[^\'][^\'\\]*)*(?:\\?\')?|[^\s,;\'"}\]\\]+)'
_SPELLED = re.compile(r'(' + _NAME + r')' + _VALUE, re.I)


def redact_text(text, spellings=()):
    """``text`` with every spelling of the configured secrets, and every value vLLM spells as a key, masked."""
    for spelling in spellings or ():
        if spelling in text:
            text = text.replace(spelling, MASK)
    return _SPELLED.sub(lambda match: match.group(1) + MASK, text)


def redact(value, spellings=()):
    """``value`` (str, list, tuple, dict, or anything else) with every secret in its strings masked (``redact_text``):
    the configured ones (``spellings``, from ``forms``) and vLLM's own spellings of a key."""
    if isinstance(value, str):
        return redact_text(value, spellings)
    if isinstance(value, dict):
        return dict((redact(k, spellings), redact(v, spellings)) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return type(value)(redact(v, spellings) for v in value)
    return value
