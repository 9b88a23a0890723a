"""The _watchdog_gate_instances filter: a host's merged instances as the gate's instances (the gate attaches their
verdicts itself: test_watchdog_gate.py)."""

import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.modelops.vllm.plugins.filter._watchdog_gate_instances import FilterModule

gate_instances = FilterModule().filters()['_watchdog_gate_instances']

SECRET = 'sk-NEVER-SHOWN-0123456789'
FULL = {'name': 'chat', 'kind': 'backend', 'restart_method': 'compose', 'service': 'vllm',
        'compose_project_dir': '/srv/vllm', 'status_command': ['st'], 'logs_command': ['lg'], 'api_key': SECRET,
        'url_is_default': True, 'url': 'http://127.0.0.1:8000', 'model': 'tiny', 'restart_command': ['x'],
        'interval': 5}


def test_the_filter_module_offers_exactly_this_filter():
    assert sorted(FilterModule().filters()) == ['_watchdog_gate_instances']


@pytest.mark.parametrize('instance, expected', [
    # Only the gate's keys; the api_key goes to the gate (a no_log option there).
    (FULL, {'name': 'chat', 'kind': 'backend', 'restart_method': 'compose', 'service': 'vllm',
            'compose_project_dir': '/srv/vllm', 'restart_command': ['x'], 'status_command': ['st'],
            'logs_command': ['lg'], 'api_key': SECRET, 'url_is_default': True, 'url': 'http://127.0.0.1:8000'}),
    # What the inventory says where the method cannot show what it restarts, as a string or a bool.
    ({'name': 'chat', 'assume_url_is_service': 'True'}, {'name': 'chat', 'assume_url_is_service': True, 'url': None}),
    ({'name': 'chat', 'assume_url_is_service': True}, {'name': 'chat', 'assume_url_is_service': True, 'url': None}),
    ({'name': 'chat', 'assume_url_is_service': 'false'},
     {'name': 'chat', 'assume_url_is_service': False, 'url': None}),
    # Empty values are left out; the url is always there (None when there is none).
    ({'name': 'chat', 'service': '', 'status_command': [], 'api_key': None, 'url_is_default': False},
     {'name': 'chat', 'url': None}),
    # url_is_default as a string from the inventory.
    ({'name': 'chat', 'url_is_default': 'True'}, {'name': 'chat', 'url_is_default': True, 'url': None}),
    ({'name': 'chat', 'url_is_default': 'yes'}, {'name': 'chat', 'url_is_default': True, 'url': None}),
    ({'name': 'chat', 'url_is_default': '1'}, {'name': 'chat', 'url_is_default': True, 'url': None}),
    ({'name': 'chat', 'url_is_default': 'false'}, {'name': 'chat', 'url_is_default': False, 'url': None}),
    ({'name': 'chat', 'url_is_default': 'no'}, {'name': 'chat', 'url_is_default': False, 'url': None}),
    # A password in the url is never passed on as written.
    ({'name': 'chat', 'url': 'http://admin:%s@127.0.0.1:8000/v' % SECRET},
     {'name': 'chat', 'url': 'http://admin:********@127.0.0.1:8000/v'}),
])
def test_each_instance_with_the_gate_s_keys(instance, expected):
    assert gate_instances([instance]) == [expected]


def test_the_input_is_not_changed():
    instance = dict(FULL, url='http://a:%s@h:1' % SECRET)
    before = dict(instance)
    gate_instances([instance])
    assert instance == before


@pytest.mark.parametrize('instances', ['chat', None, {'name': 'chat'}, 5])
def test_instances_that_are_not_a_list_are_a_clear_filter_error(instances):
    with pytest.raises(AnsibleFilterError) as caught:
        gate_instances(instances)
    assert str(caught.value) == 'watchdog_gate_instances expects a list of instances'


@pytest.mark.parametrize('instances', [['chat'], [{'url': 'http://h:1'}]])
def test_instances_of_the_wrong_shape_are_a_clear_filter_error(instances):
    with pytest.raises(AnsibleFilterError):
        gate_instances(instances)
