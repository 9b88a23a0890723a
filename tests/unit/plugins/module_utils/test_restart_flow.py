"""The one place that performs a restart (_restart.perform), step by step, with its world injected: the commands a fake
runner answers, a meminfo file of the test's, a clock that moves only when the flow sleeps. What the module adds (its
options, its client) is tested through the module in test_restart_module.py and the integration tier."""

import json

import pytest

from ansible_collections.modelops.vllm.plugins.module_utils import _restart

KEY = 'sk-restart-flow-secret'
GIB_KB = 1024 * 1024


class World(object):
    """The commands' answers (argv head -> (rc, stdout, stderr)), the calls in order, a clock moved by sleeps, and the
    host's MemAvailable, which a command may change (a stop frees the memory after ``frees_after`` polls)."""

    def __init__(self, tmp_path, available_gib, answers=None):
        self.calls, self.envs, self.now, self.answers = [], [], 1000.0, answers or {}
        self.meminfo = tmp_path / 'meminfo'
        self.set_available(available_gib)

    def set_available(self, gib):
        self.meminfo.write_text('MemTotal:       %d kB\nMemFree:        1024 kB\nMemAvailable:   %d kB\n'
                                % (128 * GIB_KB, int(gib * GIB_KB)))

    def run(self, argv, timeout=None, env=None):
        self.calls.append(list(argv))
        self.envs.append(env)
        return self.answers.get(' '.join(argv[:2]), (0, '', ''))

    def sleep(self, seconds):
        self.now += seconds

    def clock(self):
        return self.now


def params(world, **over):
    p = dict(action='restart', method='systemd', service='vllm', compose_project_dir=None, restart_command=None,
             environment={}, wait_ready=False, url='http://127.0.0.1:8000', model=None, old_start_time=None,
             old_reading=None, release_memory=True, meminfo=str(world.meminfo), memory_baseline=None,
             setting_prefix='vllm_watchdog_', command_timeout=60.0, ready_timeout=600.0, ready_delay=5.0,
             metrics_timeout=5.0, memory_threshold=0, memory_fraction=0.9, memory_timeout=30.0, memory_delay=1.0)
    p.update(over)
    return p


def perform(world, p):
    commands, split = _restart.commands_of(p)
    return _restart.perform(p, commands, split, None, [KEY], run=world.run, sleep=world.sleep, clock=world.clock)


def test_a_restart_that_frees_the_memory_stops_waits_then_starts(tmp_path):
    world = World(tmp_path, available_gib=100)
    failed, result = perform(world, params(world, memory_threshold=64 * 1024))
    assert failed is None, failed
    assert world.calls == [['systemctl', 'stop', 'vllm'], ['systemctl', 'start', 'vllm']]
    assert result['changed'] is True and result['ready'] is None
    assert [r['argv'] for r in result['commands']] == world.calls
    assert result['memory']['released'] is True and result['memory']['threshold_kb'] == 64 * GIB_KB
    assert result['memory']['threshold'].startswith('vllm_watchdog_memory_threshold')  # the caller's word for it


def test_memory_that_does_not_come_back_leaves_vllm_stopped_and_says_so_within_its_time(tmp_path):
    world = World(tmp_path, available_gib=10)
    failed, result = perform(world, params(world, memory_threshold=64 * 1024))
    assert world.calls == [['systemctl', 'stop', 'vllm']]  # never started into memory the host does not have
    assert 'vLLM is NOT started' in failed and 'vllm_watchdog_memory_threshold' in failed, failed
    assert result['memory']['released'] is False and result['changed'] is True
    assert 1000.0 + 30.0 <= world.now <= 1000.0 + 30.0 + 1.0  # the memory_timeout, by the injected clock


def test_a_stop_that_fails_is_followed_by_the_start_and_fails_the_restart(tmp_path):
    world = World(tmp_path, available_gib=100, answers={'systemctl stop': (1, '', 'Job for vllm.service failed')})
    failed, result = perform(world, params(world))
    assert world.calls == [['systemctl', 'stop', 'vllm'], ['systemctl', 'start', 'vllm']]
    assert 'systemctl stop vllm exited 1' in failed and 'the start was run anyway' in failed, failed
    assert result['changed'] is True and 'memory' not in result


def test_a_plain_restart_stops_at_the_first_command_that_fails(tmp_path):
    world = World(tmp_path, available_gib=100, answers={'systemctl daemon-reload': (1, '', 'Access denied')})
    failed, result = perform(world, params(world, action='upgrade', release_memory=False))
    assert world.calls == [['systemctl', 'daemon-reload']]  # never a restart on the old unit
    assert failed.endswith('the commands after it were not run'), failed
    assert [r['rc'] for r in result['commands']] == [1]


def test_a_stop_alone_waits_for_the_memory_and_says_when_it_did_not_come_back(tmp_path):
    world = World(tmp_path, available_gib=10)
    failed, result = perform(world, params(world, action='stop', memory_threshold=64 * 1024))
    assert world.calls == [['systemctl', 'stop', 'vllm']]
    assert failed.startswith('stopped, and the memory did not come back (') and failed.endswith('): not started'), \
        failed
    world.set_available(100)
    failed, result = perform(world, params(world, action='stop', memory_threshold=64 * 1024))
    assert failed is None and result['memory']['released'] is True


def test_a_secret_in_what_a_command_prints_is_masked_in_the_result_and_the_message(tmp_path):
    world = World(tmp_path, available_gib=100,
                  answers={'systemctl stop': (1, 'token %s' % KEY, 'bad key %s' % KEY)})
    failed, result = perform(world, params(world))
    text = json.dumps(result) + failed
    assert KEY not in text and '********' in text, text


def test_the_environment_option_reaches_every_command_over_this_process_s(tmp_path, monkeypatch):
    monkeypatch.setenv('MODELOPS_FLOW_TEST', 'inherited')
    world = World(tmp_path, available_gib=100)
    perform(world, params(world, environment={'VLLM_USE_V1': 1}))
    assert [env['VLLM_USE_V1'] for env in world.envs] == ['1', '1']
    assert all(env['MODELOPS_FLOW_TEST'] == 'inherited' for env in world.envs)
    world = World(tmp_path, available_gib=100)
    perform(world, params(world))
    assert world.envs == [None, None]  # no option: inherited as it is


@pytest.mark.parametrize('ready, written', [({'ok': True}, True), ({'ok': False}, False), (None, False)])
def test_the_baseline_is_kept_only_after_a_start_that_came_up_ready(tmp_path, ready, written):
    world = World(tmp_path, available_gib=100)
    baseline = tmp_path / 'vllm.memory.json'
    p = params(world, memory_baseline=str(baseline))
    assert _restart.keep_baseline(p, {'available_kb': 90 * GIB_KB}, ready) is written
    assert baseline.exists() is written
    if written:
        record = json.loads(baseline.read_text())
        assert record['available_kb'] == 90 * GIB_KB and record['total_kb'] == 128 * GIB_KB, record


def test_a_memory_wait_that_breaks_starts_vllm_rather_than_leave_it_stopped(tmp_path, monkeypatch):
    world = World(tmp_path, available_gib=100)

    def broken(*args, **kwargs):
        raise OSError('no such meminfo')
    monkeypatch.setattr(_restart._host, 'wait_memory', broken)
    failed, result = perform(world, params(world, memory_threshold=64 * 1024))
    assert failed is None and world.calls == [['systemctl', 'stop', 'vllm'], ['systemctl', 'start', 'vllm']]
    assert result['memory']['released'] is True and 'the wait for the memory failed (OSError' in result['memory']['why']


def test_problems_are_said_before_anything_runs():
    p = {'action': 'restart', 'wait_ready': True, 'url': None, 'command_timeout': 60.0, 'ready_timeout': 600.0,
         'ready_delay': 5.0, 'metrics_timeout': 5.0, 'memory_threshold': 0, 'memory_fraction': 2.0,
         'memory_timeout': 30.0, 'memory_delay': 1.0}
    found = _restart.problems(p)
    assert found[0].startswith('memory_fraction must be ') and found[-1].startswith('url is required'), found
    assert _restart.problems(dict(p, action='stop', memory_fraction=0.9)) == []  # a stop waits for nothing
