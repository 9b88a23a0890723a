"""The restart decision: every guard rail, table-driven."""

import pytest

from ansible_collections.modelops.vllm.plugins.module_utils._decide import (
    FAIL,
    NONE,
    RESTART,
    decide,
    empty_history,
    normalize_history,
    parse_started_at,
    required_cooldown,
)

NOW = 1_000_000.0
S = {'startup_grace': 900, 'cooldown': 600, 'max_restarts': 3, 'restart_window': 86400, 'unknown_limit': 3}
RUNNING_LONG = {'running': True, 'started_at': NOW - 7200, 'status': 'active/running'}
RUNNING_NEW = {'running': True, 'started_at': NOW - 120, 'status': 'active/running'}
STOPPED = {'running': False, 'started_at': NOW - 7200, 'status': 'failed'}


def hist(*ago, streak=0):
    h = empty_history()
    h['restarts'] = [NOW - a for a in ago]
    h['unknown_streak'] = streak
    return h


@pytest.mark.parametrize('state, service, history, paused, action, words', [
    # Only stuck restarts, and never inside the grace.
    ('stuck', RUNNING_LONG, None, False, RESTART, 'restart: stuck (restart 1 of at most 3'),
    ('stuck', RUNNING_NEW, None, False, NONE, 'within the start-up grace'),
    ('stuck', {}, None, False, RESTART, 'restart: stuck'),
    ('stuck', RUNNING_LONG, hist(300), False, NONE, 'restarted 5m00s ago, within the start-up grace'),
    # Every other verdict never restarts.
    ('idle', STOPPED, None, False, NONE, 'nothing to do'),
    ('busy', STOPPED, None, False, NONE, 'nothing to do'),
    ('restarted', STOPPED, None, False, NONE, 'nothing to do'),
    ('starting', STOPPED, None, False, NONE, 'nothing to do'),
    ('sleeping', STOPPED, None, False, NONE, 'nothing to do'),
    ('up', STOPPED, None, False, NONE, 'nothing to do'),
    ('unknown', STOPPED, None, False, NONE, 'never a reason to restart'),
    # Down restarts only when the service manager confirms it is not starting.
    ('down', STOPPED, None, False, RESTART, 'not running (failed)'),
    ('down', RUNNING_NEW, None, False, NONE, 'it is starting (loading weights)'),
    ('down', RUNNING_LONG, None, False, RESTART, 'running for 2h00m without answering'),
    ('down', {'running': True}, None, False, NONE, 'unknown time'),
    ('down', {}, None, False, NONE, 'cannot say whether it is starting'),
    # Cooldown grows; budget; pause.
    ('stuck', RUNNING_LONG, hist(1000), False, RESTART, 'restart 2 of at most 3'),
    ('stuck', RUNNING_LONG, hist(1000, 5000), False, NONE, 'cooldown is now 20m00s'),
    ('stuck', RUNNING_LONG, hist(1300, 5000), False, RESTART, 'restart 3 of at most 3'),
    ('stuck', RUNNING_LONG, hist(9000, 20000, 30000), False, FAIL, 'restart budget is spent'),
    ('stuck', RUNNING_LONG, hist(90000, 95000, 99000), False, RESTART, 'restart 1 of at most 3'),
    ('stuck', RUNNING_LONG, None, True, NONE, 'paused'),
    ('down', STOPPED, None, True, NONE, 'paused'),
    # Unknown that persists asks a human, never restarts.
    ('unknown', RUNNING_LONG, hist(streak=1), False, NONE, '2 of 3 runs'),
    ('unknown', RUNNING_LONG, hist(streak=2), False, FAIL, '3 runs in a row'),
])
def test_decide(state, service, history, paused, action, words):
    out = decide(state, service, history, NOW, S, paused=paused)
    assert out['action'] == action, out['reason']
    assert words in out['reason']


def test_restart_is_recorded_in_the_history_and_budget_shrinks():
    out = decide('stuck', RUNNING_LONG, hist(5000), NOW, S)
    assert out['action'] == RESTART
    assert out['history']['restarts'] == [NOW - 5000, NOW]
    assert out['restarts_in_window'] == 2 and out['budget_left'] == 1
    assert out['cooldown'] == 1200


def test_a_second_run_right_after_a_restart_does_not_restart_again():
    first = decide('stuck', RUNNING_LONG, None, NOW, S)
    second = decide('stuck', RUNNING_LONG, first['history'], NOW + 2, S)
    assert first['action'] == RESTART and second['action'] == NONE
    assert 'within the start-up grace' in second['reason']


def test_unknown_streak_resets_on_any_judged_verdict():
    out = decide('busy', RUNNING_LONG, hist(streak=2), NOW, S)
    assert out['history']['unknown_streak'] == 0


def test_old_restarts_fall_out_of_the_window():
    out = decide('idle', RUNNING_LONG, hist(100000, 10), NOW, S)
    assert out['history']['restarts'] == [NOW - 10]


@pytest.mark.parametrize('count, base, expected', [(0, 600, 0), (1, 600, 600), (2, 600, 1200), (3, 600, 2400)])
def test_cooldown_grows(count, base, expected):
    assert required_cooldown(count, base) == expected


@pytest.mark.parametrize('damaged', [None, [], 'x', {'restarts': 'x'}, {'restarts': [1, 'a', None]},
                                     {'unknown_streak': -4}])
def test_damaged_history_is_read_safely(damaged):
    clean = normalize_history(damaged)
    assert isinstance(clean['restarts'], list)
    assert clean['unknown_streak'] >= 0


@pytest.mark.parametrize('value, expected', [
    (1796004614, 1796004614.0),
    ('@1796004614', 1796004614.0),
    ('1796004614.5', 1796004614.5),
    ('2026-11-30T02:10:52Z', 1796004652.0),
    ('2026-11-30T02:10:52.250000000Z', 1796004652.25),
    ('2026-11-30T03:10:52+01:00', 1796004652.0),
    ('0001-01-01T00:00:00Z', None),
    ('', None), ('n/a', None), (None, None), (0, None), ('yesterday', None), (True, None),
])
def test_parse_started_at(value, expected):
    assert parse_started_at(value) == expected


def test_docker_start_time_string_feeds_the_grace():
    service = {'running': True, 'started_at': '2026-11-30T02:10:52.5Z'}
    assert decide('stuck', service, None, 1796004652.5 + 120, S)['action'] == NONE
    assert decide('stuck', service, None, 1796004652.5 + 901, S)['action'] == RESTART


# -- vLLM's own pause: never a restart, and a pause that never ends asks a human ----------------------------

def test_paused_is_never_restarted_even_past_the_grace_and_with_budget():
    decision = decide('paused', RUNNING_LONG, None, NOW, S)
    assert decision['action'] == NONE and 'never restarted' in decision['reason']
    assert decision['history']['paused_since'] == NOW


def test_a_pause_that_lasts_past_the_limit_needs_a_human_and_is_still_not_restarted():
    history = empty_history()
    history['paused_since'] = NOW - 3700
    decision = decide('paused', RUNNING_LONG, history, NOW, dict(S, paused_limit=3600))
    assert decision['action'] == FAIL
    assert 'trainer that held the pause may have died' in decision['reason']
    assert decision['history']['restarts'] == []


def test_the_pause_streak_ends_when_the_server_is_anything_else():
    history = empty_history()
    history['paused_since'] = NOW - 3000
    decision = decide('busy', RUNNING_LONG, history, NOW, S)
    assert 'paused_since' not in decision['history']
    again = decide('paused', RUNNING_LONG, decision['history'], NOW + 10, S)
    assert again['history']['paused_since'] == NOW + 10 and again['action'] == NONE


@pytest.mark.parametrize('forged', [float('nan'), 'yesterday', NOW + 86400, None, True])
def test_a_paused_since_that_cannot_be_true_starts_the_pause_now(forged):
    history = empty_history()
    history['paused_since'] = forged
    decision = decide('paused', RUNNING_LONG, history, NOW, dict(S, paused_limit=60))
    assert decision['action'] == NONE and decision['history']['paused_since'] == NOW


def test_paused_clears_a_failed_restart_as_any_serving_state_does():
    decision = decide('paused', RUNNING_LONG, None, NOW, S, failed_restart={'at': NOW - 600, 'error': 'x'})
    assert decision['action'] == NONE and 'cleared' in decision['reason']


def test_a_history_nested_deeper_than_the_stack_is_damage_not_a_crash():
    from ansible_collections.modelops.vllm.plugins.module_utils._decide import load_history
    history, why = load_history('[' * 200000 + ']' * 200000)
    assert history is None and why == 'it is not JSON'
