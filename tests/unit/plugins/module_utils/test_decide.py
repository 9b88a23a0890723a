"""The restart decision: every guard rail, table-driven."""

import pytest

from ansible_collections.modelops.vllm.plugins.module_utils._decide import (
    decide as decide_as_given,
    decide_escalation,
    empty_history,
    gpu_errors,
    invalid_settings,
    normalize_history,
    required_cooldown,
    url_evidence,
)
from ansible_collections.modelops.vllm.plugins.module_utils._types import FAIL, NONE, REBOOT, RESTART, parse_started_at

NOW = 1_000_000.0
# The settings as the watchdog role gives them (its reasons name its variables: setting_prefix).
S = {'startup_grace': 900, 'cooldown': 600, 'max_restarts': 3, 'restart_window': 86400, 'unknown_limit': 3,
     'setting_prefix': 'vllm_watchdog_'}
RUNNING_LONG = {'running': True, 'started_at': NOW - 7200, 'status': 'active/running'}
RUNNING_NEW = {'running': True, 'started_at': NOW - 120, 'status': 'active/running'}
STOPPED = {'running': False, 'started_at': NOW - 7200, 'status': 'failed'}
# What the gate shows for a unit that serves its URL: its main process listens on the URL's port.
PROVEN = {'listens': True, 'unit': 'the systemd unit vllm', 'process': 'its main process 4242 (vllm serve)',
          'endpoint': '127.0.0.1:8000', 'can_prove': True}


def decide(*args, **kwargs):
    """The guard rails of a server whose unit is shown to serve its URL (the proof's own tests below give theirs)."""
    kwargs.setdefault('url_proof', PROVEN)
    return decide_as_given(*args, **kwargs)


def hist(*ago, streak=0):
    h = empty_history()
    h['restarts'] = [NOW - a for a in ago]
    h['unknown_streak'] = streak
    return h


@pytest.mark.parametrize('state, service, history, paused, action, words', [
    # Only stuck restarts, and never inside the grace.
    ('stuck', RUNNING_LONG, None, False, RESTART, 'restart: stuck; the systemd unit vllm: its main process 4242 '
                                                  '(vllm serve) listens on 127.0.0.1:8000 (restart 1 of at most 3'),
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
    # ... and, when it runs, only with proof that the URL is that service (test_down_needs_proof below).
    ('down', RUNNING_LONG, None, False, RESTART, 'running for 2h00m without answering, past the start-up grace'),
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


def test_a_restart_window_shorter_than_the_grace_still_keeps_the_grace():
    """Found by the property test: a restart 100 s ago, outside a 60 s window but inside the 900 s grace."""
    short = dict(S, restart_window=60, cooldown=0, max_restarts=1)
    decision = decide('stuck', {}, hist(100), NOW, short)
    assert decision['action'] == NONE and 'restarted 1m40s ago, within the start-up grace' in decision['reason']
    assert decision['restarts_in_window'] == 0 and decision['budget_left'] == 1  # the budget counts the window only
    assert decision['history']['restarts'] == [NOW - 100]  # kept for the next run's grace
    later = decide('stuck', {}, decision['history'], NOW + 801, short)
    assert later['action'] == RESTART and later['history']['restarts'] == [NOW + 801]  # past the grace: pruned


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


# -- down needs proof that the URL is the service (issue 15) ---------------------------------------------------

URL = 'http://127.0.0.1:8000'
LISTENS = {'listens': True, 'endpoint': '127.0.0.1:8000', 'process': 'its main process 4242 (systemd MainPID)',
           'listening_on': ['127.0.0.1:8000']}
ELSEWHERE = {'listens': False, 'endpoint': '127.0.0.1:8000', 'process': 'its main process 4242 (systemd MainPID)',
             'listening_on': ['127.0.0.1:28002']}
NOWHERE = {'listens': False, 'endpoint': '127.0.0.1:8000', 'process': 'its main process 4242 (systemd MainPID)',
           'listening_on': []}
UNKNOWN = {'listens': None, 'why': 'the service manager names no main process of the service'}


def served(url=URL, ago=3600):
    h = empty_history()
    h['served'] = {'url': url, 'at': NOW - ago}
    return h


@pytest.mark.parametrize('proof, history, action, words', [
    # The look-alikes that are restarted: the service's process listens on the URL's port and does not answer...
    (LISTENS, None, RESTART, 'its main process 4242 (systemd MainPID) listens on 127.0.0.1:8000'),
    # ... or the instance was seen serving at this very URL before.
    (NOWHERE, served(), RESTART, 'it was seen serving at this URL 1h00m ago'),
    (UNKNOWN, served(), RESTART, 'it was seen serving at this URL'),
    # No proof: a human, never a restart.
    (None, None, FAIL, 'no process of the service can be found'),
    (UNKNOWN, None, FAIL, 'the service manager names no main process'),
    (NOWHERE, None, FAIL, 'listens on no TCP port'),
    (ELSEWHERE, None, FAIL, 'listens on 127.0.0.1:28002, not on 127.0.0.1:8000'),
    # A process that listens elsewhere outweighs an old sighting: the service moved, the URL is stale.
    (ELSEWHERE, served(), FAIL, 'not on 127.0.0.1:8000'),
    # Seen serving at another URL is no proof for this one.
    (UNKNOWN, served('http://127.0.0.1:8001'), FAIL, 'never seen serving at this URL'),
    # A sighting in the future (a forged history, a clock that went back) is none.
    (UNKNOWN, served(ago=-86400), FAIL, 'never seen serving at this URL'),
])
def test_down_needs_proof_that_the_url_is_the_service(proof, history, action, words):
    out = decide('down', RUNNING_LONG, history, NOW, S, url=URL, url_proof=proof)
    assert out['action'] == action, out['reason']
    assert words in out['reason']
    if action == FAIL:
        assert 'The URL may be wrong' in out['reason'] and out['history']['restarts'] == []


def test_the_default_url_is_named_in_a_down_verdict():
    out = decide('down', RUNNING_LONG, None, NOW, S, url=URL, url_proof=dict(UNKNOWN, default_url=True))
    assert out['action'] == FAIL
    assert "only the role's default fallback: no vllm_url, vllm_watchdog_url or instance url" in out['reason']
    stopped = decide('down', STOPPED, None, NOW, S, url=URL, url_proof={'default_url': True})
    assert stopped['action'] == RESTART and 'default fallback' in stopped['reason']


def test_a_service_that_is_not_running_needs_no_proof_to_be_started():
    assert decide('down', STOPPED, None, NOW, S, url=URL, url_proof=None)['action'] == RESTART


def test_serving_is_remembered_per_url():
    out = decide('busy', RUNNING_LONG, None, NOW, S, url=URL)
    assert out['history']['served'] == {'url': URL, 'at': NOW}
    later = decide('down', RUNNING_LONG, out['history'], NOW + 7200, S, url=URL, url_proof=UNKNOWN)
    assert later['action'] == RESTART and 'seen serving at this URL 2h00m ago' in later['reason']
    other = decide('down', RUNNING_LONG, out['history'], NOW + 7200, S, url='http://127.0.0.1:8001',
                   url_proof=UNKNOWN)
    assert other['action'] == FAIL


def test_url_evidence_is_pure_and_says_why():
    ok, words = url_evidence(LISTENS, {}, URL, NOW)
    assert ok and 'listens on 127.0.0.1:8000' in words
    ok, words = url_evidence({}, {}, URL, NOW)
    assert not ok and 'never seen serving' in words


# -- the ladder: restart, reboot (opt-in), a human (issue 17) --------------------------------------------------

LADDER = dict(S, reboot=True, reboot_cooldown=21600, rehang_window=3600)
XID = {'time': NOW - 60, 'kind': 'xid', 'line': 'NVRM: Xid (PCI:000f:01:00): 31, pid=4242, name=python3, MMU Fault'}
NOMEM = {'time': NOW - 60, 'kind': 'nv_err_no_memory',
         'line': 'NVRM: nvCheckOkFailedNoLog: Check failed: Out of memory [NV_ERR_NO_MEMORY] (0x00000051)'}
OOM = {'time': NOW - 60, 'kind': 'oom', 'line': 'Out of memory: Killed process 4242 (python3)'}


def restarted(ago, state='stuck', step='restart', times=None):
    h = hist(*(times if times is not None else [ago]))
    h['last_step'] = {'step': step, 'at': NOW - ago, 'state': state}
    if step == 'reboot':
        h['reboots'] = [NOW - ago]
    return h


@pytest.mark.parametrize('state, history, settings, kernel, action, words', [
    # The same hang back within the window after a restart: a reboot when on, else a human - never another restart.
    ('stuck', restarted(1800), LADDER, None, REBOOT, 'stuck again 30m00s after a vLLM restart'),
    ('stuck', restarted(1800), S, None, FAIL, 'the next step, a host reboot, is off (vllm_watchdog_reboot)'),
    # After a reboot, the same hang back: a human.
    ('stuck', restarted(1800, step='reboot'), LADDER, None, FAIL, 'neither a restart nor a reboot cleared'),
    # Outside the window it is a new hang: restarted as before (cooldown and budget).
    ('stuck', restarted(4000), LADDER, None, RESTART, 'restart 2 of at most 3'),
    # The window is off: as before the ladder existed.
    ('stuck', restarted(1800), dict(LADDER, rehang_window=0), None, RESTART, 'restart: stuck'),
    # A restart for down, then stuck: not the same hang.
    ('stuck', restarted(1800, state='down'), LADDER, None, RESTART, 'restart: stuck'),
    # Still within the start-up grace of the restart: nothing yet, whatever comes next.
    ('stuck', restarted(300), LADDER, None, NONE, 'within the start-up grace'),
    # A GPU error in the kernel log since vLLM was seen healthy: not restarted into it.
    ('stuck', None, LADDER, [XID], REBOOT, 'the kernel log shows 1 GPU error(s)'),
    ('stuck', None, S, [XID], FAIL, 'the GPU is not healthy'),
    ('down', None, S, [NOMEM], FAIL, 'NV_ERR_NO_MEMORY'),
    # ... but an out-of-memory kill is evidence, not a GPU error.
    ('stuck', None, LADDER, [OOM], RESTART, 'restart: stuck'),
    # A reboot counts against the budget and has its own cooldown.
    ('stuck', restarted(1800, times=[1800, 5000, 9000]), LADDER, None, FAIL, 'the restart budget is spent'),
    ('stuck', dict(restarted(1800), reboots=[NOW - 7200]), LADDER, None, FAIL, 'within the reboot cooldown'),
])
def test_the_ladder(state, history, settings, kernel, action, words):
    service = STOPPED if state == 'down' else RUNNING_LONG
    out = decide(state, service, history, NOW, settings, kernel=kernel, url=URL)
    assert out['action'] == action, out['reason']
    assert words in out['reason'], out['reason']
    if action == REBOOT:
        assert out['history']['restarts'][-1] == NOW and out['history']['reboots'][-1] == NOW
        assert out['history']['last_step'] == {'step': REBOOT, 'at': NOW, 'state': state}
    if action == RESTART:
        assert out['history']['last_step'] == {'step': RESTART, 'at': NOW, 'state': state}


def test_a_gpu_line_of_the_start_up_is_not_a_reason_vllm_56824():
    """NV_ERR_NO_MEMORY lines also appear on healthy starts of a DGX Spark: only the lines after vLLM was first seen
    healthy count (else after its start plus the start-up grace)."""
    service = {'running': True, 'started_at': NOW - 7200, 'status': 'active/running'}
    during_start = dict(NOMEM, time=NOW - 7000)
    assert decide('stuck', service, None, NOW, LADDER, kernel=[during_start])['action'] == RESTART
    healthy = empty_history()
    healthy['healthy'] = {'at': NOW - 3000, 'start': NOW - 7200}
    before_seen = dict(NOMEM, time=NOW - 3500)  # past the grace, but before it was seen healthy
    assert decide('stuck', service, healthy, NOW, LADDER, kernel=[before_seen])['action'] == RESTART
    after_seen = dict(NOMEM, time=NOW - 100)
    assert decide('stuck', service, healthy, NOW, LADDER, kernel=[after_seen])['action'] == REBOOT
    # Lines without a time, or with no start known at all, are never counted.
    assert decide('stuck', {}, None, NOW, LADDER, kernel=[dict(XID, time=None)])['action'] == RESTART
    assert gpu_errors([XID], None) == []


def test_a_healthy_verdict_remembers_when_this_process_was_first_seen_healthy():
    service = {'running': True, 'started_at': NOW - 7200, 'status': 'active/running'}
    first = decide('idle', service, None, NOW, S)
    assert first['history']['healthy'] == {'at': NOW, 'start': NOW - 7200}
    again = decide('busy', service, first['history'], NOW + 600, S)
    assert again['history']['healthy']['at'] == NOW  # the first sighting of this process stays
    restarted_service = {'running': True, 'started_at': NOW + 1000, 'status': 'active/running'}
    new = decide('idle', restarted_service, again['history'], NOW + 2000, S)
    assert new['history']['healthy'] == {'at': NOW + 2000, 'start': NOW + 1000}


def test_one_reboot_then_a_human():
    """A hang that returns right after a restart leads to one reboot, then (the hang back again) a human."""
    first = decide('stuck', RUNNING_LONG, None, NOW, LADDER)
    assert first['action'] == RESTART
    t = NOW + 1800
    second = decide('stuck', {'running': True, 'started_at': NOW + 5, 'status': 'active/running'},
                    first['history'], t, LADDER)
    assert second['action'] == REBOOT, second['reason']
    t2 = t + 1800
    third = decide('stuck', {'running': True, 'started_at': t + 60, 'status': 'active/running'},
                   second['history'], t2, LADDER)
    assert third['action'] == FAIL and 'after a host reboot' in third['reason']
    assert third['history']['restarts'] == [NOW, t]


@pytest.mark.parametrize('settings, history, action, words', [
    (LADDER, restarted(5), REBOOT, 'reboot the host: the memory did not come back'),
    (S, restarted(5), FAIL, 'a host reboot, is off'),
    (LADDER, restarted(5, times=[5, 1000, 2000]), FAIL, 'the restart budget is spent'),
    (LADDER, dict(restarted(5), reboots=[NOW - 600]), FAIL, 'within the reboot cooldown'),
])
def test_memory_that_does_not_come_back_takes_the_next_step(settings, history, action, words):
    out = decide_escalation(history, NOW, settings, 'the memory did not come back (MemAvailable 9.5 GiB)')
    assert out['action'] == action, out['reason']
    assert words in out['reason']
    assert (NOW in out['history'].get('reboots', [])) == (action == REBOOT)


@pytest.mark.parametrize('bad', [{'reboot': 'yes'}, {'reboot_cooldown': -1}, {'rehang_window': float('nan')},
                                 {'reboot_cooldown': float('inf')}])
def test_ladder_settings_that_are_not_in_range_are_refused(bad):
    assert invalid_settings(dict(S, **bad))


def test_a_history_nested_deeper_than_the_stack_is_damage_not_a_crash():
    from ansible_collections.modelops.vllm.plugins.module_utils._decide import load_history
    history, why = load_history('[' * 200000 + ']' * 200000)
    assert history is None and why == 'it is not JSON'


# -- before any restart: what it acts on serves the URL the check judged (issue 24) ----------------------------------

URL_B = 'http://127.0.0.1:8001'
OTHER_UNIT = {'listens': False, 'unit': 'the systemd unit vllm-a', 'can_prove': True, 'endpoint': '127.0.0.1:8001',
              'process': 'its main process 1111 (vllm serve --port 8000)', 'listening_on': ['127.0.0.1:8000'],
              'held_by': 'process 2222 (vllm serve --port 8001)'}


@pytest.mark.parametrize('state, service, proof, words', [
    # The unit named serves another port, and another process holds the URL's: the stuck server is not its.
    ('stuck', RUNNING_LONG, OTHER_UNIT,
     'nothing shows that the systemd unit vllm-a serves http://127.0.0.1:8001, the URL the check judged: the systemd '
     'unit vllm-a: its main process 1111 (vllm serve --port 8000) listens on 127.0.0.1:8000, not on 127.0.0.1:8001; '
     '127.0.0.1:8001 is held by process 2222 (vllm serve --port 8001)'),
    # A misspelled unit: systemd has none (LoadState=not-found).
    ('stuck', {'running': False, 'exists': False, 'status': 'no such unit (systemctl show: LoadState=not-found)'},
     {'exists': False, 'unit': 'the systemd unit vllm-bb', 'held_by': 'process 2222 (vllm serve)',
      'endpoint': '127.0.0.1:8001'},
     'the systemd unit vllm-bb does not exist (no such unit (systemctl show: LoadState=not-found)); 127.0.0.1:8001 is '
     'held by process 2222 (vllm serve)'),
    ('down', {'running': False, 'exists': False, 'status': 'no such container: Error: No such object: vllm-bb'},
     {'exists': False, 'unit': 'the container vllm-bb'}, 'the container vllm-bb does not exist'),
    # A unit that does not run cannot be the server that answers.
    ('stuck', STOPPED, {'unit': 'the systemd unit vllm-a', 'can_prove': True, 'endpoint': '127.0.0.1:8001'},
     'the systemd unit vllm-a does not run, yet http://127.0.0.1:8001 answers'),
    # Down, the unit stopped, another process on the URL's port: that one is the server there.
    ('down', STOPPED, {'unit': 'the systemd unit vllm-a', 'can_prove': True, 'endpoint': '127.0.0.1:8001',
                       'held_by': 'process 2222 (nginx)'},
     'the systemd unit vllm-a does not run; 127.0.0.1:8001 is held by process 2222 (nginx): that is the server at'),
    # The command method names no process: only the inventory can say what it restarts.
    ('stuck', {'running': None}, {'unit': 'the restart command vllm-restart b', 'can_prove': False},
     'the restart command vllm-restart b names no process, so nothing can show that it restarts the server at '
     'http://127.0.0.1:8001; if it does, say so with vllm_watchdog_assume_url_is_service: true'),
    # The inventory's word never outweighs what contradicts it.
    ('stuck', RUNNING_LONG, dict(OTHER_UNIT, assumed=True), 'listens on 127.0.0.1:8000, not on 127.0.0.1:8001'),
])
def test_no_restart_of_what_is_not_shown_to_serve_the_url(state, service, proof, words):
    out = decide(state, service, None, NOW, S, url=URL_B, url_proof=proof)
    assert out['action'] == FAIL, out['reason']
    assert words in out['reason'], out['reason']
    assert out['history']['restarts'] == []  # nothing recorded, nothing spent


@pytest.mark.parametrize('state, service, proof, words', [
    ('stuck', RUNNING_LONG, PROVEN, 'the systemd unit vllm: its main process 4242 (vllm serve) listens on 127.0.0.1:8000'),
    ('stuck', RUNNING_LONG, {'listens': True, 'published': ['0.0.0.0:8001 -> 8000/tcp'],
                             'unit': 'the container vllm-b', 'endpoint': '127.0.0.1:8001'},
     'the container vllm-b publishes 127.0.0.1:8001'),
    ('stuck', {'running': None}, {'unit': 'the restart command vllm-restart b', 'can_prove': False, 'assumed': True},
     'the inventory says that the restart command vllm-restart b restarts the server at http://127.0.0.1:8001'),
    ('down', STOPPED, {'unit': 'the systemd unit vllm-b', 'can_prove': True, 'endpoint': '127.0.0.1:8001'},
     'the systemd unit vllm-b does not run and nothing listens on 127.0.0.1:8001: starting it stops no server'),
])
def test_a_unit_shown_to_serve_the_url_is_restarted_at_once_and_the_decision_says_how(state, service, proof, words):
    out = decide(state, service, None, NOW, S, url=URL_B, url_proof=proof)
    assert out['action'] == RESTART, out['reason']
    assert words in out['reason']


# -- a restart that failed changed nothing: no grace, no cooldown; the budget counts it (issue 24) -------------------

def failed_history(ago):
    h = hist(ago)
    h['failed_restarts'] = [NOW - ago]
    h['last_step'] = {'step': RESTART, 'at': NOW - ago, 'state': 'stuck', 'outcome': 'failed', 'why': 'exit 5'}
    return h


def test_after_a_failed_restart_is_cleared_the_next_run_restarts_without_a_grace_that_nothing_began():
    out = decide('stuck', RUNNING_LONG, failed_history(44), NOW, S)
    assert out['action'] == RESTART, out['reason']
    assert 'restart 2 of at most 3' in out['reason'] and 'a failed one counted too' in out['reason']
    assert out['history']['failed_restarts'] == [NOW - 44]
    # A restart that worked 44 s ago still gives its grace.
    worked = decide('stuck', RUNNING_LONG, hist(44), NOW, S)
    assert worked['action'] == NONE and 'restarted 44s ago, within the start-up grace' in worked['reason'], worked


def test_a_failed_restart_is_no_hang_that_came_back():
    out = decide('stuck', RUNNING_LONG, failed_history(1200), NOW, S)
    assert out['action'] == RESTART, out['reason']  # not the ladder's next step: the restart never happened


def test_the_budget_says_that_it_counts_failed_restarts_too():
    h = hist(5000, 20000, 30000)
    h['failed_restarts'] = [NOW - 5000]
    out = decide('stuck', RUNNING_LONG, h, NOW, S)
    assert out['action'] == FAIL
    assert ('the restart budget is spent: 3 restart(s) attempted in the last 24h00m, 1 of them failed (the budget '
            'counts every restart attempted, a failed one too)') in out['reason'], out['reason']


# -- down does not stay "no action" forever (issue 24) -----------------------------------------------------------------

def runs(states_services, settings=None, **kwargs):
    history, outs = None, []
    for index, (state, service) in enumerate(states_services):
        out = decide(state, service, history, NOW + 300 * index, dict(S, **(settings or {})), **kwargs)
        history = out['history']
        outs.append(out)
    return outs


def test_a_crash_loop_inside_the_grace_asks_a_human_after_down_limit_runs_with_the_evidence():
    # systemd restarts it every few seconds: every run sees a new start, always inside the grace.
    loop = [('down', {'running': True, 'started_at': NOW + 300 * i - 5, 'status': 'activating/start'})
            for i in range(4)]
    outs = runs(loop)
    assert [o['action'] for o in outs] == [NONE, NONE, FAIL, FAIL], [o['reason'] for o in outs]
    assert outs[2]['evidence'] is True
    assert outs[2]['reason'].startswith('down 3 runs in a row and not restarted (down, but the service has been '
                                        'running for 5s, within the start-up grace')
    assert "a human must look at the service's log in the evidence" in outs[2]['reason']


def test_one_load_inside_the_grace_is_counted_once():
    loading = [('down', {'running': True, 'started_at': NOW - 5, 'status': 'active/running'})] * 3
    outs = runs(loading, settings={'startup_grace': 3600})
    assert [o['action'] for o in outs] == [NONE, NONE, NONE], [o['reason'] for o in outs]
    assert outs[-1]['history']['down_streak'] == 1


def test_a_down_the_service_manager_cannot_tell_escalates_and_any_other_verdict_starts_the_count_over():
    unknown = ('down', {'running': None, 'status': 'cannot be asked (no status_command)'})
    outs = runs([unknown, unknown, ('idle', RUNNING_LONG), unknown, unknown, unknown])
    assert [o['action'] for o in outs] == [NONE, NONE, NONE, NONE, NONE, FAIL], [o['reason'] for o in outs]
    assert runs([unknown] * 3, settings={'down_limit': 5})[-1]['action'] == NONE


def test_a_paused_watchdog_never_escalates_a_down_server():
    unknown = ('down', {'running': None, 'status': '?'})
    assert [o['action'] for o in runs([unknown] * 4, paused=True)] == [NONE] * 4


def test_the_unknown_streak_asks_for_the_evidence():
    out = decide('unknown', RUNNING_LONG, hist(streak=2), NOW, S)
    assert out['action'] == FAIL and out['evidence'] is True
    assert decide('unknown', RUNNING_LONG, hist(streak=0), NOW, S)['evidence'] is False


def test_down_limit_is_a_setting_in_range():
    assert invalid_settings(dict(S, down_limit=0)) == ['down_limit must be a number at least 1 and at most 100000, got 0']


def test_a_module_run_alone_names_its_own_options():
    """Without the role's setting_prefix the reasons name the gate's options (reboot, rehang_window,
    assume_url_is_service), never a role variable."""
    bare = dict((k, v) for k, v in S.items() if k != 'setting_prefix')
    out = decide('stuck', RUNNING_LONG, restarted(1800), NOW, bare)
    assert out['action'] == FAIL and 'the next step, a host reboot, is off (reboot)' in out['reason'], out['reason']
    out = decide('stuck', RUNNING_LONG, None, NOW, bare, url=URL, url_proof=dict(UNKNOWN, can_prove=False))
    assert out['action'] == FAIL and 'say so with assume_url_is_service: true' in out['reason'], out['reason']
    assert 'vllm_watchdog' not in out['reason']
