"""The wait until ready after a restart: a new process must be shown, by every signal the check uses."""

import pytest

from ansible_collections.modelops.vllm.plugins.module_utils._readings import read_text
from ansible_collections.modelops.vllm.plugins.module_utils._ready import (
    new_process,
    read_process,
    reading_from_summary,
    wait_ready,
)

from tests.unit.plugins.module_utils.fakes import REFUSED, Clock, FakeServer, engine, expo

START = 1796004614.13
# A hung process that worked before it hung: its counters are not zero.
STUCK = expo({'0': engine(running=3, steps=500, step_tokens=9000, gen=8000, prompt=1000, success=40, kv=0.2)})
STUCK_MP = expo({'0': engine(running=3, steps=500, step_tokens=9000, gen=8000, prompt=1000, success=40, kv=0.2)},
                start=None, created=None)
# The same hung process with no start time and no *_created (vLLM --api-server-count 2).
FRESH = expo({'0': engine()}, start=START + 3600, created=START + 3630)
FRESH_MP = expo({'0': engine()}, start=None, created=None)
NEVER_USED_MP = FRESH_MP


def wait(server, before, timeout=30, delay=5):
    clock = Clock()
    return wait_ready(server, timeout, delay, model='tiny', sleep=clock.sleep, clock=clock, before=before)


@pytest.mark.parametrize('old, answers, how', [
    (STUCK, [FRESH], 'process_start_time_seconds changed'),
    (STUCK_MP, [FRESH_MP], 'went down'),  # no start time: counters that restart from zero show it
    (expo({'0': engine(gen=10)}, created=START + 1), [expo({'0': engine(gen=10)}, created=START + 2)], '*_created'),
    (STUCK, [STUCK, STUCK, FRESH], 'process_start_time_seconds changed'),  # the old one answers for a moment
    (STUCK_MP, [REFUSED, STUCK_MP, FRESH_MP], 'went down'),
])
def test_ready_once_a_new_process_is_shown(old, answers, how):
    result = wait(FakeServer(answers), read_text(old))
    assert result['ok'], result
    assert how in result['new_process']


@pytest.mark.parametrize('old, now, why', [
    # A restart command that did nothing: the same process answers.
    (STUCK, STUCK, 'the one from before the restart'),
    # The same, without a start time (--api-server-count 2): nothing can show a new process.
    (STUCK_MP, STUCK_MP, 'not confirmed'),
    # A process that never counted anything, without a start time: a new one would look the same.
    (NEVER_USED_MP, NEVER_USED_MP, 'not confirmed'),
])
def test_not_ready_when_nothing_shows_a_new_process(old, now, why):
    server = FakeServer([now])
    result = wait(server, read_text(old))
    assert not result['ok'], result
    assert why in result['why']
    assert result['new_process'] is None
    assert server.count('models') == 0  # the old process's model list is never taken for the new one's


def test_metrics_that_cannot_be_read_after_the_restart_show_nothing():
    server = FakeServer(['<html>502</html>\n'])
    result = wait(server, read_text(STUCK))
    assert not result['ok'] and '/metrics cannot be read' in result['why']


def test_nothing_read_before_the_restart_takes_any_process_that_answers():
    server = FakeServer([STUCK_MP])
    result = wait(server, None)
    assert result['ok'] and result['new_process'] is None
    assert server.count('metrics') == 0


def test_the_model_must_be_listed_by_the_new_process_too():
    from tests.unit.plugins.module_utils.fakes import ok
    server = FakeServer([FRESH], models=ok('{"object": "list", "data": []}'))
    result = wait(server, read_text(STUCK))
    assert not result['ok'] and 'without the model tiny' in result['why']


def test_read_process_is_none_for_an_answer_that_is_not_metrics():
    assert read_process(FakeServer([REFUSED])) is None
    assert read_process(FakeServer(['garbage {\n'])) is None
    assert read_process(FakeServer([STUCK])).start_time == START


def test_a_reading_from_the_checks_evidence_tells_the_same_as_the_exposition():
    summary = read_text(STUCK_MP).summary()
    before = reading_from_summary(summary)
    assert new_process(before, read_text(FRESH_MP))[0] is True
    assert new_process(before, read_text(STUCK_MP))[0] is False
    with_start = reading_from_summary(read_text(STUCK).summary())
    assert with_start.start_time == START
    assert new_process(with_start, read_text(FRESH))[0] is True


@pytest.mark.parametrize('summary', [None, {}, [], 'x', {'engines': 'x'}, {'engines': {'0': 'x'}},
                                     {'engines': {'0': {'counters': {'a': 'NaN', 'b': float('nan'), 'c': -1,
                                                                     'd': True, 'e': float('inf')}}}},
                                     {'process_start_time': 'soon'}, {'process_start_time': -5}])
def test_a_summary_with_nothing_to_compare_is_no_reading(summary):
    assert reading_from_summary(summary) is None


def test_a_start_time_given_apart_is_used_when_the_read_has_none():
    assert reading_from_summary({}, start=START).start_time == START
    assert reading_from_summary({'process_start_time': START + 1}, start=START).start_time == START + 1


def test_a_summary_of_many_engines_is_capped():
    summary = {'engines': dict((str(i), {'counters': {'vllm:generation_tokens_total': 1.0}}) for i in range(5000))}
    assert len(reading_from_summary(summary).engines) == 256
