"""watchdog_reboot_done: reboot.yml's Jinja loops, in Python, with the same outcome. Which waits were not ready (the
watchdog_not_ready filter before) is its reboot_error, which reboot.yml records as a failed restart."""

import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.modelops.vllm.plugins.filter._watchdog_reboot_done import watchdog_reboot_done


def waited(name, ok, **more):
    result = {'_i': {'name': name}, 'changed': False, 'failed': False}
    if ok is not None:
        result['ready'] = {'ok': ok}
    result.update(more)
    return result


READY = waited('chat', True)
SLOW = waited('embed', False, msg='no answer in 600 s')


@pytest.mark.parametrize('results, expected', [
    ([READY, SLOW], [SLOW]),
    ([READY], []),
    ([waited('a', None)], [waited('a', None)]),                         # no ready at all: not ready
    ([waited('a', None, ready=None)], [waited('a', None, ready=None)]),  # ready empty (default(..., true))
    ([waited('a', None, ready={})], [waited('a', None, ready={})]),
    ([waited('a', None, ready={'ok': None})], [waited('a', None, ready={'ok': None})]),
    ([waited('a', 'yes')], []),                                          # truthy, as Jinja's if
    ([], []),
])
def test_not_ready_is_every_wait_whose_ready_ok_is_not_true(results, expected):
    done = watchdog_reboot_done({}, results, [])
    assert sorted(name for name, one in done.items() if 'reboot_error' in one) == sorted(r['_i']['name'] for r in expected)


@pytest.mark.parametrize('results', ['x', [1]])
def test_not_ready_of_what_is_not_results_is_a_filter_error(results):
    with pytest.raises(AnsibleFilterError):
        watchdog_reboot_done({}, results, [])


STUCK = {'state': 'idle', 'reason': 'no request'}


@pytest.mark.parametrize('done, ready, after, expected', [
    # ready again: its verdict after the reboot; not ready: the error, with its message
    ({}, [READY, SLOW], [STUCK, {'state': 'down'}],
     {'chat': {'after': 'idle', 'after_reason': 'no request'},
      'embed': {'reboot_error': 'not ready after the host reboot: no answer in 600 s'}}),
    # what was done before stays, merged
    ({'chat': {'error': 'restart failed', 'after': 'stuck'}, 'other': {'x': 1}}, [READY], [{'state': 'busy'}],
     {'chat': {'error': 'restart failed', 'after': 'busy', 'after_reason': None}, 'other': {'x': 1}}),
    # a wait without a message: '?'
    ({}, [waited('a', False)], [{}], {'a': {'reboot_error': 'not ready after the host reboot: ?'}}),
    # a message that is None is said as Jinja's ~ said it
    ({}, [waited('a', False, msg=None)], [{}], {'a': {'reboot_error': 'not ready after the host reboot: None'}}),
    # a skipped check (no state): none
    ({}, [READY], [{'skipped': True}], {'chat': {'after': None, 'after_reason': None}}),
    ({}, [READY], [], {'chat': {'after': None, 'after_reason': None}}),
    ({'a': {}}, [], [], {'a': {}}),
])
def test_after_the_reboot_each_instance_has_its_outcome(done, ready, after, expected):
    before = {k: dict(v) for k, v in done.items()}
    assert watchdog_reboot_done(done, ready, after) == expected
    assert done == before  # a copy


@pytest.mark.parametrize('done, names, error, gone, expected', [
    ({}, ['chat', 'embed'], 'Reboot | by ansible.builtin.reboot: timed out (the host did not come back)', True,
     {'chat': {'reboot_error': 'Reboot | by ansible.builtin.reboot: timed out (the host did not come back)',
               'unreachable': True},
      'embed': {'reboot_error': 'Reboot | by ansible.builtin.reboot: timed out (the host did not come back)',
                'unreachable': True}}),
    ({'chat': {'error': 'e', 'unreachable': True}}, ['chat'], 'why', False,
     {'chat': {'error': 'e', 'reboot_error': 'why', 'unreachable': False}}),
    ({'x': {}}, [], 'why', False, {'x': {}}),
])
def test_a_failed_reboot_gives_each_instance_its_error(done, names, error, gone, expected):
    assert watchdog_reboot_done(done, failed_for=names, error=error, unreachable=gone) == expected


@pytest.mark.parametrize('args, kwargs, message', [
    (([],), {}, 'expects a dict of what was done, got list'),
    (({}, 'x', []), {}, 'ready and after must be lists'),
    (({}, [{'ready': {'ok': True}}], [{}]), {}, 'without its instance'),
    (({}, [READY], [{}]), {'failed_for': ['chat']}, 'either ready and after, or failed_for'),
    (({},), {'failed_for': 'chat'}, 'failed_for must be a list'),
])
def test_what_cannot_be_merged_is_a_filter_error(args, kwargs, message):
    with pytest.raises(AnsibleFilterError) as err:
        watchdog_reboot_done(*args, **kwargs)
    assert message in str(err.value)
