"""modelops.vllm.restart and its steps (module_utils/_restart): what each action runs for every method, with and
without the memory wait, and its range check (a crash here is a failed restart of every host that uses the method)."""

import json
import os
import subprocess
import sys

import pytest

from ansible_collections.modelops.vllm.plugins.module_utils._service import METHODS
from ansible_collections.modelops.vllm.plugins.module_utils import _restart as restart

from tests.support.paths import COLLECTIONS, REPO

SETTINGS = {'service': 'vllm', 'compose_project_dir': '/srv/vllm', 'restart_command': ['my-restart']}


def params(**over):
    return dict(dict(SETTINGS, action='restart', method='systemd', release_memory=False), **over)


@pytest.mark.parametrize('method', list(METHODS))
@pytest.mark.parametrize('release_memory', [False, True])
@pytest.mark.parametrize('action', ['restart', 'upgrade', 'wait_ready'])
def test_every_method_and_action_gives_its_commands(method, release_memory, action):
    commands, split = restart.commands_of(params(method=method, release_memory=release_memory, action=action))
    if action == 'wait_ready':
        assert (commands, split) == ([], None)
        return
    assert commands and all(isinstance(argv, list) and argv for argv in commands)
    if split is not None:  # stop, wait for the memory, start: only a restart with the wait, of a method that can
        assert release_memory and action == 'restart' and method != 'command'
        assert commands == split[0] + split[1]
    else:
        assert not (release_memory and action == 'restart' and method != 'command')


@pytest.mark.parametrize('method', list(METHODS))
@pytest.mark.parametrize('action', ['stop', 'start'])
def test_a_stop_or_a_start_alone_is_that_half_of_the_method_and_your_own_command_has_none(method, action):
    """A rank of an instance across hosts is stopped and started on its own host, one half at a time."""
    if method == 'command':
        with pytest.raises(restart.ServiceError, match='the command method has no %s of its own' % action):
            restart.commands_of(params(method=method, action=action))
        return
    stop_then_start, split = restart.commands_of(params(method=method, action='restart', release_memory=True))
    commands, none = restart.commands_of(params(method=method, action=action, release_memory=True))
    assert none is None and commands == (split[0] if action == 'stop' else split[1]) and commands
    assert all(word in ' '.join(commands[0]) for word in (action, 'vllm'))


def test_the_command_method_with_the_memory_wait_is_one_command():
    """Your own command cannot be split into a stop and a start: it runs as it is (a crash before: 'NoneType' object
    is not subscriptable, every command-method restart of the watchdog failed)."""
    assert restart.commands_of(params(method='command', release_memory=True)) == ([['my-restart']], None)


def test_a_number_out_of_range_is_one_sentence():
    ok = dict(command_timeout=600, ready_timeout=900, ready_delay=10, metrics_timeout=10, memory_threshold=0,
              memory_fraction=0.9, memory_timeout=300, memory_delay=5)
    assert restart.invalid_settings(ok) == []
    assert restart.invalid_settings(dict(ok, memory_fraction=1.5)) == [
        'memory_fraction must be greater than 0 and at most 1, got 1.5']


def test_check_mode_of_a_command_restart_with_the_memory_wait_names_the_command():
    """The module as Ansible runs it: its arguments on stdin, in check mode."""
    args = {'ANSIBLE_MODULE_ARGS': {'method': 'command', 'restart_command': ['my-restart'], 'release_memory': True,
                                    'wait_ready': False, '_ansible_check_mode': True}}
    proc = subprocess.run([sys.executable, os.path.join(REPO, 'plugins', 'modules', 'restart.py')],
                          input=json.dumps(args), capture_output=True, text=True, timeout=60, check=False,
                          env=dict(os.environ, PYTHONPATH=COLLECTIONS))
    result = json.loads(proc.stdout)
    assert not result.get('failed'), result
    assert [c['argv'] for c in result['commands']] == [['my-restart']], result
