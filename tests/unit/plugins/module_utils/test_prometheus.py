"""The exposition parser, against prometheus_client as an oracle."""

import glob
import math
import os

import pytest
from hypothesis import given, settings, strategies as st
from prometheus_client.parser import text_string_to_metric_families

from ansible_collections.modelops.vllm.plugins.module_utils._prometheus import MAX_LINES, ExpositionError, parse

from tests.support.paths import FIXTURES

CAPTURES = sorted(glob.glob(os.path.join(FIXTURES, '*.prom')))


def _norm(value):
    return 'nan' if math.isnan(value) else value


def ours(text):
    return sorted((n, tuple(sorted(labels)), _norm(v)) for n, labels, v in parse(text))


def oracle(text):
    out = []
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out.append((sample.name, tuple(sorted(sample.labels.items())), _norm(sample.value)))
    return sorted(out)


def test_captures_are_there():
    # The real captures are the ground truth of these tests: never pass on none.
    assert len(CAPTURES) >= 8, 'real /metrics captures not found in %s' % FIXTURES


@pytest.mark.parametrize('path', CAPTURES, ids=os.path.basename)
def test_real_capture_matches_oracle(path):
    with open(path) as handle:
        text = handle.read()
    got = ours(text)
    assert got == oracle(text)
    assert len(got) > 300


def test_wanted_filters_but_still_validates():
    text = 'a 1\nb{x="1"} 2\nc 3\n'
    assert parse(text, {'b'}) == [('b', (('x', '1'),), 2.0)]
    assert parse(text, lambda name: name != 'b') == [('a', (), 1.0), ('c', (), 3.0)]
    with pytest.raises(ExpositionError):
        parse('a 1\nb{x="1"} oops\n', {'a'})


@pytest.mark.parametrize('text, expected', [
    ('x NaN\n', [('x', (), 'nan')]),
    ('x +Inf\n', [('x', (), float('inf'))]),
    ('x -Inf\n', [('x', (), float('-inf'))]),
    ('x 1.79600461413e+09\n', [('x', (), 1796004614.13)]),
    ('x 1 1700000000000\n', [('x', (), 1.0)]),
    ('x{a="q\\"uote",b="back\\\\slash",c="new\\nline"} 1\n',
     [('x', (('a', 'q"uote'), ('b', 'back\\slash'), ('c', 'new\nline')), 1.0)]),
    ('x{a="has } brace, and comma"} 2\n', [('x', (('a', 'has } brace, and comma'),), 2.0)]),
    ('x{a="1",} 3\n', [('x', (('a', '1'),), 3.0)]),
    ('# HELP x help\n# TYPE x gauge\n\nx 4\n', [('x', (), 4.0)]),
    ('', []),
])
def test_valid_inputs(text, expected):
    got = [(n, labels, _norm(v)) for n, labels, v in parse(text)]
    assert got == expected


@pytest.mark.parametrize('text, reason', [
    ('<!DOCTYPE html>\n<html><body>502 Bad Gateway</body></html>\n', 'HTML'),
    ('<html>\n', 'HTML'),
    ('vllm:num_requests_running{engine="0"} 1\nvllm:num_requests_wa', 'truncated'),
    ('x{a="1"} 1\nx{a="1"} 2\n', 'twice'),
    # One series however its labels are written: a trailing comma, spaces, {} for none, another order, escapes.
    ('vllm:num_requests_running{model_name="tiny"} 0\nvllm:num_requests_running{model_name="tiny",} 3\n', 'twice'),
    ('x{a="1"} 0\nx{ a = "1" , } 3\n', 'twice'),
    ('x 0\nx{} 3\n', 'twice'),
    ('x{} 0\nx 3\n', 'twice'),
    ('x{} 0\nx{ } 3\n', 'twice'),
    ('x{a="1",b="2"} 0\nx{b="2",a="1",} 3\n', 'twice'),
    ('x{a="q\\\\"} 0\nx{a="q\\\\",} 3\n', 'twice'),
    ('x{a="1",a="2"} 1\n', 'repeated'),
    ('x{a="unterminated} 1\n', 'unterminated'),
    ('x{a=1} 1\n', 'malformed label'),
    ('x{1a="1"} 1\n', 'malformed label'),
    ('x\n', 'without a value'),
    ('x one\n', 'invalid value'),
    ('x 1 2 3\n', 'expected a value'),
    ('x 1 notatime\n', 'invalid value'),
    ('9x 1\n', 'invalid metric name'),
    ('{"error": "not found"}\n', 'JSON'),
    ('x{a="1"b="2"} 1\n', 'malformed label'),
    ('x{a="1",,b="2"} 1\n', 'malformed label'),
])
def test_invalid_inputs_raise_with_line_and_reason(text, reason):
    with pytest.raises(ExpositionError) as info:
        parse(text)
    assert reason in str(info.value)
    assert info.value.line_no >= 1


def test_a_body_of_many_tiny_lines_is_refused_at_the_line_cap():
    # 16 MB of "a1 1" lines would be four million samples (half a minute of parsing); the parser stops at the cap.
    with pytest.raises(ExpositionError) as info:
        parse(''.join('a%d 1\n' % i for i in range(MAX_LINES + 1)), {'b'})
    assert info.value.line_no == MAX_LINES + 1 and 'over %d lines' % MAX_LINES in str(info.value)
    assert info.value.line is None  # nothing of the body in the message
    # The look-alike: as many lines of real vLLM as the 16 MB cap of a read holds (about 200,000) all parse.
    with open(CAPTURES[0]) as handle:
        real = [line for line in handle.read().splitlines() if line.startswith('vllm:')]
    body = ''.join('%s{copy="%d"} 1\n' % (line.split('{')[0].split(' ')[0], i)
                   for i in range(200000 // len(real) + 1) for line in real)
    assert len(body) > 10 * 1000 * 1000
    assert len(parse(body, {'vllm:num_requests_running'})) > 200


def test_error_names_the_line():
    with pytest.raises(ExpositionError) as info:
        parse('a 1\nb 2\nc nope\n')
    assert info.value.line_no == 3
    assert str(info.value).startswith('line 3: invalid value')


# -- generated expositions, compared with the oracle --------------------------

_names = st.from_regex(r'[a-zA-Z_:][a-zA-Z0-9_:]{0,20}', fullmatch=True)
_label_names = st.from_regex(r'[a-zA-Z][a-zA-Z0-9_]{0,10}', fullmatch=True)
_label_values = st.text(alphabet=st.characters(blacklist_categories=('Cs',), blacklist_characters='\r'),
                        max_size=12)
_values = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(min_value=-10 ** 12, max_value=10 ** 12).map(float),
)


def _escape(value):
    return value.replace('\\', '\\\\').replace('\n', '\\n').replace('"', '\\"')


def _fmt(value):
    if math.isnan(value):
        return 'NaN'
    if math.isinf(value):
        return '+Inf' if value > 0 else '-Inf'
    return repr(value)


@st.composite
def expositions(draw):
    families = draw(st.dictionaries(_names, st.lists(
        st.dictionaries(_label_names, _label_values, max_size=3), min_size=1, max_size=4, unique_by=lambda d: tuple(sorted(d.items()))),
        min_size=1, max_size=5))
    lines = []
    for name, label_sets in families.items():
        lines.append('# HELP %s generated' % name)
        lines.append('# TYPE %s gauge' % name)
        for labels in label_sets:
            inner = ','.join('%s="%s"' % (k, _escape(v)) for k, v in sorted(labels.items()))
            lines.append('%s%s %s' % (name, '{%s}' % inner if labels else '', _fmt(draw(_values))))
    return '\n'.join(lines) + '\n'


@settings(max_examples=300, deadline=None)
@given(expositions())
def test_generated_matches_oracle(text):
    assert ours(text) == oracle(text)
