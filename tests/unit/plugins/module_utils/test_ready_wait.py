"""The wait until ready, apart from the new process: /health, the model list, the polls, the timeout, the limits."""

import json

import pytest

from ansible_collections.modelops.vllm.plugins.module_utils._ready import wait_ready
from ansible_collections.modelops.vllm.plugins.module_utils._settings import READY_LIMITS
from ansible_collections.modelops.vllm.plugins.module_utils._types import Fetched

from tests.unit.plugins.module_utils.fakes import HEALTH_OK, MODELS, NO_ANSWER, REFUSED, Clock, FakeServer, expo, ok

KEYS = ['health', 'models', 'new_process', 'ok', 'polls', 'seconds', 'start_time', 'why']
STARTING = Fetched(status=503, text='loading', seconds=0.001)


def wait(server, timeout=30, delay=5, model='tiny'):
    clock = Clock(0.0)
    return wait_ready(server, timeout, delay, model=model, sleep=clock.sleep, clock=clock), clock


def test_the_limits_of_the_restart_s_settings():
    assert READY_LIMITS == {'command_timeout': (0, 86400, False), 'ready_timeout': (0, 86400, False),
                            'ready_delay': (0, 3600, False)}


def test_ready_at_the_first_poll():
    result, clock = wait(FakeServer([expo()]))
    assert sorted(result) == KEYS
    assert result == {'ok': True, 'seconds': 0.0, 'health': 'HTTP 200', 'models': ['tiny'], 'polls': 1, 'why': None,
                      'start_time': None, 'new_process': None}
    assert clock.sleeps == []


@pytest.mark.parametrize('health', [[REFUSED, REFUSED, HEALTH_OK], [NO_ANSWER, STARTING, HEALTH_OK]])
def test_health_is_polled_every_delay_until_it_answers_200(health):
    result, clock = wait(FakeServer([expo()], health=health))
    assert result['ok'] and result['polls'] == 3 and result['seconds'] == 10.0
    assert clock.sleeps == [5, 5]


@pytest.mark.parametrize('health, why', [
    (REFUSED, '/health answered refused (connection refused)'),
    (STARTING, '/health answered HTTP 503'),
    (NO_ANSWER, '/health answered timeout (no complete answer in 30.0 s)'),
])
def test_no_health_within_the_timeout_is_not_ready_and_says_the_last_answer(health, why):
    result, clock = wait(FakeServer([expo()], health=health), timeout=30, delay=5)
    assert result['ok'] is False and result['why'] == why
    assert result['health'] == why[len('/health answered '):]
    # Polled while the next poll is at most the timeout away from the start: at 0, 5, ..., 30 s.
    assert result['polls'] == 7 and clock.sleeps == [5] * 6 and result['seconds'] == 30.0
    assert result['models'] is None


@pytest.mark.parametrize('models, model, ok_, why', [
    (MODELS, None, True, None),  # no model named: any model
    (MODELS, 'tiny', True, None),
    (MODELS, 'big', False, '/v1/models answered HTTP 200 without the model big'),
    (ok(json.dumps({'object': 'list', 'data': []})), None, False, '/v1/models answered HTTP 200 without any model'),
    (ok('not json'), 'tiny', False, '/v1/models answered HTTP 200 without the model tiny'),
    (REFUSED, 'tiny', False, '/v1/models answered refused (connection refused) without the model tiny'),
])
def test_the_model_must_be_listed(models, model, ok_, why):
    result = wait(FakeServer([expo()], models=models), timeout=10, delay=5, model=model)[0]
    assert result['ok'] is ok_ and result['why'] == why
    if ok_:
        assert result['models'] == ['tiny']


def test_a_model_listed_later_is_waited_for():
    empty = ok(json.dumps({'object': 'list', 'data': []}))
    server = FakeServer([expo()], models=[empty, empty, MODELS])
    result = wait(server)[0]
    assert result['ok'] and result['polls'] == 3 and server.count('models') == 3


def test_a_timeout_shorter_than_the_delay_polls_once():
    result, clock = wait(FakeServer([expo()], health=REFUSED), timeout=1, delay=5)
    assert result['polls'] == 1 and clock.sleeps == [] and not result['ok']
