# -*- coding: utf-8 -*-
"""The rollout role's preflight filter: the restart method's sentences (test_service_table.py) and each number against
the catalogue's range, named by the role's variable."""

import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.modelops.vllm.plugins.filter.rollout_problems import rollout_problems
from ansible_collections.modelops.vllm.plugins.module_utils._settings import ROLLOUT_LIMITS

from tests.support.paths import REPO

import os
import yaml

GOOD = {'method': 'systemd', 'service': 'vllm', 'compose_project_dir': '', 'command': [], 'interval': '5',
        'probe_timeout': 30, 'metrics_timeout': 10, 'freeze_limit': 300, 'freeze_wait': 300, 'command_timeout': 600,
        'ready_timeout': 900, 'ready_delay': 10, 'lock_timeout': 60, 'idle_timeout': 1800, 'idle_delay': 10,
        'verify_retries': 3}


def test_the_role_s_defaults_have_no_problem():
    assert rollout_problems(GOOD) == []
    assert rollout_problems(GOOD, upgrade=True) == []


@pytest.mark.parametrize('key, value, expected', [
    ('interval', 0, 'vllm_rollout_interval must be a number greater than 0 and at most 3600, got 0'),
    ('interval', '3601', "vllm_rollout_interval must be a number greater than 0 and at most 3600, got '3601'"),
    ('metrics_timeout', 601, 'vllm_rollout_metrics_timeout must be a number greater than 0 and at most 600, got 601'),
    ('freeze_limit', 0, 'vllm_rollout_freeze_limit must be a number greater than 0 and at most 604800, got 0'),
    ('freeze_wait', -1, 'vllm_rollout_freeze_wait must be a number from 0 and at most 604800, got -1'),
    ('idle_timeout', 'nan', "vllm_rollout_idle_timeout must be a number from 0 and at most 604800, got 'nan'"),
    ('idle_delay', 0, 'vllm_rollout_idle_delay must be a number greater than 0 and at most 3600, got 0'),
    ('verify_retries', 0, 'vllm_rollout_verify_retries must be a number from 1 and at most 1000, got 0'),
    ('lock_timeout', True, 'vllm_rollout_lock_timeout must be a number from 0 and at most 1000000000, got True'),
    ('ready_timeout', 'soon', "vllm_rollout_ready_timeout must be a number greater than 0 and at most 86400, got 'soon'"),
    ('command_timeout', None, 'vllm_rollout_command_timeout must be a number greater than 0 and at most 86400, got None'),
])
def test_a_number_out_of_its_range_is_named_by_its_variable(key, value, expected):
    assert rollout_problems(dict(GOOD, **{key: value})) == [expected]


def test_the_method_s_sentences_come_first_then_the_numbers():
    found = rollout_problems(dict(GOOD, method='compose', interval=0))
    assert found == ['restart_method compose needs compose_project_dir',
                     'vllm_rollout_interval must be a number greater than 0 and at most 3600, got 0']


def test_what_is_not_a_dict_is_an_error_that_says_so():
    with pytest.raises(AnsibleFilterError, match='expects a dict of settings, got list'):
        rollout_problems([])


def test_the_role_hands_the_filter_every_number_it_checks():
    """``_vllm_rollout_setting_keys``: the method's four settings and every catalogued number of the rollout; a number
    left out would go unchecked until a module refused it on the host being restarted."""
    with open(os.path.join(REPO, 'roles', 'rollout', 'vars', 'main.yml')) as handle:
        keys = yaml.safe_load(handle)['_vllm_rollout_setting_keys']
    assert set(keys) == set(ROLLOUT_LIMITS) | {'method', 'service', 'compose_project_dir', 'command'}
    assert set(GOOD) == set(keys)
    with open(os.path.join(REPO, 'roles', 'rollout', 'defaults', 'main.yml')) as handle:
        defaults = yaml.safe_load(handle)
    assert all('vllm_rollout_' + key in defaults for key in keys), [k for k in keys if 'vllm_rollout_' + k not in defaults]
