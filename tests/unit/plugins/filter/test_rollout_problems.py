# -*- coding: utf-8 -*-
"""The rollout role's preflight filter: the restart method's sentences (test_service_table.py) and each number against
the catalogue's range, named by the role's variable."""

import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.modelops.vllm.plugins.filter._rollout_problems import rollout_problems
from ansible_collections.modelops.vllm.plugins.module_utils._settings import ROLLOUT_LIMITS

from tests.support.paths import REPO

import os
import yaml

GOOD = {'method': 'systemd', 'service': 'vllm', 'compose_project_dir': '', 'command': [], 'interval': '5',
        'probe_timeout': 30, 'metrics_timeout': 10, 'freeze_limit': 300, 'freeze_wait': 300, 'command_timeout': 600,
        'ready_timeout': 900, 'ready_delay': 10, 'lock_timeout': 60, 'idle_timeout': 1800, 'idle_delay': 10,
        'verify_retries': 3, 'ranks': [], 'launch': ''}


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


def test_an_instance_across_hosts_is_checked_as_the_watchdog_checks_it_and_never_upgraded():
    ranks = dict(GOOD, ranks=[{'host': 'spark-02', 'service': 'vllm-rank1'}], launch='nnodes')
    assert rollout_problems(ranks, head='spark-01', inventory=['spark-01', 'spark-02']) == []
    assert rollout_problems(ranks, upgrade=True, head='spark-01', inventory=['spark-01', 'spark-02']) == [
        'an upgrade of an instance across hosts (vllm_rollout_ranks) is not supported yet: only a restart']
    assert rollout_problems(dict(ranks, launch=''), head='spark-01', inventory=['spark-01', 'spark-02']) == [
        "vllm_rollout_ranks: launch must be nnodes or ray for an instance with ranks, got ''"]
    assert rollout_problems(ranks, head='spark-02', inventory=['spark-02']) == [
        'vllm_rollout_ranks: rank 1: host spark-02 is the head itself: a rank is another host']


def test_what_is_not_a_dict_is_an_error_that_says_so():
    with pytest.raises(AnsibleFilterError, match='expects a dict of settings, got list'):
        rollout_problems([])


def test_the_role_hands_the_filter_every_number_it_checks():
    """``_vllm_rollout_setting_keys``: the method's four settings and every catalogued number of the rollout; a number
    left out would go unchecked until a module refused it on the host being restarted."""
    with open(os.path.join(REPO, 'roles', 'rollout', 'vars', 'main.yml')) as handle:
        keys = yaml.safe_load(handle)['_vllm_rollout_setting_keys']
    assert set(keys) == set(ROLLOUT_LIMITS) | {'method', 'service', 'compose_project_dir', 'command', 'ranks', 'launch'}
    assert set(GOOD) == set(keys)
    with open(os.path.join(REPO, 'roles', 'rollout', 'defaults', 'main.yml')) as handle:
        defaults = yaml.safe_load(handle)
    assert all('vllm_rollout_' + key in defaults for key in keys), [k for k in keys if 'vllm_rollout_' + k not in defaults]
