"""Fixtures of the simulator's tests: one simulator process per test session.

Ports: the simulator allocates its control port and every server port from this pytest-xdist worker's share of
19000-19599 (the simulator-tests block of tests/support/ports.py; simhelpers.worker_port_range) (loopback only),
skipping ports that are taken.
"""

import pytest

from tests.simulator.client import SimulatorProcess
from simhelpers import FIXTURES, PORT_RANGE  # pylint: disable=import-error


@pytest.fixture(scope="session")
def sim_process():
    proc = SimulatorProcess(port_range=PORT_RANGE)
    proc.start()
    yield proc
    proc.stop()


@pytest.fixture
def sim(sim_process):
    """The control client; every server a test created is deleted after it."""
    client = sim_process.client
    yield client
    client.delete_all()


@pytest.fixture
def fixtures_dir():
    assert FIXTURES.is_dir(), f"the real captures are missing from the repository: {FIXTURES}"
    return FIXTURES
