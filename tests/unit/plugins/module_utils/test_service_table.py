"""The one table of restart methods (_service.TABLE): what each method is, what its settings need, and every list of
method names the collection must spell out for ansible-core (module docs and specs, role argument specs) equal to it."""

import ast
import glob
import os

import pytest
import yaml

from ansible_collections.modelops.vllm.plugins.filter._rollout_problems import rollout_problems
from ansible_collections.modelops.vllm.plugins.filter._watchdog_instances import invalid
from ansible_collections.modelops.vllm.plugins.module_utils._service import (
    METHODS,
    TABLE,
    ServiceError,
    lookup,
    problems,
    restart_commands,
    slots,
    stop_start_commands,
)
from ansible_collections.modelops.vllm.plugins.modules import restart as restart_module
from ansible_collections.modelops.vllm.plugins.modules import watchdog_gate
from tests.support.paths import REPO

CONTAINER = "the container's process, docker inspect .State.Pid"


def test_the_names_are_the_table_in_its_order():
    assert METHODS == ('systemd', 'docker', 'compose', 'command')
    assert METHODS == tuple(one.name for one in TABLE)
    assert [lookup(name) for name in METHODS] == list(TABLE)


@pytest.mark.parametrize('name', ['nonsense', None, '', 'SYSTEMD', ['systemd'], {'a': 1}])
def test_anything_else_is_no_method(name):
    assert lookup(name) is None


@pytest.mark.parametrize('name, needs, upgrade_needs, splits, main_pid, cannot_ask', [
    ('systemd', ['service'], [], True, 'systemd MainPID', 'no service'),
    ('docker', ['service'], ['command'], True, CONTAINER, 'no service'),
    ('compose', ['service', 'compose_project_dir'], [], True, CONTAINER, 'no service'),
    ('command', ['command'], [], False, None, 'no status_command'),
])
def test_each_method(name, needs, upgrade_needs, splits, main_pid, cannot_ask):
    one = lookup(name)
    assert [need.key for need in one.needs] == needs
    assert [need.key for need in one.upgrade_needs] == upgrade_needs
    assert (one.stop is not None, one.start is not None) == (splits, splits)
    assert one.main_pid == main_pid
    assert one.cannot_ask == cannot_ask


@pytest.mark.parametrize('one', TABLE, ids=METHODS)
def test_every_setting_a_command_uses_is_a_need_of_its_method(one):
    needs = set(need.key for need in one.needs)
    upgrade_needs = set(need.key for need in one.upgrade_needs)
    assert not needs & upgrade_needs, one
    assert slots(one.restart) == needs, one  # the restart uses all it needs: problems() asks for no more
    assert slots(one.upgrade) <= needs | upgrade_needs, one
    if one.stop is not None:
        assert slots(one.stop + one.start) <= needs, one
    for argv in (one.logs, one.status):
        assert slots([argv]) - {'lines'} <= needs | {'command'}, one


@pytest.mark.parametrize('method, settings, upgrade, expected', [
    ('systemd', {'service': 'vllm'}, False, []),
    ('systemd', {}, False, ['restart_method systemd needs a service']),
    ('systemd', {'service': ''}, True, ['restart_method systemd needs a service']),
    ('docker', {'service': 'vllm'}, False, []),
    ('docker', {'service': 'vllm'}, True,
     ['restart_method docker needs restart_command (your command that recreates the container)']),
    ('docker', {'service': 'vllm', 'command': ['recreate']}, True, []),
    ('docker', {}, True, ['restart_method docker needs a service',
                          'restart_method docker needs restart_command (your command that recreates the container)']),
    ('compose', {'service': 'vllm', 'compose_project_dir': '/srv/vllm'}, True, []),
    ('compose', {'service': 'vllm'}, False, ['restart_method compose needs compose_project_dir']),
    ('compose', {}, False, ['restart_method compose needs a service', 'restart_method compose needs compose_project_dir']),
    ('command', {'command': ['my-restart']}, True, []),
    ('command', {'service': 'vllm', 'command': []}, False, ['restart_method command needs restart_command (an argv list)']),
    ('dokcer', {'service': 'vllm'}, False,
     ["restart_method must be one of systemd, docker, compose, command, got 'dokcer'"]),
    (None, {}, False, ['restart_method must be one of systemd, docker, compose, command, got None']),
    (['systemd'], {}, False, ["restart_method must be one of systemd, docker, compose, command, got ['systemd']"]),
])
def test_problems_of_the_settings(method, settings, upgrade, expected):
    args = (settings.get('service'), settings.get('compose_project_dir'), settings.get('command'))
    assert problems(method, *args, upgrade=upgrade) == expected
    # The filter of the rollout preflight says the same sentences.
    assert rollout_problems(dict(settings, method=method), upgrade=upgrade) == expected


@pytest.mark.parametrize('method, settings, upgrade', [
    ('systemd', {'service': 'vllm'}, True),
    ('docker', {'service': 'vllm', 'command': ['recreate']}, True),
    ('compose', {'service': 'vllm', 'compose_project_dir': '/srv/vllm'}, True),
    ('command', {'command': ['my-restart']}, True),
    ('compose', {'service': 'vllm', 'compose_project_dir': '/srv/vllm'}, False),
])
def test_settings_without_a_problem_give_their_commands(method, settings, upgrade):
    args = (settings.get('service'), settings.get('compose_project_dir'), settings.get('command'))
    assert restart_commands(method, *args, upgrade=upgrade)
    assert restart_commands(method, *args)
    assert stop_start_commands(method, *args[:2]) is None or all(stop_start_commands(method, *args[:2]))


@pytest.mark.parametrize('method, settings, upgrade, message', [
    ('systemd', {}, False, 'restart method systemd needs a service (the unit)'),
    ('docker', {}, False, 'restart method docker needs a service (the container)'),
    ('docker', {}, True, 'restart method docker needs restart_command (your command that recreates the container)'),
    ('compose', {}, True, 'restart method compose needs a service (the compose service)'),
    ('compose', {'service': 'vllm'}, False, 'restart method compose needs compose_project_dir'),
    ('command', {}, False, 'restart method command needs restart_command'),
    ('nope', {}, False, "unknown restart method 'nope' (one of systemd, docker, compose, command)"),
])
def test_the_restart_module_names_the_first_missing_setting(method, settings, upgrade, message):
    with pytest.raises(ServiceError) as caught:
        restart_commands(method, settings.get('service'), settings.get('compose_project_dir'), settings.get('command'),
                         upgrade=upgrade)
    assert str(caught.value) == message


def test_a_plain_container_is_upgraded_by_the_command_alone():
    assert restart_commands('docker', None, None, ['recreate'], upgrade=True) == [['recreate']]


def test_the_watchdog_instances_say_the_problems_per_instance():
    instances = [{'name': 'a', 'restart_method': 'compose', 'url': 'http://h:1'},
                 {'name': 'b', 'restart_method': 'command', 'service': 'vllm', 'url': 'http://h:2'},
                 {'name': 'c', 'restart_method': 'dockr', 'service': 'vllm', 'url': 'http://h:3'},
                 {'name': 'd', 'restart_method': 'docker', 'service': 'vllm', 'url': 'http://h:4'}]
    assert invalid({}, instances) == [
        'a: restart_method compose needs a service', 'a: restart_method compose needs compose_project_dir',
        'b: restart_method command needs restart_command (an argv list)',
        "c: restart_method must be one of systemd, docker, compose, command, got 'dockr'"]


# ---------------------------------------------------------------- the literal lists ansible-core needs, kept equal

def _yaml(*parts):
    with open(os.path.join(REPO, *parts)) as handle:
        return yaml.safe_load(handle)


def _role_choices():
    watchdog = _yaml('roles', 'watchdog', 'meta', 'argument_specs.yml')['argument_specs']
    rollout = _yaml('roles', 'rollout', 'meta', 'argument_specs.yml')['argument_specs']
    found = {}
    for entry, spec in watchdog.items():
        options = spec['options']
        found['watchdog %s vllm_watchdog_restart_method' % entry] = options['vllm_watchdog_restart_method']['choices']
        found['watchdog %s vllm_watchdog_instances[].restart_method' % entry] = (
            options['vllm_watchdog_instances']['options']['restart_method']['choices'])
    for entry, spec in rollout.items():
        found['rollout %s vllm_rollout_method' % entry] = spec['options']['vllm_rollout_method']['choices']
    return found


def test_the_role_argument_specs_list_the_methods():
    found = _role_choices()
    assert len(found) >= 4, sorted(found)  # watchdog main (2), rollout main and preflight
    assert dict((where, tuple(choices)) for where, choices in found.items()) == dict.fromkeys(found, METHODS)


def test_the_module_docs_list_the_methods():
    restart_doc = yaml.safe_load(restart_module.DOCUMENTATION)['options']['method']
    gate_doc = yaml.safe_load(watchdog_gate.DOCUMENTATION)['options']['instances']['suboptions']['restart_method']
    assert tuple(restart_doc['choices']) == METHODS
    assert tuple(gate_doc['choices']) == METHODS


class _Spec(Exception):
    pass


def _argument_spec(module, monkeypatch):
    """The argument_spec a module's main() gives AnsibleModule."""
    def capture(**kwargs):
        raise _Spec(kwargs['argument_spec'])
    monkeypatch.setattr(module, 'AnsibleModule', capture)
    with pytest.raises(_Spec) as caught:
        module.main()
    return caught.value.args[0]


def test_the_module_argument_specs_take_the_methods(monkeypatch):
    assert tuple(_argument_spec(restart_module, monkeypatch)['method']['choices']) == METHODS
    gate = _argument_spec(watchdog_gate, monkeypatch)['instances']['options']['restart_method']
    assert tuple(gate['choices']) == METHODS


def _method_lists(path):
    """The literal lists and tuples of method names in a Python file's code (its doc strings are YAML, not code)."""
    with open(path) as handle:
        tree = ast.parse(handle.read(), path)
    return [ast.unparse(node) for node in ast.walk(tree) if isinstance(node, (ast.List, ast.Tuple))
            and {'systemd', 'compose'} <= set(getattr(e, 'value', None) for e in node.elts)]


@pytest.mark.parametrize('path', sorted(
    glob.glob(os.path.join(REPO, 'plugins', 'filter', '*.py')) + glob.glob(os.path.join(REPO, 'plugins', 'module_utils', '*.py'))
    + [os.path.join(REPO, 'plugins', 'modules', 'restart.py')]), ids=os.path.basename)
def test_no_copy_of_the_method_names_in_the_code(path):
    """The names are typed once, in _service.TABLE (as its Method's names, not as a list)."""
    assert _method_lists(path) == [], path


def test_a_copy_of_the_method_names_is_found(tmp_path):
    # The check above would pass on nothing if it found no list.
    path = tmp_path / 'copy.py'
    path.write_text("DOC = '[systemd, compose]'\nMETHODS = ('systemd', 'docker', 'compose', 'command')\n")
    assert _method_lists(str(path)) == ["('systemd', 'docker', 'compose', 'command')"]
