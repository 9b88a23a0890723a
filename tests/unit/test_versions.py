"""The ansible-core range the collection claims is the range it is tested on.

meta/runtime.yml (requires_ansible: the oldest tested, no upper bound), the README and the execution environment's pin
agree with the versions the tiers install: requirements/test.txt (.venv, every tier) and requirements/versions/*.txt
(scripts/versions-tier.sh), and the version tier runs each of those, the newest also with INJECT_FACTS_AS_VARS=False.
"""

import glob
import os
import re

import yaml
from packaging.specifiers import SpecifierSet
from packaging.version import Version

from tests.support.paths import REPO


def read(*parts):
    with open(os.path.join(REPO, *parts)) as handle:
        return handle.read()


def pinned_core(text):
    match = re.search(r'^ansible-core==(\S+)$', text, re.M)
    assert match, text
    return Version(match.group(1))


def tier_runs():
    """(run, python, venv, inject, steps) of each line of the RUNS table of scripts/versions-tier.sh."""
    script = read('scripts', 'versions-tier.sh')
    table = re.search(r'^RUNS=\(\n(.*?)^\)', script, re.M | re.S).group(1)
    runs = [tuple(line.strip().strip('"').split(None, 4)) for line in table.splitlines() if line.strip()]
    assert runs and all(len(run) == 5 for run in runs), table
    return runs


VENVS = {os.path.basename(path)[:-len('.txt')]: pinned_core(read('requirements', 'versions', os.path.basename(path)))
         for path in glob.glob(os.path.join(REPO, 'requirements', 'versions', '*.txt'))}
MAIN = pinned_core(read('requirements', 'test.txt'))
TESTED = sorted(set(VENVS.values()) | {MAIN})
REQUIRES = SpecifierSet(yaml.safe_load(read('meta', 'runtime.yml'))['requires_ansible'])


def test_the_version_tier_installs_the_ends_of_the_range_and_every_tier_the_middle():
    assert len(TESTED) >= 3, TESTED
    assert TESTED[0] < MAIN < TESTED[-1], (TESTED, MAIN)
    for venv, version in VENVS.items():
        assert re.search(r'^ansible-core==%s$' % re.escape(str(version)), read('requirements', 'versions', venv + '.lock'),
                         re.M), venv


def test_requires_ansible_starts_at_the_oldest_tested_and_has_no_upper_bound():
    """The lower end is the oldest ansible-core the tiers run; there is no upper bound, since a bound warns every user
    the day a newer ansible-core ships (the community collection requirements forbid one)."""
    low, high = TESTED[0], TESTED[-1]
    for version in TESTED:
        assert version in REQUIRES, (version, REQUIRES)
    assert Version('%d.%d.0' % (low.major, low.minor)) in REQUIRES
    assert Version('%d.%d.99' % (low.major, low.minor - 1)) not in REQUIRES
    assert all(spec.operator in ('>=', '>') for spec in REQUIRES), REQUIRES
    assert Version('%d.%d.0' % (high.major, high.minor + 1)) in REQUIRES


def test_the_readme_states_the_supported_and_the_tested_range():
    low, high = TESTED[0], TESTED[-1]
    readme = read('README.md')
    claims = re.findall(r'ansible-core (\d+\.\d+) (?:to|or) (\d+\.\d+|newer)', readme)
    assert claims, 'the README states no ansible-core range'
    oldest, newest = '%d.%d' % (low.major, low.minor), '%d.%d' % (high.major, high.minor)
    assert set(claims) <= {(oldest, 'newer'), (oldest, newest)}, claims
    assert (oldest, 'newer') in claims, 'the README does not say the collection runs on %s or newer' % oldest
    assert 'tested on ansible-core %s to %s' % (oldest, newest) in ' '.join(readme.split()), 'the tested range'


def test_the_execution_environment_pins_a_version_of_the_range():
    ee = yaml.safe_load(read('execution-environment', 'execution-environment.yml'))
    package = ee['dependencies']['ansible_core']['package_pip']
    assert package.startswith('ansible-core=='), package
    assert Version(package.split('==', 1)[1]) in REQUIRES


def test_the_version_tier_runs_every_venv_and_the_newest_without_injected_facts():
    runs = tier_runs()
    assert {run[2] for run in runs} == set(VENVS)
    newest = max(VENVS, key=VENVS.get)
    by_venv = {}
    for dummy_run, dummy_python, venv, inject, steps in runs:
        by_venv.setdefault(venv, []).append((inject, steps.split()))
    for venv, configs in by_venv.items():
        # sanity and unit as the venv comes; the role's scenarios once, in either setting
        assert [steps for inject, steps in configs if inject == 'default' and {'sanity', 'unit'} <= set(steps)], \
            (venv, configs)
        assert sum(steps.count('molecule') for inject, steps in configs) == 1, (venv, configs)
    # the newest without injected facts (the stronger setting: a read of an injected fact fails, not warns)
    assert ('False', ['molecule']) in by_venv[newest], by_venv[newest]


def test_the_demo_installs_what_every_tier_runs_and_only_that():
    """requirements/demo.txt (make demo) pins the same ansible-core as requirements/test.txt, under the same lock, and
    adds nothing the test stack does not have: the demo runs what the tiers test."""
    demo = read('requirements', 'demo.txt')
    assert pinned_core(demo) == MAIN
    lines = [line.strip() for line in demo.splitlines() if line.strip() and not line.startswith('#')]
    assert lines[:3] == ['-c constraints.txt', '-r collection.txt', 'ansible-core==%s' % MAIN], lines
    test = [line.strip() for line in read('requirements', 'test.txt').splitlines()]
    assert set(lines) <= set(test), sorted(set(lines) - set(test))  # the same pins, nothing the tiers do not have
    assert len(lines) <= 4, lines  # the demo's own: ansible-core, requests (collection.txt), py-spy
