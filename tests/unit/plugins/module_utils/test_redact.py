"""The one redaction: configured secrets in every spelling, and vLLM's own spellings of a key, configured or not."""

import json

import pytest

from ansible_collections.modelops.vllm.plugins.module_utils._redact import MASK, forms, redact, redact_text

KEY = 'sk-HOSTILE-0123456789abcdef'


@pytest.mark.parametrize('line', [
    # vLLM's start-up line (versions that do not mask it themselves), one key or several.
    "INFO 12-01 11:02:03 [api_server.py:1] non-default args: {'model': '/models/tiny', 'api_key': ['%s'], 'port': 8000}",
    "non-default args: {'model': '/models/tiny', 'api_key': ['%s', 'sk-other-key'], 'port': 8000}",
    "non-default args: {'api_key': '%s'}",
    # The command line, as systemd, docker or ps show it.
    'vllm serve /models/tiny --api-key %s --port 8000',
    'vllm serve /models/tiny --api-key=%s --port 8000',
    "ExecStart=/usr/bin/vllm serve /models/tiny --api-key '%s'",
    'Environment=VLLM_API_KEY=%s',
    'VLLM_API_KEY: %s',
    # A header, in a log line or a curl command.
    "curl -H 'Authorization: Bearer %s' http://127.0.0.1:8000/v1/models",
    '{"headers": {"Authorization": "Bearer %s"}}',
    "headers={'authorization': 'bearer %s'}",
    # JSON inside a log line: its quotes escaped.
    '{\\"api_key\\": \\"%s\\", \\"port\\": 8000}',
    # Hugging Face's token is as secret.
    "non-default args: {'hf_token': '%s'}",
    '--hf-token %s',
    'HF_TOKEN=%s',
])
def test_vllm_s_own_spellings_of_a_key_are_masked_configured_or_not(line):
    text = line.replace('%s', KEY)
    out = redact_text(text)
    assert KEY not in out and 'HOSTILE' not in out, out
    assert MASK in out
    # The rest of the line is kept: the evidence still says what the line was.
    assert out.startswith(text[:text.index(KEY)].rstrip('\'"[\\ '))
    if '8000' in text.split(KEY)[1]:
        assert out.endswith(text[text.index('8000'):])


@pytest.mark.parametrize('text', [
    'api_key cannot be sent in an HTTP header: it has a control character',
    '/v1/models answered HTTP 401 (check api_key)',
    'url has credentials and api_key is set: both would go in the Authorization header',
    'no valid bearer token',
    'the bearer key is never sent to a proxy',
    'INFO: 127.0.0.1:53422 - "GET /metrics HTTP/1.1" 200 OK',
])
def test_prose_about_keys_is_left_alone(text):
    assert redact_text(text) == text


def test_configured_secrets_in_every_spelling_and_in_keys():
    secret = 'k"ey\nwith\u20acodd chars'
    value = {'logs': ['x %s y' % secret, 'x %s y' % json.dumps(secret)[1:-1], 'x %r y' % secret],
             secret: 1, 'n': 2.5, 'none': None}
    out = redact(value, forms([secret]))
    assert out['logs'] == ['x %s y' % MASK, 'x %s y' % MASK, "x '%s' y" % MASK]
    assert out['n'] == 2.5 and out['none'] is None and out[MASK] == 1


def test_redact_keeps_the_shape_of_what_it_is_given():
    value = {'a': [1, ('b', 'Authorization: Bearer %s' % KEY)], 'c': True}
    out = redact(value)
    assert out == {'a': [1, ('b', 'Authorization: Bearer %s' % MASK)], 'c': True}


def test_redaction_is_linear_in_the_text():
    import time
    nasty = ["'api_key': " + '"' + '\\x' * 200000, "'api_key': [" * 100000, 'Authorization: ' * 100000,
             '--api-key ' * 100000, ('INFO line with nothing secret ' * 30 + '\n') * 2000]
    for text in nasty:
        # CPU time, not wall time: the bound is on the work (linear, not a backtracking blow-up), and a loaded
        # machine (tests side by side) stretches the wall clock of the same work.
        started = time.process_time()
        redact_text(text)
        assert time.process_time() - started < 2.0, text[:40]
