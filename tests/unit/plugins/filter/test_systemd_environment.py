"""The Environment= lines of the rollout's systemd drop-in (the filter systemd_environment), table-driven."""

import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.modelops.vllm.plugins.filter._systemd_environment import FilterModule, systemd_environment


@pytest.mark.parametrize('environment, expected', [
    ({'VLLM_IMAGE': 'vllm/vllm-openai:v0.11.0'}, 'Environment="VLLM_IMAGE=vllm/vllm-openai:v0.11.0"'),
    # Quoted and escaped as systemd reads it; % doubled (a specifier otherwise).
    ({'VLLM_ARGS': 'say "hi" to 100% of C:\\'}, 'Environment="VLLM_ARGS=say \\"hi\\" to 100%% of C:\\\\"'),
    ({'NL': 'a\nb', 'TAB': 'a\tb'}, 'Environment="NL=a\\nb"\nEnvironment="TAB=a\\tb"'),
    # Non-ASCII kept; a value that is not a string is its text; an empty value is one.
    ({'U': u'\u00e9 \u00fc'}, u'Environment="U=\u00e9 \u00fc"'),
    ({'N': 8, 'B': True, 'F': 0.5, 'E': ''}, 'Environment="N=8"\nEnvironment="B=True"\nEnvironment="F=0.5"\nEnvironment="E="'),
    # In the dict's order, no newline after the last line; no variable, no line.
    ({'Z': '1', 'A': '2'}, 'Environment="Z=1"\nEnvironment="A=2"'),
    ({}, ''),
])
def test_the_lines(environment, expected):
    assert systemd_environment(environment) == expected


def test_not_a_dict_is_refused():
    with pytest.raises(AnsibleFilterError, match='expects a dict'):
        systemd_environment([('A', '1')])
    assert FilterModule().filters() == {'_systemd_environment': systemd_environment}
