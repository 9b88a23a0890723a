"""The local timer's pure parts: the settings its inventory gets (typed, the install's own left out), what it restarts,
and the timer's status in one line from what systemctl show prints."""

import os
import re

import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.modelops.vllm.plugins.filter._local_settings import local_settings
from ansible_collections.modelops.vllm.plugins.filter._local_status import local_status
from ansible_collections.modelops.vllm.plugins.plugin_utils import _local
from tests.support.paths import REPO


def test_the_watchdog_s_settings_are_taken_typed_and_the_rest_left():
    variables = {'vllm_url': 'http://127.0.0.1:8001', 'vllm_api_key': 'sk-1', 'vllm_check_interval': '2',
                 'vllm_watchdog_max_restarts': '5', 'vllm_watchdog_reboot': 'yes', 'vllm_watchdog_service': 'vllm-qwen',
                 # the install's own, a play setting, the history's, the rollout's, another collection's, Ansible's
                 'vllm_watchdog_state_dir': '/elsewhere', 'vllm_watchdog_become': True, 'vllm_local_user': 'x',
                 'vllm_history_since': '2d', 'vllm_rollout_serial': 1, 'ansible_host': '10.0.0.1', 'other': 1,
                 'vllm_check_hosts': 'gb10'}
    assert _local.settings(variables) == {
        'vllm_url': 'http://127.0.0.1:8001', 'vllm_api_key': 'sk-1', 'vllm_check_interval': 2.0,
        'vllm_watchdog_max_restarts': 5, 'vllm_watchdog_reboot': True, 'vllm_watchdog_service': 'vllm-qwen'}


def test_every_check_setting_the_watchdog_reads_goes_into_the_timer_s_inventory():
    # the freeze limit was once left out: the timer's watchdog judged a hang after 300 s whatever the install was told
    with open(os.path.join(REPO, 'roles', 'watchdog', 'defaults', 'main.yml')) as handle:
        read = set(re.findall(r'\b(vllm_check_[a-z_]+)\b', handle.read()))
    assert read and set(_local.CHECK_TIMINGS) == read
    assert _local.settings({'vllm_check_freeze_limit': '4'}) == {'vllm_check_freeze_limit': 4.0}


def test_a_value_that_does_not_validate_is_kept_as_given():
    assert _local.settings({'vllm_check_interval': 'soon'}) == {'vllm_check_interval': 'soon'}


@pytest.mark.parametrize('values, user, units, methods, groups, problems', [
    ({}, 'vllm-watchdog', ['vllm.service'], ['systemd'], [], 0),
    ({'vllm_watchdog_service': 'vllm-qwen.service'}, 'vllm-watchdog', ['vllm-qwen.service'], ['systemd'], [], 0),
    ({'vllm_watchdog_restart_method': 'docker'}, 'vllm-watchdog', [], ['docker'], ['docker'], 0),
    ({'vllm_watchdog_restart_method': 'command'}, 'vllm-watchdog', [], ['command'], [], 1),
    ({'vllm_watchdog_restart_method': 'command'}, 'root', [], ['command'], [], 0),
    ({'vllm_instances': [{'name': 'chat', 'service': 'vllm-chat'}, {'name': 'embed', 'service': 'vllm-embed'},
                         {'name': 'b', 'service': 'vllm-chat'}, {'name': 'c', 'restart_method': 'compose'}]},
     'vllm-watchdog', ['vllm-chat.service', 'vllm-embed.service'], ['systemd', 'compose'], ['docker'], 0),
    ({'vllm_watchdog_instances': ['not a dict']}, 'vllm-watchdog', ['vllm.service'], ['systemd'], [], 0),
])
def test_what_the_timer_restarts_and_what_its_user_needs(values, user, units, methods, groups, problems):
    found = _local.restarts(values, user)
    assert (found['units'], found['methods'], found['groups'], len(found['problems'])) == (units, methods, groups,
                                                                                           problems)


def test_the_filter_reads_the_host_s_variables():
    found = local_settings('localhost', {'localhost': {'vllm_url': 'http://127.0.0.1:8000', 'vllm_watchdog_service': 'v'}})
    assert found['settings'] == {'vllm_url': 'http://127.0.0.1:8000', 'vllm_watchdog_service': 'v'}
    assert found['units'] == ['v.service']
    with pytest.raises(AnsibleFilterError):
        local_settings('gb10', {})
    with pytest.raises(AnsibleFilterError):
        local_settings(['gb10'], {'gb10': {}})


TIMER = '''LoadState=loaded
UnitFileState=enabled
ActiveState=active
LastTriggerUSec=@1796095500
NextElapseUSecRealtime=@1796095800
'''
SERVICE = '''LoadState=loaded
ActiveState=inactive
Result=success
ExecMainStatus=0
ExecMainStartTimestamp=@1796095500
'''


def test_an_enabled_active_timer_whose_last_run_succeeded_is_ok():
    status = local_status(TIMER, SERVICE, 'vllm-watchdog')
    assert status == {'ok': True, 'why': '', 'line': 'vllm-watchdog.timer: enabled and active; the last run '
                      '2026-12-01T03:25:00Z (success); the next 2026-12-01T03:30:00Z'}


@pytest.mark.parametrize('timer, service, line', [
    ('LoadState=not-found\nUnitFileState=\nActiveState=inactive\n', '',
     'vllm-watchdog.timer is not installed on this host (ansible-playbook modelops.vllm.local_install installs it)'),
    (TIMER.replace('UnitFileState=enabled', 'UnitFileState=disabled'), SERVICE,
     'vllm-watchdog.timer: not enabled (disabled): it does not start at boot; systemctl enable --now '
     'vllm-watchdog.timer; the last run 2026-12-01T03:25:00Z (success); the next 2026-12-01T03:30:00Z'),
    (TIMER.replace('ActiveState=active', 'ActiveState=inactive').replace('@1796095800', 'n/a'),
     'LoadState=loaded\nResult=success\nExecMainStartTimestamp=\n',
     'vllm-watchdog.timer: not active (inactive): it runs nothing; systemctl start vllm-watchdog.timer; no run yet'),
    (TIMER, SERVICE.replace('Result=success', 'Result=exit-code').replace('ExecMainStatus=0', 'ExecMainStatus=2'),
     'vllm-watchdog.timer: its last run (2026-12-01T03:25:00Z) failed (exit-code, exit status 2): a human is needed, '
     'or the watchdog could not run; the lines below say why, journalctl -u vllm-watchdog.service says more; the last '
     'run 2026-12-01T03:25:00Z (exit-code); the next 2026-12-01T03:30:00Z'),
])
def test_a_timer_that_does_not_run_or_whose_last_run_failed_is_not_ok_and_says_what_to_do(timer, service, line):
    status = local_status(timer, service, 'vllm-watchdog')
    assert not status['ok'] and status['line'] == line


@pytest.mark.parametrize('value, said', [('@1796095500', '2026-12-01T03:25:00Z'), ('n/a', None), ('', None),
                                         ('@0', None), ('infinity', None), ('@nan', None), ('@9e99', None),
                                         ('Tue 2026-12-01 03:25:00 UTC', 'Tue 2026-12-01 03:25:00 UTC')])
def test_a_time_as_systemctl_prints_it(value, said):
    assert _local.when(value) == said


def test_show_reads_only_property_lines():
    assert _local.show('Id=a.timer\nnot a line\nLoadState=loaded\n=x\nWeird-Key=1\n') == {'Id': 'a.timer',
                                                                                          'LoadState': 'loaded'}
