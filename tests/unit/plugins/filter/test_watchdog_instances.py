"""The watchdog_instances filter: the role's instances merged with its settings, and the role's preflight."""

import re

import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.modelops.vllm.plugins.filter._watchdog_instances import FilterModule

watchdog_instances = FilterModule().filters()['_watchdog_instances']

SECRET = 'sk-NEVER-SHOWN-0123456789'
BASE = {'name': 'vllm', 'url': 'http://127.0.0.1:8000', 'url_is_default': True, 'kind': 'backend',
        'restart_method': 'systemd', 'service': 'vllm', 'api_key': SECRET}
PREFIX = 'modelops.vllm.watchdog: invalid settings (see ansible-doc -t role modelops.vllm.watchdog): '


def test_the_filter_module_offers_exactly_this_filter():
    assert sorted(FilterModule().filters()) == ['_watchdog_instances']


@pytest.mark.parametrize('instances, keys, expected', [
    # No instance: one, made of the settings.
    ([], None, [BASE]),
    # Each instance's own keys override the settings; its own url is not the default one.
    ([{'name': 'chat'}, {'name': 'embed', 'url': 'http://127.0.0.1:8001', 'service': 'vllm-embed'}], None,
     [dict(BASE, name='chat'),
      dict(BASE, name='embed', url='http://127.0.0.1:8001', url_is_default=False, service='vllm-embed')]),
    # Even a url equal to the default one is the instance's own.
    ([{'name': 'chat', 'url': BASE['url']}], None, [dict(BASE, name='chat', url_is_default=False)]),
    # keys: only those, in that order, and only when there.
    ([{'name': 'chat'}], ['name', 'url', 'model', 'api_key'],
     [{'name': 'chat', 'url': BASE['url'], 'api_key': SECRET}]),
    ([{'name': 'chat'}], [], [dict(BASE, name='chat')]),  # no keys: everything
])
def test_instances_are_merged_with_the_settings(instances, keys, expected):
    out = watchdog_instances(instances, BASE, keys)
    assert out == expected
    if keys:
        assert [list(o) for o in out] == [[k for k in keys if k in e] for e in expected]


def test_with_a_host_each_instance_is_named_host_slash_instance():
    """The servers of the role's one check from the controller (was the watchdog_servers filter): each host's merged
    instances named <host>/<instance>, in their order, with only the check's keys."""
    keys = ['name', 'url', 'kind', 'api_key', 'model']
    out = watchdog_instances([{'name': 'chat'}, {'name': 'embed', 'url': 'http://127.0.0.1:8001'}], BASE, keys,
                             host='gb10-01')
    assert out == [{'name': 'gb10-01/chat', 'url': BASE['url'], 'kind': 'backend', 'api_key': SECRET},
                   {'name': 'gb10-01/embed', 'url': 'http://127.0.0.1:8001', 'kind': 'backend', 'api_key': SECRET}]
    assert watchdog_instances([], BASE, ['name'], host='h') == [{'name': 'h/vllm'}]
    # A password in the URL is passed on for the check to use.
    url = 'http://user:%s@127.0.0.1:8000' % SECRET
    assert watchdog_instances([{'name': 'chat', 'url': url}], {}, ['name', 'url'], host='h') == [{'name': 'h/chat', 'url': url}]


def test_with_the_head_each_instance_gets_the_steps_of_its_restart_across_hosts():
    """The watchdog's plan and the rollout loop over these: the order is written once, in _ranks.restart_steps."""
    ranked = {'name': 'big', 'restart_method': 'docker', 'service': 'head',
              'ranks': [{'host': 'spark-02'}, {'host': 'spark-03'}]}
    out = watchdog_instances([ranked, {'name': 'small'}], BASE, head='spark-01')
    assert [s['host'] for s in out[0]['steps']['stop']] == ['spark-01', 'spark-03', 'spark-02']
    assert [s['host'] for s in out[0]['steps']['start']] == ['spark-01', 'spark-02', 'spark-03']
    assert [s['host'] for s in out[1]['steps']['start']] == ['spark-01'] and out[1]['steps']['stop'] == \
        out[1]['steps']['start']
    assert [r['rank'] for r in out[0]['ranks']] == [1, 2]  # the ranks as before
    assert 'steps' not in watchdog_instances([ranked], BASE)[0]  # only with the head


def test_neither_the_settings_nor_the_instances_are_changed():
    instances = [{'name': 'chat', 'url': 'http://127.0.0.1:8001'}]
    base = dict(BASE)
    watchdog_instances(instances, base)
    assert instances == [{'name': 'chat', 'url': 'http://127.0.0.1:8001'}] and base == BASE


def test_a_tuple_of_instances_is_a_list():
    assert watchdog_instances(({'name': 'a'},), BASE) == [dict(BASE, name='a')]


@pytest.mark.parametrize('instances, base, keys, message', [
    ('chat', BASE, None, 'watchdog_instances expects a list of dicts and a dict of settings'),
    (None, BASE, None, 'watchdog_instances expects a list of dicts and a dict of settings'),
    ([], None, None, 'watchdog_instances expects a list of dicts and a dict of settings'),
    ([], [BASE], None, 'watchdog_instances expects a list of dicts and a dict of settings'),
    (['chat'], BASE, None, 'every instance must be a dict, got str'),
    ([{'name': 'a'}, None], BASE, None, 'every instance must be a dict, got NoneType'),
    ([{'name': 'a'}, {'name': 'a'}], BASE, None, 'instance names must be unique on a host: a, a'),
    # Both take the base's name.
    ([{}, {'url': 'http://h:1'}], BASE, None, 'instance names must be unique on a host: vllm, vllm'),
    ([{'name': 'a'}, {'name': 'a'}], BASE, ['name', 'url'], 'instance names must be unique on a host: a, a'),
])
def test_bad_instances_are_a_clear_filter_error(instances, base, keys, message):
    with pytest.raises(AnsibleFilterError) as caught:
        watchdog_instances(instances, base, keys)
    assert str(caught.value) == message


BAD_INSTANCES = [
    (None, BASE, 'watchdog_instances expects a list of dicts and a dict of settings'),
    ([], None, 'watchdog_instances expects a list of dicts and a dict of settings'),
    (['chat'], BASE, 'every instance must be a dict, got str'),
    ([{'name': 'a'}, {'name': 'a'}], BASE, 'instance names must be unique on a host: a, a'),
]


@pytest.mark.parametrize('instances, base, message', BAD_INSTANCES)
def test_with_problems_what_is_wrong_is_returned_never_raised(instances, base, message):
    # The role works the instances out in a set_fact that hides its result (API keys): an error raised there would
    # have no message, so the problems come back as sentences for the next task to say.
    assert watchdog_instances(instances, base, settings={}, problems=True) == [message]
    with pytest.raises(AnsibleFilterError, match='^%s$' % re.escape(message)):
        watchdog_instances(instances, base, settings={})


def test_names_are_not_checked_when_the_keys_leave_them_out():
    assert watchdog_instances([{'name': 'a'}, {'name': 'a'}], BASE, ['url']) == [{'url': BASE['url']}] * 2


@pytest.mark.parametrize('settings', [
    {}, {'interval': 5, 'probe_timeout': '30', 'cooldown': 0, 'max_restarts': 0, 'unknown_limit': 1,
         'memory_fraction': 1, 'evidence_timeout': 0, 'stall_window': 0, 'reboot_cooldown': 31622400},
    # The role's defaults of the freeze watch are templates (strings); a check that does not wait for a freeze.
    {'freeze_limit': '300', 'freeze_wait': '300'}, {'freeze_limit': 66, 'freeze_wait': 0},
    # Keys that are not settings are not checked.
    {'something_else': 'x'},
])
def test_valid_settings_pass_the_preflight(settings):
    assert watchdog_instances([{'name': 'chat'}], BASE, settings=settings) == [dict(BASE, name='chat')]


@pytest.mark.parametrize('key, value, expected', [
    ('interval', 0, 'vllm_watchdog_interval must be a number greater than 0 and at most 3600, got 0'),
    ('interval', 3601, 'vllm_watchdog_interval must be a number greater than 0 and at most 3600, got 3601'),
    ('interval', 'soon', "vllm_watchdog_interval must be a number greater than 0 and at most 3600, got 'soon'"),
    ('interval', None, 'vllm_watchdog_interval must be a number greater than 0 and at most 3600, got None'),
    ('interval', 'nan', "vllm_watchdog_interval must be a number greater than 0 and at most 3600, got 'nan'"),
    ('interval', float('inf'), 'vllm_watchdog_interval must be a number greater than 0 and at most 3600, got inf'),
    ('interval', [5], 'vllm_watchdog_interval must be a number greater than 0 and at most 3600, got [5]'),
    ('cooldown', -1, 'vllm_watchdog_cooldown must be a number from 0 and at most 604800, got -1'),
    ('unknown_limit', 0, 'vllm_watchdog_unknown_limit must be a number from 1 and at most 100000, got 0'),
    ('memory_fraction', 1.5, 'vllm_watchdog_memory_fraction must be a number greater than 0 and at most 1, got 1.5'),
    ('ready_timeout', 0, 'vllm_watchdog_ready_timeout must be a number greater than 0 and at most 86400, got 0'),
    ('reboot_timeout', 86401,
     'vllm_watchdog_reboot_timeout must be a number greater than 0 and at most 86400, got 86401'),
    ('stall_window', -0.5, 'vllm_watchdog_stall_window must be a number from 0 and at most 604800, got -0.5'),
    # The freeze watch's settings are checked before any check starts (a bad one used to fail only the background
    # check, which made every instance of the host unknown).
    ('freeze_limit', 0, 'vllm_watchdog_freeze_limit must be a number greater than 0 and at most 604800, got 0'),
    ('freeze_wait', 'forever',
     "vllm_watchdog_freeze_wait must be a number from 0 and at most 604800, got 'forever'"),
    # The gate's own bounds, before the check (the gate refused them after it).
    ('lock_timeout', 'nan', "vllm_watchdog_lock_timeout must be a number from 0 and at most 1000000000, got 'nan'"),
    ('history_max_bytes', 100,
     'vllm_watchdog_history_max_bytes must be a number from 4096 and at most 1000000000, got 100'),
])
def test_a_setting_out_of_range_is_named_with_its_range(key, value, expected):
    with pytest.raises(AnsibleFilterError) as caught:
        watchdog_instances([{'name': 'chat'}], BASE, settings={key: value})
    assert str(caught.value) == PREFIX + expected


@pytest.mark.parametrize('instance, expected', [
    ({'restart_method': 'kill'}, "chat: restart_method must be one of systemd, docker, compose, command, got 'kill'"),
    ({'restart_method': None}, 'chat: restart_method must be one of systemd, docker, compose, command, got None'),
    ({'restart_method': 'command'}, 'chat: restart_method command needs restart_command (an argv list)'),
    ({'restart_method': 'docker', 'service': ''}, 'chat: restart_method docker needs a service'),
    ({'restart_method': 'compose'}, 'chat: restart_method compose needs compose_project_dir'),
    ({'kind': 'router'}, "chat: kind must be backend or proxy, got 'router'"),
    ({'url': 'ftp://h/'}, "chat: url must be an absolute http:// or https:// URL of the server, got 'ftp://h/'"),
    ({'url': None}, "chat: url must be the server's URL, such as http://127.0.0.1:8000, got None"),
    # The mistakes of a new user, each named with what was meant (issue 24).
    ({'url': '127.0.0.1:8000'}, "chat: url must start with http:// or https://, got '127.0.0.1:8000': did you mean "
                                "'http://127.0.0.1:8000'?"),
    ({'url': 'http://gb10:8000/v1'}, "chat: url 'http://gb10:8000/v1' names the endpoint /v1, not the server: give the "
                                     "server's own URL, 'http://gb10:8000'"),
    ({'url': 'http://gb10:8000/metrics'}, "chat: url 'http://gb10:8000/metrics' names the endpoint /metrics"),
])
def test_an_instance_that_cannot_be_restarted_or_checked_is_named(instance, expected):
    with pytest.raises(AnsibleFilterError) as caught:
        watchdog_instances([dict({'name': 'chat'}, **instance)], BASE, settings={})
    assert str(caught.value).startswith(PREFIX + expected), str(caught.value)
    # The same sentences, returned (for a task that fails with them and shows no instance, which may carry a key).
    problems = watchdog_instances([dict({'name': 'chat'}, **instance)], BASE, settings={}, problems=True)
    assert len(problems) == 1 and problems[0].startswith(expected)


def test_problems_of_instances_that_are_right_are_none():
    assert watchdog_instances([{'name': 'chat'}], BASE, settings={}, problems=True) == []


def test_every_error_is_said_at_once_and_no_secret_is_shown():
    instances = [{'name': 'chat', 'url': 'ftp://admin:%s@h/' % SECRET, 'restart_method': 'command'},
                 {'name': 'embed', 'kind': 'x'}]
    with pytest.raises(AnsibleFilterError) as caught:
        watchdog_instances(instances, BASE, settings={'interval': 0, 'cooldown': -1})
    message = str(caught.value)
    assert message == PREFIX + '; '.join([
        'vllm_watchdog_cooldown must be a number from 0 and at most 604800, got -1',
        'vllm_watchdog_interval must be a number greater than 0 and at most 3600, got 0',
        'chat: restart_method command needs restart_command (an argv list)',
        "chat: url must be an absolute http:// or https:// URL of the server, got 'ftp://admin:********@h/'",
        "embed: kind must be backend or proxy, got 'x'"])
    assert SECRET not in message


def test_a_valid_command_method_needs_no_service():
    one = {'name': 'chat', 'restart_method': 'command', 'restart_command': ['/bin/true'], 'service': ''}
    assert watchdog_instances([one], BASE, settings={})[0]['restart_command'] == ['/bin/true']
