"""The service managers' commands and answers, table-driven; commands stop at the first failure."""

import json

import pytest

from ansible_collections.modelops.vllm.plugins.module_utils._service import (
    ServiceError,
    describe_failure,
    logs_command,
    parse_docker_state,
    parse_ports,
    parse_systemd_show,
    planned_commands,
    published_ports,
    restart_commands,
    run_argv,
    run_commands,
    service_status,
    stop_start_commands,
    target,
)

COMPOSE = ['docker', 'compose', '--project-directory', '/srv/vllm']


@pytest.mark.parametrize('method, upgrade, expected', [
    ('systemd', False, [['systemctl', 'restart', 'vllm']]),
    ('systemd', True, [['systemctl', 'daemon-reload'], ['systemctl', 'restart', 'vllm']]),
    ('docker', False, [['docker', 'restart', 'vllm']]),
    ('docker', True, [['my-recreate', 'vllm']]),
    ('compose', False, [COMPOSE + ['restart', 'vllm']]),
    ('compose', True, [COMPOSE + ['up', '-d', '--force-recreate', '--no-deps', 'vllm']]),
    ('command', False, [['my-recreate', 'vllm']]),
    ('command', True, [['my-recreate', 'vllm']]),
])
def test_restart_commands(method, upgrade, expected):
    assert restart_commands(method, 'vllm', '/srv/vllm', ['my-recreate', 'vllm'], upgrade=upgrade) == expected


@pytest.mark.parametrize('method, kwargs', [
    ('systemd', {}), ('docker', {}), ('compose', {'service': 'vllm'}), ('command', {}), ('docker', {'upgrade': True}),
    ('nonsense', {'service': 'vllm'}),
])
def test_incomplete_settings_are_refused(method, kwargs):
    with pytest.raises(ServiceError):
        restart_commands(method, **kwargs)


@pytest.mark.parametrize('rc, out, expected', [
    (0, 'ActiveState=active\nSubState=running\nExecMainStartTimestamp=@1796004614\nMainPID=4242\n',
     {'running': True, 'started_at': '@1796004614', 'status': 'active/running', 'main_pid': 4242}),
    (0, 'ActiveState=activating\nSubState=auto-restart\nExecMainStartTimestamp=@1796004614\nMainPID=0\n',
     {'running': True, 'started_at': None, 'status': 'activating/auto-restart', 'main_pid': None}),
    (0, 'ActiveState=failed\nSubState=failed\nExecMainStartTimestamp=\n',
     {'running': False, 'started_at': None, 'status': 'failed/failed', 'main_pid': None}),
    (0, 'ActiveState=active\nSubState=running\nMainPID=junk\n',
     {'running': True, 'started_at': None, 'status': 'active/running', 'main_pid': None}),
    (1, '', {'running': None, 'started_at': None, 'status': 'systemctl show failed: boom'}),
    (0, 'garbage', {'running': None, 'started_at': None, 'status': 'systemctl show failed: boom'}),
])
def test_systemd_show(rc, out, expected):
    assert parse_systemd_show(rc, out, 'boom') == expected


@pytest.mark.parametrize('rc, state, expected', [
    (0, {'Status': 'running', 'Running': True, 'StartedAt': '2026-11-30T02:10:52.1Z', 'Pid': 4242},
     {'running': True, 'started_at': '2026-11-30T02:10:52.1Z', 'status': 'running', 'main_pid': 4242}),
    (0, {'Status': 'restarting', 'Running': True, 'Restarting': True, 'StartedAt': 'x'},
     {'running': True, 'started_at': None, 'status': 'restarting', 'main_pid': None}),
    (0, {'Status': 'exited', 'Running': False, 'StartedAt': '2026-11-30T02:10:52Z', 'Pid': 4242},
     {'running': False, 'started_at': '2026-11-30T02:10:52Z', 'status': 'exited', 'main_pid': None}),
    # Docker has no such container ("Error: No such object: NAME", exit 1): it does not exist, it is not running.
    (1, None, {'running': False, 'started_at': None, 'exists': False, 'status': 'no such container: no such container'}),
    (0, 'not json', {'running': None, 'started_at': None, 'status': 'docker inspect failed: no such container'}),
])
def test_docker_state(rc, state, expected):
    out = state if isinstance(state, str) else json.dumps(state) if state else ''
    assert parse_docker_state(rc, out, 'no such container') == expected


@pytest.mark.parametrize('method, expected', [
    ('systemd', ([['systemctl', 'stop', 'vllm']], [['systemctl', 'start', 'vllm']])),
    ('docker', ([['docker', 'stop', 'vllm']], [['docker', 'start', 'vllm']])),
    ('compose', ([['docker', 'compose', '--project-directory', '/srv/vllm', 'stop', 'vllm']],
                 [['docker', 'compose', '--project-directory', '/srv/vllm', 'start', 'vllm']])),
    ('command', None),
])
def test_stop_start_commands(method, expected):
    assert stop_start_commands(method, 'vllm', '/srv/vllm') == expected


def test_compose_asks_ps_then_inspects_the_container():
    calls = []

    def run(argv):
        calls.append(argv)
        if argv[-2:] == ['--quiet', 'vllm']:
            return 0, 'abc123\n', ''
        return 0, json.dumps({'Status': 'running', 'Running': True, 'StartedAt': 'T'}), ''

    status = service_status(run, 'compose', 'vllm', '/srv/vllm')
    assert status['running'] is True
    assert calls[1] == ['docker', 'inspect', '--format', '{{json .State}}', 'abc123']


def test_a_service_manager_that_does_not_answer_cannot_say():
    status = service_status(lambda argv: (None, '', 'still running after 30 s (stopped)'), 'systemd', 'vllm')
    assert status['running'] is None and 'did not answer' in status['status']


def test_command_method_without_status_command_cannot_say():
    assert service_status(lambda argv: (0, '', ''), 'command', None, None, None)['running'] is None


def test_commands_stop_at_the_first_failure():
    ran = []

    def run(argv):
        ran.append(argv)
        return (1, '', 'Failed to reload daemon') if argv[1] == 'daemon-reload' else (0, '', '')

    records, failed = run_commands(run, restart_commands('systemd', 'vllm', upgrade=True))
    assert ran == [['systemctl', 'daemon-reload']]
    assert failed['rc'] == 1 and len(records) == 1
    assert describe_failure(failed) == 'systemctl daemon-reload exited 1: Failed to reload daemon'


def test_run_argv_real_processes():
    assert run_argv(['true'])[0] == 0
    assert run_argv(['false'])[0] == 1
    rc, dummy, err = run_argv(['/nonexistent/command'])
    assert rc is None and 'No such file' in err
    rc, dummy, err = run_argv(['sleep', '5'], timeout=0.2)
    assert rc is None and 'still running' in err


def test_logs_commands():
    assert logs_command('systemd', 'vllm', lines=50)[:4] == ['journalctl', '--unit', 'vllm', '--lines']
    assert logs_command('docker', 'vllm', lines=50) == ['docker', 'logs', '--tail', '50', 'vllm']
    assert logs_command('command', None, command=None) is None


def test_a_unit_systemd_does_not_know_does_not_exist():
    """systemctl show of an unknown unit exits 0 and says inactive/dead; LoadState=not-found is what tells."""
    out = 'ActiveState=inactive\nSubState=dead\nExecMainStartTimestamp=\nMainPID=0\nLoadState=not-found\n'
    assert parse_systemd_show(0, out) == {'running': False, 'started_at': None, 'exists': False, 'main_pid': None,
                                          'status': 'no such unit (systemctl show: LoadState=not-found)'}
    loaded = parse_systemd_show(0, out.replace('not-found', 'loaded'))
    assert loaded['running'] is False and 'exists' not in loaded


@pytest.mark.parametrize('rc, out, expected', [
    (0, '{"8000/tcp": [{"HostIp": "0.0.0.0", "HostPort": "8001"}, {"HostIp": "::", "HostPort": "8001"}]}',
     [('0.0.0.0', 8001, '8000/tcp'), ('::', 8001, '8000/tcp')]),
    (0, '{"8000/tcp": null}', []),  # exposed, not published
    (0, 'null', []),  # host network, or nothing published
    (0, '{"8000/tcp": [{"HostPort": "x"}, "junk"]}', []),
    (0, 'not json', None), (1, '', None), (0, '[1]', None),
])
def test_published_ports(rc, out, expected):
    assert parse_ports(rc, out) == expected
    calls = []
    assert published_ports(lambda argv: calls.append(argv) or (rc, out, ''), 'vllm-b') == expected
    assert calls == [['docker', 'inspect', '--format', '{{json .NetworkSettings.Ports}}', 'vllm-b']]


@pytest.mark.parametrize('method, settings, release, words, commands', [
    ('systemd', {'service': 'vllm-b'}, True, 'the systemd unit vllm-b',
     'systemctl stop vllm-b; then, once the memory is back, systemctl start vllm-b'),
    ('systemd', {'service': 'vllm-b'}, False, 'the systemd unit vllm-b', 'systemctl restart vllm-b'),
    ('docker', {'service': 'vllm-b'}, True, 'the container vllm-b',
     'docker stop vllm-b; then, once the memory is back, docker start vllm-b'),
    ('compose', {'service': 'b', 'compose_project_dir': '/srv/v'}, False, 'the compose service b of /srv/v',
     'docker compose --project-directory /srv/v restart b'),
    ('command', {'command': ['vllm-restart', 'b']}, True, 'the restart command vllm-restart b', 'vllm-restart b'),
    ('command', {}, True, 'the restart command ?', 'none (restart method command needs restart_command)'),
])
def test_what_a_restart_acts_on_and_its_commands_in_words(method, settings, release, words, commands):
    assert target(method, **settings) == words
    assert planned_commands(method, release_memory=release, **settings) == commands
