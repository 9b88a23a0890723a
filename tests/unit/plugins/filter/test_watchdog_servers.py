"""The watchdog_servers filter: every merged watchdog instance of the play as one controller-side check's servers."""

import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.modelops.vllm.plugins.filter.watchdog_servers import FilterModule

watchdog_servers = FilterModule().filters()['watchdog_servers']

SECRET = 'sk-NEVER-SHOWN-0123456789'


def merged(*instances):
    return {'_vllm_watchdog_plan': {'problems': [], 'instances': list(instances)}}


def test_the_filter_module_offers_exactly_this_filter():
    assert sorted(FilterModule().filters()) == ['watchdog_servers']


@pytest.mark.parametrize('hosts, hostvars, expected', [
    ([], {}, []),
    # A host without merged instances (the role did not run there) gives no server.
    (['h'], {'h': {}}, []),
    (['h'], {'h': merged()}, []),
    (['h'], {'h': {'_vllm_watchdog_plan': None}}, []),
    (['h'], {'h': {'_vllm_watchdog_plan': 'not a plan'}}, []),
    # A host whose preflight found a problem has no instances in its plan.
    (['h'], {'h': {'_vllm_watchdog_plan': {'problems': ['vllm_watchdog_instances[0] has no name']}}}, []),
    # Only url, kind, api_key and model are kept, and only when set; the name is host/instance.
    (['h'], {'h': merged({'name': 'chat', 'url': 'http://127.0.0.1:8000', 'kind': 'backend', 'api_key': SECRET,
                          'model': 'tiny', 'service': 'vllm', 'restart_method': 'systemd', 'url_is_default': True})},
     [{'name': 'h/chat', 'url': 'http://127.0.0.1:8000', 'kind': 'backend', 'api_key': SECRET, 'model': 'tiny'}]),
    (['h'], {'h': merged({'name': 'chat', 'url': 'http://127.0.0.1:8000', 'api_key': '', 'model': None, 'kind': ''})},
     [{'name': 'h/chat', 'url': 'http://127.0.0.1:8000'}]),
    # Hosts in the order given, each host's instances in its order.
    (['b', 'a'], {'a': merged({'name': 'x', 'url': 'http://a:1'}),
                  'b': merged({'name': 'y', 'url': 'http://b:1'}, {'name': 'z', 'url': 'http://b:2'})},
     [{'name': 'b/y', 'url': 'http://b:1'}, {'name': 'b/z', 'url': 'http://b:2'}, {'name': 'a/x', 'url': 'http://a:1'}]),
])
def test_one_server_per_host_and_instance(hosts, hostvars, expected):
    assert watchdog_servers(hosts, hostvars) == expected


def test_a_password_in_the_url_is_passed_on_for_the_check_to_use():
    url = 'http://user:%s@127.0.0.1:8000' % SECRET
    assert watchdog_servers(('h',), {'h': merged({'name': 'chat', 'url': url})}) == [{'name': 'h/chat', 'url': url}]


@pytest.mark.parametrize('hosts, hostvars, message', [
    ('h', {'h': {}}, 'watchdog_servers expects a list of host names'),
    (None, {}, 'watchdog_servers expects a list of host names'),
    ({'h': 1}, {'h': {}}, 'watchdog_servers expects a list of host names'),
    (['h', 'gone'], {'h': {}}, 'watchdog_servers: gone is not in hostvars'),
])
def test_bad_input_is_a_clear_filter_error(hosts, hostvars, message):
    with pytest.raises(AnsibleFilterError) as caught:
        watchdog_servers(hosts, hostvars)
    assert str(caught.value) == message


@pytest.mark.parametrize('hostvars', [None, {'h': None}, {'h': merged('chat')}, {'h': merged({'url': 'http://h:1'})}])
def test_instances_of_the_wrong_shape_are_a_clear_filter_error(hostvars):
    with pytest.raises(AnsibleFilterError):
        watchdog_servers(['h'], hostvars)
