"""Python client of the simulator's control API, and a context manager that runs it.

    from tests.simulator.client import run_simulator

    with run_simulator(port_range="19000-19999") as sim:
        srv = sim.create(max_num_seqs=2, step_rate=200)
        sim.start_load(srv["id"], concurrency=3, max_tokens=10_000)
        ...                                  # scrape srv["url"] + "/metrics"
        sim.set_state(srv["id"], "hang")

Standard library only (urllib), so that it works in any test environment.
"""

import contextlib
import json
import os
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent


class SimulatorError(RuntimeError):
    """The control API answered with an error (``status`` holds the HTTP status)."""

    def __init__(self, message, status=None):
        super().__init__(message)
        self.status = status


class SimulatorClient:
    """Talks to the control endpoint of a running simulator."""

    def __init__(self, base_url, timeout=30.0):
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout
        self._opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))

    # -- plumbing -------------------------------------------------------------------------------
    def _call(self, method, path, body=None):
        data = None if body is None else json.dumps(body).encode("utf-8")
        req = urllib.request.Request(self.base_url + path, data=data, method=method,
                                     headers={"Content-Type": "application/json"})
        try:
            with self._opener.open(req, timeout=self.timeout) as resp:
                raw = resp.read()
        except urllib.error.HTTPError as exc:
            raw = exc.read()
            try:
                message = json.loads(raw).get("error", raw.decode("utf-8", "replace"))
            except ValueError:
                message = raw.decode("utf-8", "replace")
            raise SimulatorError(f"{method} {path}: {exc.code} {message}", exc.code) from None
        return json.loads(raw) if raw else None

    # -- simulator --------------------------------------------------------------------------------
    def health(self):
        return self._call("GET", "/health")

    def shutdown(self):
        return self._call("POST", "/shutdown")

    def tls(self):
        """``{"ca_path", "cert_path", "key_path", "backend"}`` (generates them on first use)."""
        return self._call("GET", "/tls")

    # -- servers ----------------------------------------------------------------------------------
    def create(self, **options):
        """Create one server; returns its info (``id``, ``port``, ``url``, ``ca_path``, ``config``, ...)."""
        return self._call("POST", "/servers", options)["servers"][0]

    def create_many(self, count, **options):
        return self._call("POST", "/servers", dict(options, count=count))["servers"]

    def create_each(self, specs):
        """Create several servers with their own options: ``specs`` is a list of option dicts."""
        return self._call("POST", "/servers", {"servers": list(specs)})["servers"]

    def list(self):
        return self._call("GET", "/servers")["servers"]

    def get(self, server_id):
        return self._call("GET", f"/servers/{server_id}")

    def configure(self, server_id, **options):
        return self._call("PATCH", f"/servers/{server_id}", options)

    def set_state(self, server_id, state, **params):
        return self._call("POST", f"/servers/{server_id}/state", dict(params, state=state))

    def delete(self, server_id):
        return self._call("DELETE", f"/servers/{server_id}")

    def delete_all(self):
        return self._call("DELETE", "/servers")

    # -- observation ------------------------------------------------------------------------------
    def stats(self, server_id):
        return self._call("GET", f"/servers/{server_id}/stats")

    def request_counts(self, server_id):
        """``{"GET /metrics": 3, "POST /v1/completions": 1, ...}``: every request the server received."""
        return self.stats(server_id)["requests"]

    def requests(self, server_id):
        """The most recent requests (up to 1000) with method, path, query, headers, body (``/v1/*``), status."""
        return self._call("GET", f"/servers/{server_id}/requests")["requests"]

    def reset_counts(self, server_id):
        return self._call("POST", f"/servers/{server_id}/reset_counts")

    def metrics_text(self, server_id, openmetrics=False):
        """The exposition as the server renders it now, without counting a request."""
        req = urllib.request.Request(f"{self.base_url}/servers/{server_id}/metrics?openmetrics={int(openmetrics)}")
        with self._opener.open(req, timeout=self.timeout) as resp:
            return resp.read().decode("utf-8")

    def wait_for(self, server_id, predicate, timeout=10.0, interval=0.02):
        """Poll ``stats()`` until ``predicate(stats)`` is true; return those stats (or raise TimeoutError)."""
        deadline = time.monotonic() + timeout
        while True:
            stats = self.stats(server_id)
            if predicate(stats):
                return stats
            if time.monotonic() > deadline:
                raise TimeoutError(f"condition not reached within {timeout}s; last stats: {json.dumps(stats)[:2000]}")
            time.sleep(interval)

    # -- load -------------------------------------------------------------------------------------
    def start_load(self, server_id, concurrency=1, max_tokens=1000, prompt_tokens=16, endpoint="/v1/completions",
                   repeat=False, deferred_seconds=0.0, engine=None):
        """Start ``concurrency`` requests inside the simulator (not over HTTP, so not in the request counts)."""
        body = {"concurrency": concurrency, "max_tokens": max_tokens, "prompt_tokens": prompt_tokens,
                "endpoint": endpoint, "repeat": repeat, "deferred_seconds": deferred_seconds, "engine": engine}
        return self._call("POST", f"/servers/{server_id}/load", body)["load"]

    def stop_load(self, server_id, abort=True):
        return self._call("DELETE", f"/servers/{server_id}/load?abort={int(bool(abort))}")["stopped"]


class SimulatorProcess:
    """The simulator as a child process.  ``start()`` returns a :class:`SimulatorClient`."""

    def __init__(self, port=0, host="127.0.0.1", port_range=None, python=None, startup_timeout=20.0,
                 extra_args=(), env=None, stderr=None):
        self.port = port
        self.host = host
        self.port_range = port_range
        self.python = python or sys.executable
        self.startup_timeout = startup_timeout
        self.extra_args = list(extra_args)
        self.env = env
        self.stderr = stderr
        self.proc = None
        self.client = None
        self.ready = None

    def command(self):
        cmd = [self.python, str(HERE / "sim.py"), "--host", self.host, "--control-port", str(self.port),
               "--exit-with-parent"]
        if self.port_range:
            pr = self.port_range
            cmd += ["--port-range", pr if isinstance(pr, str) else f"{pr[0]}-{pr[1]}"]
        return cmd + self.extra_args

    def start(self):
        env = dict(os.environ if self.env is None else self.env)
        env.setdefault("PYTHONUNBUFFERED", "1")
        self.proc = subprocess.Popen(  # pylint: disable=consider-using-with
            self.command(), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=self.stderr, env=env, text=True)
        line_box = []

        def read_first_line():
            line_box.append(self.proc.stdout.readline())
        reader = threading.Thread(target=read_first_line, daemon=True)
        reader.start()
        reader.join(self.startup_timeout)
        line = line_box[0] if line_box else ""
        try:
            ready = json.loads(line) if line else {}
        except ValueError:
            ready = {}
        if not isinstance(ready, dict) or ready.get("event") != "ready":
            self.stop()
            raise SimulatorError(f"simulator did not start: {line.strip() or 'no output'}")
        self.ready = ready
        # keep draining stdout so the child can never block on a full pipe
        threading.Thread(target=self._drain, daemon=True).start()
        self.client = SimulatorClient(ready["control_url"])
        return self.client

    def _drain(self):
        try:
            for dummy in self.proc.stdout:
                pass
        except (OSError, ValueError):
            pass

    def stop(self, timeout=10.0):
        if self.proc is None:
            return
        if self.proc.poll() is None:
            try:
                if self.client is not None:
                    self.client.shutdown()
            except (OSError, SimulatorError):
                pass
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.terminate()
                try:
                    self.proc.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait(timeout=5)
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        self.proc = None

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()


@contextlib.contextmanager
def run_simulator(port=0, host="127.0.0.1", port_range=None, python=None, startup_timeout=20.0,
                  extra_args=(), env=None):
    """Start the simulator in a child process; yield a :class:`SimulatorClient`; stop it on exit.

    ``port``: control port (0: the first free port of ``port_range``, or any free port).
    ``port_range``: ``"19000-19999"`` or ``(19000, 19999)``: where server ports are allocated.
    """
    proc = SimulatorProcess(port=port, host=host, port_range=port_range, python=python,
                            startup_timeout=startup_timeout, extra_args=extra_args, env=env)
    client = proc.start()
    try:
        yield client
    finally:
        proc.stop()
