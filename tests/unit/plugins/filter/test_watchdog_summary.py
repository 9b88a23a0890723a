"""The watchdog's summary and results: a textfile that could not be written is said, per host, never dropped."""

from ansible_collections.modelops.vllm.plugins.filter._watchdog_summary import watchdog_summary
from ansible_collections.modelops.vllm.plugins.module_utils._results import watchdog_results

WHY = ('the textfile /nope/vllm_watchdog.prom could not be written ([Errno 2] No such file or directory): '
       'Prometheus gets no vllm_watchdog_* metric from this host, so no alert can fire on it')


def gate(textfile_error=None):
    return {'instances': [{'name': 'chat', 'state': 'idle', 'action': 'none', 'decision': 'healthy'},
                          {'name': 'embed', 'state': 'busy', 'action': 'none', 'decision': 'healthy'}],
            'textfile_error': textfile_error}


INSTANCES = [{'name': 'chat', 'url': 'http://127.0.0.1:8000'}, {'name': 'embed', 'url': 'http://127.0.0.1:8001'}]


def test_every_result_of_the_host_carries_its_textfile_error():
    results = watchdog_results(gate(WHY), 'gb10-01', INSTANCES)
    assert [r['textfile_error'] for r in results] == [WHY, WHY]
    assert [r['failed'] for r in results] == [False, False]  # the instances are fine; the host's file is not
    assert [r['textfile_error'] for r in watchdog_results(gate(), 'gb10-01', INSTANCES)] == [None, None]


def test_the_summary_has_a_line_per_host_whose_textfile_was_not_written_and_names_it_in_the_headline():
    results = watchdog_results(gate(WHY), 'gb10-01', INSTANCES) + watchdog_results(gate(), 'gb10-02', INSTANCES)
    summary = watchdog_summary(results)
    assert summary['textfile_errors'] == ['gb10-01: %s' % WHY]
    assert summary['lines'][-1] == 'gb10-01: watchdog: TEXTFILE NOT WRITTEN - %s' % WHY
    assert len(summary['lines']) == 5  # four instances, one host's textfile
    assert summary['headline'].endswith('; textfile not written: gb10-01')
    assert summary['counts'] == {'idle': 2, 'busy': 2}  # counted once per instance, as before


def test_one_textfile_mistake_on_many_hosts_is_one_line_or_none_when_the_role_fails_for_it():
    hosts = ['gb10-%02d' % n for n in range(1, 8)]
    results = [r for host in hosts for r in watchdog_results(gate(WHY), host, INSTANCES)]
    summary = watchdog_summary(results)
    assert summary['lines'][len(results):] == [
        'gb10-01, gb10-02, gb10-03, gb10-04, gb10-05 and 2 more (7 hosts): watchdog: TEXTFILE NOT WRITTEN - %s' % WHY]
    # The role fails those hosts with that sentence (vllm_watchdog_textfile_required): the summary does not say it too.
    quiet = watchdog_summary(results, textfile_required=True)
    assert len(quiet['lines']) == len(results)
    assert quiet['headline'].endswith('textfile not written: %s' % ', '.join(hosts))


def test_a_summary_where_every_textfile_was_written_says_nothing_of_it():
    summary = watchdog_summary(watchdog_results(gate(), 'gb10-02', INSTANCES))
    assert summary['textfile_errors'] == [] and 'textfile' not in summary['headline']
    assert len(summary['lines']) == 2


MEMORY = ('the memory did not come back after vLLM stopped: MemAvailable is 9.0 GiB, below '
          'the 97.7 GiB it must be back to after 300 s. vLLM is NOT started')


def stopped_restart(escalation, escalated):
    decided = {'instances': [{'name': 'chat', 'state': 'stuck', 'action': 'restart', 'decision': 'restart: stuck'}]}
    done = {'chat': {'error': MEMORY, 'escalated': escalated, 'escalation': escalation}}
    return watchdog_results(decided, 'gb10-01', INSTANCES[:1], done)[0]


def test_a_restart_stopped_for_the_memory_says_what_failed_once_then_the_next_step():
    human = stopped_restart('%s; the next step, a host reboot, is off (vllm_watchdog_reboot): a human must look'
                            % MEMORY, 'fail')
    assert human['action'] == 'restart stopped' and human['failed'] and not human['restarted'], human
    assert human['decision'].count('MemAvailable is 9.0 GiB') == 1, human['decision']
    assert human['decision'].startswith('restart: stuck; then: ') and 'a host reboot, is off' in human['decision']
    # A next step whose reason does not name the failure: both are said.
    other = stopped_restart('the restart budget is spent', 'fail')
    assert other['decision'] == 'restart: stuck; %s; then: the restart budget is spent' % MEMORY, other['decision']
    assert other['line'].count('MemAvailable is 9.0 GiB') == 1
