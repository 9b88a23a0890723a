"""watchdog_note: ' | <note>' after every result's decision and line, as unreachable.yml's Jinja loop did."""

import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.modelops.vllm.plugins.filter._watchdog_note import FilterModule, watchdog_note

SAID = 'unreachable command /bin/power-cycle gb10-02 exited 0'
DOWN = {'host': 'gb10-02', 'instance': '*', 'state': 'unreachable', 'decision': 'restart: down',
        'line': 'gb10-02/*: unreachable - the host does not answer', 'failed': True}


@pytest.mark.parametrize('results, note, expected', [
    ([DOWN], SAID, [dict(DOWN, decision='restart: down | ' + SAID,
                         line='gb10-02/*: unreachable - the host does not answer | ' + SAID)]),
    ([DOWN, dict(DOWN, instance='chat', decision='', line='x')], 'n',
     [dict(DOWN, decision='restart: down | n', line=DOWN['line'] + ' | n'),
      dict(DOWN, instance='chat', decision=' | n', line='x | n')]),
    # as Jinja's ~ said them
    ([{'decision': None, 'line': 3}], 'n', [{'decision': 'None | n', 'line': '3 | n'}]),
    ([{'decision': 'd', 'line': 'l'}], '', [{'decision': 'd | ', 'line': 'l | '}]),
    ([], SAID, []),
])
def test_the_note_follows_the_decision_and_the_line(results, note, expected):
    before = [dict(r) for r in results]
    assert watchdog_note(results, note) == expected
    assert results == before  # copies: the input is not changed


@pytest.mark.parametrize('results, message', [
    ('nope', 'expects a list of results, got str'),
    ([['x']], 'expects dicts, got list'),
    ([{'line': 'l'}], 'a result has no decision'),
    ([{}], 'a result has no decision and no line'),
])
def test_what_is_not_a_list_of_results_is_a_filter_error(results, message):
    with pytest.raises(AnsibleFilterError) as err:
        watchdog_note(results, 'n')
    assert message in str(err.value)


def test_the_filter_is_registered():
    assert FilterModule().filters() == {'_watchdog_note': watchdog_note}
