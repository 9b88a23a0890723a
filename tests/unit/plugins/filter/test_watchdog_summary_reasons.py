"""The summary's reasons (AWX's set_stats vllm_watchdog_reasons): why, in one line, for every instance the watchdog
restarted, rebooted, asks a human about, or could not reach; nothing for the healthy ones."""

from ansible_collections.modelops.vllm.plugins.filter._watchdog_summary import lost_result, watchdog_summary
from ansible_collections.modelops.vllm.plugins.module_utils._results import watchdog_results

INSTANCES = [{'name': 'vllm', 'url': 'http://127.0.0.1:8000'}]


def gate(state, action, reason, decision, **more):
    return {'instances': [dict({'name': 'vllm', 'state': state, 'action': action, 'reason': reason,
                                'decision': decision}, **more)]}


def test_a_restart_says_the_verdict_its_reason_what_the_watchdog_did_and_what_came_of_it():
    restarted = watchdog_results(gate('stuck', 'restart', '2 request(s) in flight and nothing moved',
                                      'restart: stuck (restart 1 of at most 3 in 24h00m)',
                                      evidence_file='/var/lib/vllm-watchdog/evidence/vllm-20261201T031000Z.json',
                                      evidence='py-spy 3 stack(s)'),
                                 'gb10-01', INSTANCES, {'vllm': {'after': 'idle', 'after_reason': 'answered'}})
    busy = watchdog_results(gate('busy', 'none', '3 in flight, moving', 'busy: nothing to do'), 'gb10-02', INSTANCES)
    human = watchdog_results(gate('unknown', 'fail', '/metrics timed out', 'the check could not judge the server 3 '
                                  'runs in a row'), 'gb10-03', INSTANCES)
    summary = watchdog_summary(restarted + busy + human + [lost_result('gb10-04')])
    assert summary['reasons'] == {
        'gb10-01/vllm': 'stuck: 2 request(s) in flight and nothing moved - watchdog: restarted (restart: stuck (restart 1 '
                        'of at most 3 in 24h00m)) -> now idle [evidence '
                        '/var/lib/vllm-watchdog/evidence/vllm-20261201T031000Z.json]',
        'gb10-03/vllm': 'unknown: /metrics timed out - watchdog: NEEDS A HUMAN (the check could not judge the server 3 '
                        'runs in a row)',
        'gb10-04/*': 'gb10-04/*: unreachable - watchdog: host UNREACHABLE or failed before a verdict, not restarted (see '
                     'the task that failed for this host above)'}
    # The same instances as the lists name, and none of the healthy ones.
    assert set(summary['reasons']) == set(summary['restarted'] + summary['failed'])


def test_a_reason_is_one_bounded_line_whatever_the_verdict_says():
    long = watchdog_results(gate('stuck', 'fail', 'line\n' * 500, 'x' * 5000), 'gb10-01', INSTANCES)
    reason = watchdog_summary(long)['reasons']['gb10-01/vllm']
    assert '\n' not in reason and len(reason) < 1000


def test_an_unreachable_host_s_instances_say_why():
    gone = watchdog_results({}, 'gb10-05', INSTANCES, unreachable='ssh: connect to host 10.0.0.5 port 22: timed out')
    reason = watchdog_summary(gone)['reasons']['gb10-05/vllm']
    assert reason.startswith('unreachable: the host does not answer over SSH (ssh: connect to host 10.0.0.5 port 22: '
                             'timed out) - watchdog: host UNREACHABLE (a host that answers nothing'), reason
