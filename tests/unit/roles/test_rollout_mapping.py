"""The rollout role's mapping of the watchdog's settings: said once, in defaults/main.yml, and read nowhere else."""

import os
import re

import jinja2
import pytest
import yaml

from tests.support.paths import REPO

ROLE = os.path.join(REPO, 'roles', 'rollout')
WATCHDOG_NAME = re.compile(r'\bvllm_watchdog_\w+')

# rollout setting, the watchdog's setting it falls back to, the inventory convention after it, its own default.
MAPPING = [
    ('vllm_rollout_method', 'vllm_watchdog_restart_method', None, 'systemd'),
    ('vllm_rollout_service', 'vllm_watchdog_service', None, 'vllm'),
    ('vllm_rollout_compose_project_dir', 'vllm_watchdog_compose_project_dir', None, ''),
    ('vllm_rollout_command', 'vllm_watchdog_restart_command', None, []),
    ('vllm_rollout_url', 'vllm_watchdog_url', 'vllm_url', 'http://127.0.0.1:8000'),
    ('vllm_rollout_api_key', 'vllm_watchdog_api_key', 'vllm_api_key', ''),
    ('vllm_rollout_model', 'vllm_watchdog_model', 'vllm_model', ''),
    ('vllm_rollout_check_on_controller', 'vllm_watchdog_check_on_controller', None, False),
    ('vllm_rollout_validate_certs', 'vllm_watchdog_validate_certs', None, True),
    ('vllm_rollout_ca_path', 'vllm_watchdog_ca_path', None, ''),
    ('vllm_rollout_use_proxy', 'vllm_watchdog_use_proxy', None, False),
    ('vllm_rollout_interval', 'vllm_watchdog_interval', None, 5),
    ('vllm_rollout_probe_timeout', 'vllm_watchdog_probe_timeout', None, 30),
    ('vllm_rollout_metrics_timeout', 'vllm_watchdog_metrics_timeout', None, 10),
    ('vllm_rollout_freeze_limit', 'vllm_watchdog_freeze_limit', None, 300),
    ('vllm_rollout_freeze_wait', 'vllm_watchdog_freeze_wait', None, 300),
    ('vllm_rollout_state_dir', 'vllm_watchdog_state_dir', None, '/var/lib/vllm-watchdog'),
    ('vllm_rollout_watchdog_name', 'vllm_watchdog_name', None, 'vllm'),
    ('vllm_rollout_lock_timeout', 'vllm_watchdog_lock_timeout', None, 60),
]


def load(*parts):
    with open(os.path.join(ROLE, *parts)) as handle:
        return yaml.safe_load(handle)


def text(*parts):
    with open(os.path.join(REPO, *parts)) as handle:
        return handle.read()


def value(template, **variables):
    """A default's value as the templating gives it: one expression, typed (the role's defaults for what it reads)."""
    template = template.strip()
    assert template.startswith('{{') and template.endswith('}}'), template
    environment = jinja2.Environment()
    environment.filters['bool'] = lambda v: v if isinstance(v, bool) else str(v).lower() in ('true', 'yes', '1', 'on')
    variables = dict({'vllm_rollout_check_on_controller': False, 'inventory_hostname': 'gb10-01'}, **variables)
    return environment.compile_expression(template[2:-2])(**variables)


def test_the_default_url_follows_the_watchdog_s_convention():
    """The host's own address when the checks run on the controller (as vllm_watchdog_url's default), else
    127.0.0.1; it used to be 127.0.0.1 always, so a rollout from the controller checked the controller."""
    template = load('defaults', 'main.yml')['vllm_rollout_url']
    assert value(template) == 'http://127.0.0.1:8000'
    assert value(template, vllm_rollout_check_on_controller=True) == 'http://gb10-01:8000'
    assert value(template, vllm_rollout_check_on_controller=True, ansible_host='10.0.0.5') == 'http://10.0.0.5:8000'
    watchdog = yaml.safe_load(text('roles', 'watchdog', 'defaults', 'main.yml'))['vllm_watchdog_url']
    for on_controller in (True, False):
        assert value(template, vllm_rollout_check_on_controller=on_controller, ansible_host='10.0.0.5') == value(
            watchdog, vllm_watchdog_check_on_controller=on_controller, ansible_host='10.0.0.5')


def test_every_watchdog_setting_is_mapped_once_and_only_in_the_defaults():
    defaults = load('defaults', 'main.yml')
    reading = {name: WATCHDOG_NAME.findall(str(default)) for name, default in defaults.items()}
    assert {name: found for name, found in reading.items() if found} == {
        row[0]: [row[1]] for row in MAPPING}
    # The tasks, the role's own vars and the playbook read the rollout's settings only; the preflight refuses a host
    # with several watchdog instances (that is not a fallback).
    for parts in (('roles', 'rollout', 'tasks', 'main.yml'), ('roles', 'rollout', 'vars', 'main.yml'),
                  ('playbooks', 'rollout.yml')):
        assert WATCHDOG_NAME.findall(text(*parts)) == [], parts
    assert set(WATCHDOG_NAME.findall(text('roles', 'rollout', 'tasks', 'preflight.yml'))) <= {'vllm_watchdog_instances'}


@pytest.mark.parametrize('rollout, watchdog, convention, default', MAPPING)
def test_a_shared_setting_falls_back_to_the_watchdog_then_the_convention_then_its_default(
        rollout, watchdog, convention, default):
    template = load('defaults', 'main.yml')[rollout]
    assert value(template) == default
    assert value(template, **{watchdog: 'from-the-watchdog'}) == 'from-the-watchdog'
    if convention:
        assert value(template, **{convention: 'from-the-inventory'}) == 'from-the-inventory'
        assert value(template, **{watchdog: 'from-the-watchdog', convention: 'x'}) == 'from-the-watchdog'
