"""The watchdog role's settings: its defaults and argument specs agree, and its async budget is the check's deadline."""

import os

import jinja2
import pytest
import yaml

from ansible_collections.modelops.vllm.plugins.filter._check_budget import check_budget
from ansible_collections.modelops.vllm.plugins.module_utils._settings import check_deadline

from tests.support.paths import REPO

ROLE = os.path.join(REPO, 'roles', 'watchdog')


def load(*parts):
    with open(os.path.join(ROLE, *parts)) as handle:
        return yaml.safe_load(handle)


def test_every_default_is_documented_with_the_same_value_and_every_option_has_a_default():
    """Every variable of defaults/main.yml is an option, with the same default; except that a templated default of an
    option that is not a str is no ``default:`` of the spec (ansible-doc and antsibull-docs check a spec's default
    against its type, and a Jinja expression is no bool, float or list) and its description says what it defaults to.
    The role's defaults/main.yml is what sets the value either way (role argument validation sets no default)."""
    defaults = load('defaults', 'main.yml')
    options = load('meta', 'argument_specs.yml')['argument_specs']['main']['options']
    assert sorted(defaults) == sorted(options)
    for name, spec in options.items():
        assert spec.get('description'), name
        if templated_non_str(defaults[name], spec):
            assert 'default' not in spec, (name, spec['default'])
            assert 'Defaults to' in ' '.join(as_list(spec['description'])), name
        else:
            assert spec.get('default') == defaults[name], name


def templated_non_str(value, spec):
    """Whether a default is a Jinja expression for an option whose type is not str."""
    return isinstance(value, str) and '{{' in value and spec.get('type', 'str') != 'str'


def as_list(value):
    return value if isinstance(value, list) else [value]


def test_the_spec_defaults_are_of_their_types():
    """What antsibull-docs lint-collection-docs checks, on every default the spec gives."""
    options = load('meta', 'argument_specs.yml')['argument_specs']['main']['options']
    types = {'str': str, 'bool': bool, 'int': int, 'float': (int, float), 'list': list, 'dict': dict, 'path': str}
    for name, spec in options.items():
        if 'default' in spec:
            assert isinstance(spec['default'], types[spec.get('type', 'str')]), (name, spec['default'])


@pytest.mark.parametrize('interval, probe, metrics, wait', [(5, 30, 10, 300), (1, 5, 5, 0), (0.5, 2, 2, 20),
                                                            (2.5, 7.5, 1.25, 0.5)])
def test_the_async_budget_is_the_check_s_own_deadline_plus_start_up(interval, probe, metrics, wait):
    expression = load('vars', 'main.yml')['_vllm_watchdog_check_budget']
    environment = jinja2.Environment()
    environment.filters['modelops.vllm._check_budget'] = check_budget  # the collection's filter, as Ansible names it
    budget = int(environment.from_string(expression).render(
        vllm_watchdog_interval=interval, vllm_watchdog_probe_timeout=probe, vllm_watchdog_metrics_timeout=metrics,
        vllm_watchdog_freeze_wait=wait))
    deadline = check_deadline(interval, probe, metrics, wait)
    assert deadline + 30 <= budget < deadline + 31


def test_the_freeze_limit_is_one_default_everywhere_a_freeze_is_judged():
    """The health module, the watchdog (through the inventory's vllm_check_freeze_limit), the check playbooks, the
    rollout and the Prometheus rules' stuck time say the same 300 s (docs/health.md, "a long engine step")."""
    import re
    from ansible_collections.modelops.vllm.plugins.module_utils._freeze import DEFAULT_LIMIT

    def rendered(template, **variables):
        return float(jinja2.Environment().from_string(template).render(**variables))
    defaults = load('defaults', 'main.yml')
    assert rendered(defaults['vllm_watchdog_freeze_limit']) == DEFAULT_LIMIT == 300
    assert rendered(defaults['vllm_watchdog_freeze_limit'], vllm_check_freeze_limit=42) == 42
    # The run that finds a freeze watches it up to the limit, unless told otherwise.
    assert defaults['vllm_watchdog_freeze_wait'] == '{{ vllm_watchdog_freeze_limit }}'
    with open(os.path.join(REPO, 'roles', 'rollout', 'defaults', 'main.yml')) as handle:
        rollout = yaml.safe_load(handle)
    assert rendered(rollout['vllm_rollout_freeze_limit']) == DEFAULT_LIMIT
    with open(os.path.join(REPO, 'playbooks', 'fleet_check.yml')) as handle:
        fleet = handle.read()
    assert "vllm_check_freeze_limit | default(%d)" % DEFAULT_LIMIT in fleet
    with open(os.path.join(REPO, 'extensions', 'prometheus', 'vllm.rules.yml.j2')) as handle:
        rules = handle.read()
    assert re.search(r'vllm_prometheus_stuck_seconds \| default\(%d\)' % DEFAULT_LIMIT, rules)


def _tasks(node):
    """Every task of a task file, blocks opened (their block, rescue and always)."""
    for task in node or []:
        if not isinstance(task, dict):
            continue
        yield task
        for part in ('block', 'rescue', 'always'):
            yield from _tasks(task.get(part))


def test_every_gate_run_that_decides_names_the_role_s_variables():
    """A gate run that decides (instances, a verdict by name, an escalation) passes setting_prefix, so that its
    reasons name vllm_watchdog_reboot, not the module's reboot; the bookkeeping runs (record_failure,
    record_outcome) decide nothing."""
    runs = []
    for name in sorted(os.listdir(os.path.join(REPO, 'roles', 'watchdog', 'tasks'))):
        for task in _tasks(load('tasks', name)):
            args = task.get('modelops.vllm.watchdog_gate')
            if isinstance(args, dict) and ({'instances', 'name', 'escalate'} & set(args)):
                runs.append((name, task['name'], args.get('setting_prefix')))
    assert len(runs) >= 3, runs  # the decision, the escalation after a stop, the unreachable host
    assert [run for run in runs if run[2] != 'vllm_watchdog_'] == []
