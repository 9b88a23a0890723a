"""check_by_host and check_counts: fleet_check.yml's two Jinja loops, in Python; the count is watchdog_summary's."""

import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.modelops.vllm.plugins.filter._check_by_host import check_by_host
from ansible_collections.modelops.vllm.plugins.filter._check_counts import check_counts
from ansible_collections.modelops.vllm.plugins.filter._watchdog_summary import watchdog_summary
from ansible_collections.modelops.vllm.plugins.plugin_utils._counts import said_counts


def v(name, state='idle'):
    return {'name': name, 'state': state, 'line': '%s: %s - x' % (name, state)}


@pytest.mark.parametrize('results, expected', [
    ([v('a'), v('b/chat'), v('b/embed', 'busy'), v('c')],
     {'a': [v('a')], 'b': [v('b/chat'), v('b/embed', 'busy')], 'c': [v('c')]}),
    ([v('b/2'), v('a'), v('b/1')], {'b': [v('b/2'), v('b/1')], 'a': [v('a')]}),  # the order of the input
    ([v('h/x/y')], {'h': [v('h/x/y')]}),                                         # up to the first /
    ([], {}),
])
def test_the_verdicts_are_grouped_by_the_host_of_their_name(results, expected):
    grouped = check_by_host(results)
    assert grouped == expected and list(grouped) == list(expected)


@pytest.mark.parametrize('results', ['x', [{'state': 'idle'}], [1]])
def test_what_is_not_named_verdicts_is_a_filter_error(results):
    with pytest.raises(AnsibleFilterError):
        check_by_host(results)


@pytest.mark.parametrize('results, expected, said', [
    ([v('a'), v('b', 'stuck'), v('c'), v('d', 'busy'), v('e', 'stuck')],
     {'idle': 2, 'stuck': 2, 'busy': 1}, '2 idle, 2 stuck, 1 busy'),  # in the order they first appear
    ([v('a', 'down')], {'down': 1}, '1 down'),
    ([{'name': 'a'}], {'unknown': 1}, '1 unknown'),
    ([], {}, ''),
])
def test_the_states_are_counted_in_the_order_they_appear(results, expected, said):
    counts = check_counts(results)
    assert counts == expected and list(counts) == list(expected)
    assert said_counts(counts) == said
    # the same count as the watchdog's summary
    assert watchdog_summary([dict(r, host='h', instance=r['name']) for r in results])['counts'] == expected


@pytest.mark.parametrize('results, message', [('x', 'check_counts expects a list of results, got str'),
                                              ([None], 'check_counts expects dicts, got NoneType')])
def test_counts_of_what_is_not_results_is_a_filter_error(results, message):
    with pytest.raises(AnsibleFilterError) as err:
        check_counts(results)
    assert str(err.value) == message


def test_said_counts_follows_the_order_it_is_given():
    assert said_counts({'idle': 1, 'stuck': 3}, ['stuck', 'idle']) == '3 stuck, 1 idle'
