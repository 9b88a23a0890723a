"""Which integration tests may run side by side: one table, read by tests/integration/conftest.py.

The integration tier runs under pytest-xdist with ``--dist loadgroup`` (scripts/pytest-tier.sh): every test gets
an ``xdist_group``, and a group runs whole on one worker, in file order, while other workers run other groups. A
group is what must not run beside itself:

* a test file, by default: each file owns its port block (tests/support/ports.py), its module-scoped servers and
  its fixed addresses, and two runs of one file collide;
* ``real-vllm``: every test marked ``vllm``, whatever its file. Real vLLM servers run one worker at a time, so the
  harness's limit of two live servers (tests/integration/conftest.py ``MAX_LIVE_SERVERS``, counted in one
  process) holds for the whole run, and no two heavy real-vLLM tests share the 2 cores;
* the files below that share something more than a file (a block of ports another file scans, a daemon's port).

Groups are handed out longest first (``MINUTES``: measured, a group's own time in a run of the tier on the project's
2-core machine), so that the longest chain starts at once and the short ones fill in beside it; a file not in
the table counts as a minute. Within a group, tests keep their order (class- and module-scoped servers, tests
that stop their server last).
"""

import os

REAL_VLLM = 'real-vllm'

# file (under tests/integration/) -> its group, when not its own
SHARED = {
    # Prometheus, Alertmanager and node_exporter on tests/support/prometheus.py's block, the rulebook's webhook on
    # tests/support/eda.py's, both taken by scanning for a free port: one stack at a time.
    'test_prometheus.py': 'prometheus-eda',
    'test_eda.py': 'prometheus-eda',
    'test_hostile_eda.py': 'prometheus-eda',
}

# group -> minutes (the longest first), measured
MINUTES = {
    # 2026-12-04, a fresh-clone `make test` (4 workers, both cores 94 % busy; .cache/durations/integration.json): a
    # group's own seconds / 60
    REAL_VLLM: 14.5,
    'test_try': 6.3,
    'test_ladder': 5.5,
    'test_multinode': 3.9,  # its SSH tests (its real-vLLM test is in that group)
    'test_fleet': 3.8,
    'test_rollout': 3.6,
    'test_publish': 3.5,
    'test_field_signatures': 2.7,
    'test_sshfleet': 2.7,
    'test_local': 2.6,
    'prometheus-eda': 2.6,
    'test_hostile': 2.3,
    'test_hostile_role': 2.2,
}


def group_of(item):
    """The xdist group of an integration test item."""
    if item.get_closest_marker('vllm'):
        return REAL_VLLM
    name = os.path.basename(str(item.fspath))
    return SHARED.get(name, os.path.splitext(name)[0])


def tag(item, group):
    """Put ``item`` in ``group`` for ``--dist loadgroup``: its node id ends in ``@group``, which is what the
    scheduler reads. pytest-xdist 3.8 does it for an ``xdist_group`` mark by setting ``item._nodeid``, which pytest
    9.2 no longer reads (``Node.nodeid`` is ``str(item._id)``): no test had a group, and the workers ran real vLLM
    servers, and the tests of one file's port block, side by side. Done here for both kinds of pytest."""
    nodeid = '%s@%s' % (item.nodeid, group)
    if hasattr(item, '_id'):
        from _pytest.nodes import coerce_node_id  # pylint: disable=import-outside-toplevel
        item._id = coerce_node_id(nodeid)
    else:
        item._nodeid = nodeid
    if item.nodeid != nodeid:
        raise RuntimeError('cannot put %s in the xdist group %s: this pytest keeps its node id elsewhere'
                           % (item.nodeid, group))


def order(items, groups):
    """``items`` sorted by their group's minutes, longest first; a stable sort: each group keeps its order."""
    rank = {}
    for item in items:
        group = groups[item]
        rank.setdefault(group, (-MINUTES.get(group, 1.0), len(rank)))
    items.sort(key=lambda item: rank[groups[item]])
