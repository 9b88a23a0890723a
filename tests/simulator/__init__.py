"""A faithful vLLM 0.32 simulator for tests, the demo and benchmarks (standard library only).

See README.md in this directory.  The public Python API is in :mod:`.client`:
:class:`SimulatorClient`, :class:`SimulatorProcess` and :func:`run_simulator`.
"""

from .client import SimulatorClient, SimulatorError, SimulatorProcess, run_simulator

__all__ = ["SimulatorClient", "SimulatorError", "SimulatorProcess", "run_simulator"]
