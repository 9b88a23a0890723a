"""The vllm_servers filter: the health check's servers of a fleet, from the inventory's conventions."""

import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.modelops.vllm.plugins.filter.vllm_servers import FilterModule

vllm_servers = FilterModule().filters()['vllm_servers']

SECRET = 'sk-NEVER-SHOWN-0123456789'


def test_the_filter_module_offers_exactly_this_filter():
    assert sorted(FilterModule().filters()) == ['vllm_servers']


@pytest.mark.parametrize('hostvars, on_host, expected', [
    # No variable: the host name on port 8000, a backend.
    ({'gb10-01': {}}, False, [{'name': 'gb10-01', 'url': 'http://gb10-01:8000', 'kind': 'backend'}]),
    # ansible_host is the address from the controller.
    ({'gb10-01': {'ansible_host': '10.0.0.7'}}, False,
     [{'name': 'gb10-01', 'url': 'http://10.0.0.7:8000', 'kind': 'backend'}]),
    # On the host itself the default is loopback, whatever ansible_host says.
    ({'gb10-01': {'ansible_host': '10.0.0.7'}}, True,
     [{'name': 'gb10-01', 'url': 'http://127.0.0.1:8000', 'kind': 'backend'}]),
    # Every vllm_* variable, as given.
    ({'gb10-01': {'vllm_url': 'https://chat.example:9000', 'vllm_kind': 'proxy', 'vllm_api_key': SECRET,
                  'vllm_model': 'tiny'}}, False,
     [{'name': 'gb10-01', 'url': 'https://chat.example:9000', 'kind': 'proxy', 'api_key': SECRET, 'model': 'tiny'}]),
    # Empty values are not set: the defaults, no api_key, no model.
    ({'gb10-01': {'vllm_url': '', 'vllm_kind': '', 'vllm_api_key': '', 'vllm_model': None}}, True,
     [{'name': 'gb10-01', 'url': 'http://127.0.0.1:8000', 'kind': 'backend'}]),
    # Instances: one server each, named host/instance, the instance's own keys (no vllm_ prefix).
    ({'gb10-01': {'vllm_url': 'http://ignored:1', 'vllm_instances': [
        {'name': 'chat', 'url': 'http://127.0.0.1:8000', 'api_key': SECRET},
        {'name': 'embed', 'url': 'http://127.0.0.1:8001', 'kind': 'proxy', 'model': 'e5'}]}}, False,
     [{'name': 'gb10-01/chat', 'url': 'http://127.0.0.1:8000', 'kind': 'backend', 'api_key': SECRET},
      {'name': 'gb10-01/embed', 'url': 'http://127.0.0.1:8001', 'kind': 'proxy', 'model': 'e5'}]),
    # An empty instance list is the single-server convention.
    ({'gb10-01': {'vllm_instances': []}}, False, [{'name': 'gb10-01', 'url': 'http://gb10-01:8000', 'kind': 'backend'}]),
])
def test_one_server_per_host_or_instance(hostvars, on_host, expected):
    assert vllm_servers(list(hostvars), hostvars, on_host=on_host) == expected


def test_hosts_keep_their_order_and_a_tuple_is_a_list():
    hostvars = {'b': {}, 'a': {'vllm_instances': [{'name': 'x', 'url': 'http://a:1'}]}, 'c': {}}
    assert [s['name'] for s in vllm_servers(('b', 'a', 'c'), hostvars)] == ['b', 'a/x', 'c']
    assert vllm_servers([], hostvars) == []


def test_a_password_in_the_url_is_passed_on_for_the_check_to_use():
    # The check needs it; the module, not the filter, keeps it out of what is shown.
    url = 'http://user:%s@127.0.0.1:8000' % SECRET
    assert vllm_servers(['h'], {'h': {'vllm_url': url}})[0]['url'] == url


@pytest.mark.parametrize('hosts, hostvars, message', [
    ('gb10-01', {'gb10-01': {}}, 'vllm_servers expects a list of host names'),
    ({'gb10-01': 1}, {'gb10-01': {}}, 'vllm_servers expects a list of host names'),
    (None, {}, 'vllm_servers expects a list of host names'),
    (['gb10-02'], {'gb10-01': {}}, 'vllm_servers: gb10-02 is not in hostvars'),
    (['h'], {'h': {'vllm_instances': [{'url': 'http://h:1'}]}}, 'vllm_instances of h: every item needs a name'),
    (['h'], {'h': {'vllm_instances': [{'name': '', 'url': 'http://h:1'}]}}, 'vllm_instances of h: every item needs a name'),
    (['h'], {'h': {'vllm_instances': ['chat']}}, 'vllm_instances of h: every item needs a name'),
    (['h'], {'h': {'vllm_instances': 'chat'}}, 'vllm_instances of h: every item needs a name'),
    # An instance has no default URL.
    (['h'], {'h': {'vllm_instances': [{'name': 'chat', 'api_key': SECRET}]}}, 'h/chat has no url'),
    (['h'], {'h': {'vllm_instances': [{'name': 'chat', 'url': ''}]}}, 'h/chat has no url'),
])
def test_bad_input_is_a_clear_filter_error(hosts, hostvars, message):
    with pytest.raises(AnsibleFilterError) as caught:
        vllm_servers(hosts, hostvars)
    assert str(caught.value) == message
    assert SECRET not in str(caught.value)


def test_a_huge_host_name_is_named_in_full_and_nothing_else():
    host = 'h' * 100000
    with pytest.raises(AnsibleFilterError) as caught:
        vllm_servers([host], {})
    assert str(caught.value) == 'vllm_servers: %s is not in hostvars' % host


@pytest.mark.parametrize('hostvars', [None, {'h': None}, {'h': 'x'}])
def test_hostvars_of_the_wrong_type_are_a_clear_filter_error(hostvars):
    with pytest.raises(AnsibleFilterError):
        vllm_servers(['h'], hostvars)
