"""The rollout role's interface, read from its files (no server, no ansible-playbook): its defaults and argument
specs agree, and one place performs a restart. Its end-to-end tests are in tests/integration/test_rollout.py."""

import os

import yaml

from tests.support.paths import REPO

ROLE = os.path.join(REPO, 'roles', 'rollout')


def _role_yaml(*parts):
    with open(os.path.join(ROLE, *parts)) as handle:
        return yaml.safe_load(handle)


def test_defaults_and_argument_specs_agree():
    """Every variable in defaults/main.yml is documented in meta/argument_specs.yml with the same default, in every
    entry point, and every documented variable has its default in defaults/main.yml."""
    defaults = _role_yaml('defaults', 'main.yml')
    specs = _role_yaml('meta', 'argument_specs.yml')['argument_specs']
    assert set(specs) == {'main', 'preflight'}, sorted(specs)
    for entry, spec in specs.items():
        options = spec['options']
        assert sorted(set(defaults) - set(options)) == [], (entry, 'in defaults/main.yml, not documented')
        assert sorted(set(options) - set(defaults)) == [], (entry, 'documented, not in defaults/main.yml')
        # A templated default of an option that is not a str is no `default:` of the spec (ansible-doc and
        # antsibull-docs check a spec's default against its type); its description says what it defaults to.
        templated = {name for name, opt in options.items()
                     if isinstance(defaults[name], str) and '{{' in defaults[name] and opt.get('type') != 'str'}
        differ = {name: (defaults[name], opt.get('default')) for name, opt in options.items()
                  if name not in templated and opt.get('default') != defaults[name]}
        assert differ == {}, (entry, differ)
        for name in templated:
            description = options[name]['description']
            description = ' '.join(description) if isinstance(description, list) else description
            assert 'default' not in options[name] and ('Defaults to' in description or 'By default' in description), (
                entry, name)
        for name, opt in options.items():
            assert name.startswith('vllm_rollout_') and opt.get('description') and opt.get('type'), (entry, name, opt)


def _tasks(data):
    """Every task of a task list, blocks opened."""
    for task in data or []:
        yield task
        for key in ('block', 'rescue', 'always'):
            yield from _tasks(task.get(key))


def test_one_place_performs_a_restart():
    """The role restarts only through modelops.vllm.restart and pauses only through modelops.vllm.watchdog_pause;
    the playbook only runs the role. The one command the role runs itself is the pull of an upgrade."""
    modules = {}
    for name in os.listdir(os.path.join(ROLE, 'tasks')):
        for task in _tasks(_role_yaml('tasks', name)):
            module = next((k for k in task if '.' in k and k.split('.')[0] in ('ansible', 'modelops')), None)
            if module:
                modules.setdefault(module, []).append(task['name'])
    assert modules.get('ansible.builtin.command') == ['Upgrade | pull the new image while the server still serves'], modules
    # check mode, restart, wait from the controller (or after the ranks started), and an instance across hosts' stop
    # and start, and their check mode
    assert len(modules['modelops.vllm.restart']) == 6, modules
    assert sorted(modules['modelops.vllm.watchdog_pause']) == [
        'Pause | pause the watchdog, and wait for a watchdog run that is deciding right now',
        'Resume | leave the watchdog paused for a human, with the reason in the pause file',
        'Resume | the watchdog (the host serves again, or was not touched)'], modules
    # Nothing else that could restart, read the pause file or wait until ready on its own (shell, systemd, uri, slurp).
    assert 'modelops.vllm.validate_variables' in modules  # the preflight names a misspelt variable (issue 15)
    assert set(modules) <= {'ansible.builtin.assert', 'ansible.builtin.set_fact', 'ansible.builtin.command',
                            'ansible.builtin.file', 'ansible.builtin.copy', 'ansible.builtin.lineinfile',
                            'ansible.builtin.debug', 'ansible.builtin.fail', 'ansible.builtin.set_stats',
                            'ansible.builtin.import_tasks', 'modelops.vllm.health', 'modelops.vllm.restart',
                            'modelops.vllm.watchdog_pause',
                            'modelops.vllm.validate_variables'}, sorted(modules)  # validate: on the controller only
    with open(os.path.join(REPO, 'playbooks', 'rollout.yml')) as handle:
        plays = yaml.safe_load(handle)
    # the hosts to roll out (on the controller), every host's settings, then the batches
    assert [play.get('roles') for play in plays] == [None, None, [{'role': 'modelops.vllm.rollout'}]], plays
    assert [next(k for k in task if '.' in k) for task in plays[0]['tasks']] == ['ansible.builtin.assert'], plays[0]
    assert [next(k for k in task if '.' in k) for task in plays[1]['tasks']] == [
        'modelops.vllm.validate_variables', 'ansible.builtin.include_role'], plays[1]
    assert plays[1]['tasks'][1] == {'name': "Check this host's rollout settings", 'ansible.builtin.include_role': {
        'name': 'modelops.vllm.rollout', 'tasks_from': 'preflight'}}, plays[1]


def test_the_rollout_s_verdicts_are_the_checks_verdicts_but_paused():
    """vllm_rollout_restart_states are checked against _vllm_rollout_verdicts: the check's verdicts (_types.STATES)
    without paused, which came after the list (a paused server is not restarted by a rollout until that is decided
    on its own). A verdict added to STATES fails here until the rollout says whether it may restart on it."""
    from ansible_collections.modelops.vllm.plugins.module_utils._types import STATES
    assert _role_yaml('vars', 'main.yml')['_vllm_rollout_verdicts'] == [s for s in STATES if s != 'paused']
