"""The loopback port blocks of tests/support/ports.py do not overlap, and the molecule scenarios keep to theirs."""

import glob
import os
import re

from tests.support.paths import REPO
from tests.support.ports import BLOCKS, block


def test_no_two_blocks_overlap():
    spans = sorted((first, last, name) for name, (first, last) in BLOCKS.items())
    for first, last, name in spans:
        assert first <= last, name
    for (a_first, a_last, a_name), (b_first, b_last, b_name) in zip(spans, spans[1:]):
        assert a_last < b_first, '%s %s-%s overlaps %s %s-%s' % (a_name, a_first, a_last, b_name, b_first, b_last)


def test_every_molecule_scenario_keeps_to_the_molecule_block():
    first, last = block('molecule')
    found = []
    for path in glob.glob(os.path.join(REPO, 'molecule', '*', 'molecule.yml')):
        with open(path) as handle:
            match = re.search(r'molecule_ports:\s*(\d+)-(\d+)', handle.read())
        assert match, path
        low, high = int(match.group(1)), int(match.group(2))
        assert first <= low <= high <= last, (path, low, high)
        found.append((low, high))
    found.sort()
    assert len(found) >= 8
    for (a_low, a_high), (b_low, b_high) in zip(found, found[1:]):
        assert a_high < b_low, found
