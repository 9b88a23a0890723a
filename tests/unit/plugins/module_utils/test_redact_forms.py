"""The spellings of the configured secrets (forms, secrets_of) and the redaction of a password in a URL."""

import json

import pytest

from ansible_collections.modelops.vllm.plugins.module_utils._redact import MASK, forms, redact, redact_text, secrets_of

KEY = 'sk-HOSTILE-0123456789abcdef'


def test_the_mask():
    assert MASK == '********'


@pytest.mark.parametrize('secret, spellings', [
    (KEY, [KEY]),
    ('a b\n"\u20ac', ['a%20b%0A%22%E2%82%AC', 'a+b%0A%22%E2%82%AC', 'a b\\n\\"\\u20ac', 'a b\\n\\"\u20ac',
                      'a b\\n"\u20ac', 'a b\n"\u20ac']),
    (' padded ', ['%20padded%20', ' padded ', '+padded+', 'padded']),
])
def test_every_spelling_of_a_secret_longest_first(secret, spellings):
    out = forms([secret])
    assert sorted(out) == sorted(spellings)
    assert [len(s) for s in out] == sorted((len(s) for s in out), reverse=True)


@pytest.mark.parametrize('secrets', [[], [None], [''], [5, b'bytes', ['list']], ('',)])
def test_nothing_to_hide_gives_no_spelling(secrets):
    assert forms(secrets) == []


def test_the_spellings_of_several_secrets_are_one_list_without_repeats():
    assert forms([KEY, KEY, None, 'other']) == [KEY, 'other']


@pytest.mark.parametrize('spec, secrets', [
    ({}, []),
    ({'api_key': KEY}, [KEY]),
    ({'api_key': '', 'url': 'http://127.0.0.1:8000'}, []),
    ({'url': 'http://user:pw@127.0.0.1:8000'}, ['pw']),
    # A password as written and as decoded, and their quoted forms.
    ({'api_key': 'K', 'url': 'http://u:p%40ss@h'}, ['p%2540ss', 'p%40ss', 'p@ss', 'K']),
    # A URL that does not parse, or is not a string, has no password to give.
    ({'url': 'http://[::1'}, []),
    ({'url': 5, 'api_key': 5}, []),
    ({'url': 'http://user@h'}, []),
])
def test_the_secrets_of_a_server(spec, secrets):
    assert sorted(secrets_of(spec)) == sorted(secrets)


@pytest.mark.parametrize('text', [
    'GET http://admin:p@ss@127.0.0.1:8000/v1/models failed',
    'GET http://admin:p%40ss@127.0.0.1:8000/v1/models failed',
    'the error: %r' % 'p@ss',
    json.dumps({'msg': 'p@ss'}),
])
def test_a_password_in_the_url_is_masked_in_every_spelling(text):
    spec = {'url': 'http://admin:p%40ss@127.0.0.1:8000'}
    out = redact_text(text, secrets_of(spec))
    assert 'p@ss' not in out and 'p%40ss' not in out
    assert MASK in out


def test_a_huge_value_is_redacted_whole():
    text = ('x' * 1000 + KEY) * 1000
    out = redact({'log': [text]}, forms([KEY]))
    assert out == {'log': [('x' * 1000 + MASK) * 1000]}


def test_a_secret_that_is_not_there_changes_nothing():
    value = {'a': ['b', ('c', 1)], 'd': None}
    assert redact(value, forms([KEY])) == value
