"""The restart module's stop / wait for the memory / start steps (_service.stop_then_start), each outcome without a
service manager: commands answered by a table, what follows the stop given."""

import pytest

from ansible_collections.modelops.vllm.plugins.module_utils._service import commands_failed, stop_then_start

STOPS = [['systemctl', 'stop', 'vllm']]
STARTS = [['systemctl', 'start', 'vllm']]
RELEASED = {'released': True, 'why': 'back', 'threshold': '90% of 100 GiB'}
KEPT = {'released': False, 'why': 'MemAvailable 3 GiB after 300 s', 'threshold': 'vllm_watchdog_memory_threshold, 100 GiB'}


class Runner(object):
    """rc per command (0 unless said), and the commands in the order they ran."""

    def __init__(self, rcs=None):
        self.rcs, self.ran = rcs or {}, []

    def __call__(self, argv):
        self.ran.append(list(argv))
        rc = self.rcs.get(' '.join(argv), 0)
        return rc, '', 'Job for vllm.service failed.' if rc else ''


def follows(still=None, memory=None):
    seen = []

    def after_stop():
        seen.append(True)
        return still, memory
    after_stop.seen = seen
    return after_stop


def test_stop_the_memory_back_then_start():
    run, after = Runner(), follows(memory=RELEASED)
    records, why, memory = stop_then_start(run, STOPS, STARTS, after, url='http://127.0.0.1:8000')
    assert why is None and memory is RELEASED and after.seen
    assert run.ran == STOPS + STARTS and [r['argv'] for r in records] == STOPS + STARTS


def test_the_memory_not_back_is_no_start():
    run = Runner()
    records, why, memory = stop_then_start(run, STOPS, STARTS, follows(memory=KEPT), meminfo='/proc/meminfo')
    assert run.ran == STOPS and memory is KEPT
    assert why == ('the memory did not come back after vLLM stopped: MemAvailable 3 GiB after 300 s. vLLM is NOT started '
                   '(it would start into memory the host does not have); it stays stopped (read from /proc/meminfo; the '
                   'threshold: vllm_watchdog_memory_threshold, 100 GiB)')


def test_a_stop_that_failed_is_followed_by_the_start_and_is_a_failed_restart():
    run, after = Runner({'systemctl stop vllm': 1}), follows(memory=RELEASED)
    records, why, memory = stop_then_start(run, STOPS, STARTS, after)
    assert run.ran == STOPS + STARTS and not after.seen and memory is None
    assert why == ('the restart failed: systemctl stop vllm exited 1: Job for vllm.service failed.; the start was run '
                   'anyway, so that a server the stop left half-stopped is not left down: systemctl start vllm exited 0')
    assert [r['rc'] for r in records] == [1, 0]


def test_the_process_from_before_still_answering_is_started_again_and_a_failed_restart():
    run = Runner()
    records, why, memory = stop_then_start(run, STOPS, STARTS, follows(still='process_start_time_seconds unchanged'),
                                           url='http://127.0.0.1:8001')
    assert run.ran == STOPS + STARTS and memory is None
    assert why == ('the restart failed: after systemctl stop vllm the process from before the restart still answers at '
                   'http://127.0.0.1:8001 (process_start_time_seconds unchanged), so what it stopped is not that server; '
                   'it was started again (systemctl start vllm)')


def test_a_start_that_failed_is_said_with_its_command():
    run = Runner({'systemctl start vllm': 5})
    records, why, memory = stop_then_start(run, STOPS, STARTS, follows(memory=RELEASED))
    assert run.ran == STOPS + STARTS and memory is RELEASED
    assert why == commands_failed(records[-1]) == ('the restart failed: systemctl start vllm exited 5: Job for '
                                                   'vllm.service failed.; the commands after it were not run')


@pytest.mark.parametrize('stops', [[['docker', 'stop', 'vllm'], ['docker', 'rm', 'vllm']]])
def test_the_commands_after_a_failed_stop_are_not_run_but_the_start_is(stops):
    run = Runner({'docker stop vllm': 1})
    records, why, memory = stop_then_start(run, stops, [['docker', 'start', 'vllm']], follows(memory=RELEASED))
    assert run.ran == [['docker', 'stop', 'vllm'], ['docker', 'start', 'vllm']] and why.startswith('the restart failed')
