"""Every block of loopback ports the tests, benchmarks, demo and sandbox use: one table, no overlaps.

Each user takes its ports from its own block (``span(name)`` for a simulator's ``port_range``,
``block(name)`` for a range), so two of them running at once (a test and a benchmark, two helpers'
test runs) never fight over a port. ``tests/unit/test_ports.py`` checks that no two blocks overlap
and that every molecule scenario's ``molecule_ports`` lies in the molecule block. Tests that need a
port for one raw socket server take an ephemeral one (port 0) instead.
"""

import socket

BLOCKS = {
    # name: (first, last), inclusive
    "real-vllm": (18100, 18149),            # tests/integration/conftest.py: real vLLM (CPU) servers
    "demo-vllm": (18150, 18189),            # scripts/demo.py: its real vLLM server
    "health-bench": (18190, 18199),         # benchmarks/health.py: its real vLLM server
    "simulator-tests": (19000, 19599),      # tests/unit/simulator/: the simulator's own tests
    "docs-examples": (19700, 19799),        # tests/integration/test_docs_examples.py
    "demo": (19900, 19999),                 # scripts/demo.py
    "molecule": (21000, 21499),             # molecule/*/molecule.yml, 50 per scenario
    "watchdog": (21500, 21899),             # tests/integration/test_watchdog.py: its simulator
    "watchdog-control": (21900, 21999),     # tests/integration/test_watchdog.py: the real server's control endpoint
    "proxy": (22000, 22199),                # tests/integration/test_proxy.py: its simulator
    "fleet": (22200, 22499),                # tests/integration/test_fleet.py: its fleets' simulators (100 each)
    "nginx": (22800, 22999),                # tests/harness/nginx.py: nginx in front of backends
    "incident": (23000, 23999),             # benchmarks/replay_incident.py
    "rollout": (24000, 24999),              # tests/integration/test_rollout.py
    "sshfleet-sshd": (25000, 25099),        # tests/integration/test_sshfleet.py: sshd (one port per fleet)
    "fleet-bench-sshd": (25100, 25109),     # benchmarks/fleet.py: sshd
    "fleet-sshd": (25110, 25119),           # tests/integration/test_fleet.py: sshd (one port per fleet)
    "multinode-sshd": (25120, 25129),       # tests/integration/test_multinode.py: sshd
    "fleet-bench": (25400, 25499),          # benchmarks/fleet.py: the simulator's control port
    "sshfleet": (25500, 25999),             # tests/integration/test_sshfleet.py: the simulators' control ports
    "prometheus": (26000, 26499),           # tests/integration/test_prometheus.py: its simulator
    "prometheus-services": (26900, 26999),  # tests/support/prometheus.py: Prometheus, Alertmanager, node_exporter
    "eda": (27000, 27499),                  # tests/integration/test_eda.py: its simulator
    "eda-bench": (27500, 27899),            # benchmarks/eda_latency.py: its simulator
    "eda-services": (27900, 27999),         # tests/support/eda.py: the rulebook's webhook, the stack
    "try": (28000, 28099),                  # scripts/try.py: the `make try` sandbox (fixed ports)
    "hostile": (28100, 28199),              # tests/integration/test_hostile_role.py: its simulator
    "field": (28200, 28399),                # tests/integration/test_field_signatures.py: its simulator
    "field-bench": (28400, 28599),          # benchmarks/field_signatures.py: its simulator
    "ladder": (28600, 28799),               # tests/integration/test_ladder.py: its simulator
    "local": (28800, 28899),                # tests/integration/test_local.py: its simulator
    "mistakes": (29000, 29399),             # tests/integration/test_watchdog_mistakes.py: its two simulators
    "hostile-restart": (29400, 29499),      # tests/integration/test_hostile_restart.py: its listeners
    "multinode": (29500, 29599),            # tests/integration/test_multinode.py: its fleet's simulator
}


def block(name):
    """(first, last) of a block."""
    return BLOCKS[name]


def span(name):
    """``"first-last"`` of a block, as a simulator's ``port_range``."""
    first, last = BLOCKS[name]
    return "%d-%d" % (first, last)


def bindable(port, host="127.0.0.1"):
    """Whether a server could listen on ``host:port`` now (a port in TIME_WAIT counts as free)."""
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True
