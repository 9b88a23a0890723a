"""A server's base URL: the mistakes a new user makes, each named in one sentence with the URL that was meant."""

import pytest

from ansible_collections.modelops.vllm.plugins.module_utils._types import CheckError
from ansible_collections.modelops.vllm.plugins.module_utils._urls import url_mistake, validate_url


@pytest.mark.parametrize('url', ['http://127.0.0.1:8000', 'http://127.0.0.1:8000/', 'https://gb10-01:8443',
                                 'https://gw.example/vllm-a', 'https://gw.example/vllm-a/', 'http://[::1]:8000',
                                 'http://u:p@h:8000'])
def test_a_base_url_is_no_mistake(url):
    assert url_mistake(url) is None
    validate_url(url)


@pytest.mark.parametrize('url, words', [
    ('http://gb10:8000/v1', "url 'http://gb10:8000/v1' names the endpoint /v1, not the server: give the server's own "
                            "URL, 'http://gb10:8000' (the collection adds /metrics, /health and /v1/models itself; /v1 "
                            "ends the base URL of an OpenAI client, not of the server)"),
    ('http://gb10:8000/v1/', "names the endpoint /v1, not the server: give the server's own URL, 'http://gb10:8000'"),
    ('https://gw/vllm-a/v1/models', "names the endpoint /v1/models, not the server: give the server's own URL, "
                                    "'https://gw/vllm-a'"),
    ('http://gb10:8000/metrics', "names the endpoint /metrics, not the server: give the server's own URL, "
                                 "'http://gb10:8000' (the collection adds /metrics, /health and /v1/models itself)"),
    ('http://gb10:8000/health', 'names the endpoint /health'),
    ('gb10:8000', "url must start with http:// or https://, got 'gb10:8000': did you mean 'http://gb10:8000'?"),
    ('127.0.0.1:8000', "did you mean 'http://127.0.0.1:8000'?"),
    ('ftp://gb10', "url must be an absolute http:// or https:// URL of the server, got 'ftp://gb10'"),
    ('', "url must be the server's URL, such as http://127.0.0.1:8000, got ''"),
    (None, "got None"),
    ('http://h:8000 ', 'without spaces or control characters'),
    ('http://[::1:8000', 'url is not a valid URL'),
])
def test_a_mistake_is_one_sentence_with_what_was_meant(url, words):
    mistake = url_mistake(url)
    assert mistake and words in mistake and '\n' not in mistake, mistake
    with pytest.raises(CheckError) as caught:
        validate_url(url)
    assert str(caught.value) == mistake


@pytest.mark.parametrize('url', ['http://admin:sk-SECRET@h:8000/v1', 'http://h:8000/?api_key=sk-SECRET',
                                 'admin:sk-SECRET@h:8000'])
def test_no_mistake_shows_a_secret(url):
    assert 'sk-SECRET' not in url_mistake(url)
