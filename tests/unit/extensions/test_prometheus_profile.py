"""The Prometheus rules (extensions/prometheus) watch the series of the engine profile (_vllm.py), the same the
health module reads: a counter added to one and not the other would judge the same engine two ways."""

import ast
import os
import re

import pytest
import yaml

from ansible_collections.modelops.vllm.plugins.module_utils import _stall
from ansible_collections.modelops.vllm.plugins.module_utils import _vllm as profile

from tests.support.paths import REPO

RULES = os.path.join(REPO, 'extensions', 'prometheus', 'vllm.rules.yml')
TEMPLATE = RULES + '.j2'


def _rules():
    with open(RULES) as handle:
        groups = yaml.safe_load(handle)['groups']
    return [rule for group in groups for rule in group['rules']]


def _expr(name):
    """The expression of the rule recording (or alerting as) ``name``, the rendered window suffix left out."""
    found = [rule['expr'] for rule in _rules() if re.sub(r'\d+[smh]$', '', rule.get('record', rule.get('alert', '')))
             == name]
    assert len(found) == 1, (name, len(found))
    return found[0]


def _series(expr):
    """The vLLM series an expression reads."""
    return set(re.findall(r'(%s[a-zA-Z_:][a-zA-Z0-9_:]*)' % re.escape(profile.PREFIX), expr))


def _template_list(name):
    with open(TEMPLATE) as handle:
        text = handle.read()
    match = re.search(r'\{%%- set %s = (\[.*?\]) -%%\}' % name, text, re.S)
    assert match, name
    return [profile.PREFIX + item for item in ast.literal_eval(match.group(1))]


def test_the_template_s_progress_series_are_the_profile_s():
    assert tuple(_template_list('counters')) == profile.PROGRESS_COUNTERS
    assert tuple(_template_list('kv_gauges')) == profile.KV_CACHE


def test_moved_is_any_progress_counter_or_the_kv_cache_gauge_as_in_the_module():
    expr = _expr('engine:vllm_progress:changes')
    # count_over_time(running) says the engine was scraped twice in the window; it is no progress series.
    assert _series(expr) - {profile.RUNNING} == set(profile.PROGRESS_COUNTERS + profile.KV_CACHE), expr


def test_in_flight_is_running_plus_waiting_and_deferred_is_the_waiting_reason():
    assert _series(_expr('engine:vllm_requests_in_flight:sum')) == {profile.RUNNING, profile.WAITING}
    deferred = _expr('engine:vllm_requests_deferred:sum')
    assert '%s{%s="%s"}' % (profile.WAITING_BY_REASON, profile.REASON_LABEL, profile.DEFERRED) in deferred, deferred


def test_the_frozen_on_purpose_gauges_are_the_profile_s():
    assert _series(_expr('instance:vllm_weight_updates:sum')) == {profile.WEIGHT_UPDATES}
    awake = _expr('engine:vllm_awake:max')
    assert '%s{%s="%s"}' % (profile.SLEEP_STATE, profile.SLEEP_LABEL, profile.AWAKE) in awake, awake


def test_the_livelock_s_useful_progress_and_activity_are_the_stall_window_s():
    useful = _expr('engine:vllm_useful:increase')
    assert _series(useful) == set(profile.STALL_COUNTERS[name] for name in _stall.USEFUL if name != 'completed') \
        | {profile.SUCCESS}, useful
    assert '%s{%s!~"%s"}' % (profile.SUCCESS, profile.FINISHED_LABEL, '|'.join(profile.NOT_COMPLETED)) in useful
    activity = _expr('engine:vllm_activity:any')
    assert _series(activity) == set(profile.STALL_COUNTERS[name] for name in _stall.ACTIVITY) \
        | {profile.KV_CACHE[0]}, activity


@pytest.mark.parametrize('rule', [rule.get('record') or rule.get('alert') for rule in _rules()])
def test_every_vllm_series_a_rule_reads_is_in_the_profile(rule):
    expr = [r['expr'] for r in _rules() if (r.get('record') or r.get('alert')) == rule][0]
    assert _series(expr) <= set(profile.PROGRESS_COUNTERS + profile.GAUGES), (rule, expr)
    # Series without the engine label (V0, 0.7.x) are engine "0", as in the module.
    if 'label_replace(' in expr and '"%s", ""' % profile.ENGINE_LABEL in expr:
        assert '"%s", "%s", "%s", ""' % (profile.ENGINE_LABEL, profile.DEFAULT_ENGINE, profile.ENGINE_LABEL) in expr
