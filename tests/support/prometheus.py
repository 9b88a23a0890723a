"""Real Prometheus, Alertmanager and node_exporter on this machine, for the tests of the rules in
``extensions/prometheus/`` (and, later, the Event-Driven Ansible tests).

Debian's binaries (``scripts/ensure-prometheus.sh`` installs them): ``prometheus`` and ``promtool``
(package ``prometheus``), ``prometheus-alertmanager`` and ``amtool`` (``prometheus-alertmanager``),
``prometheus-node-exporter`` (``prometheus-node-exporter``). Every daemon runs as a direct child
with its own config, data directory and log file in a work directory the caller owns, listens on
one loopback port, and gets ``PR_SET_PDEATHSIG`` so it ends if the Python process that started it
dies abruptly. The packaged services are never used.

Usage::

    from tests.support import prometheus as prom

    with contextlib.ExitStack() as stack:
        hook = stack.enter_context(prom.WebhookReceiver(prom.free_port()))
        am = stack.enter_context(prom.Alertmanager(workdir / "am", prom.free_port(), hook.url))
        server = stack.enter_context(prom.Prometheus(
            workdir / "prom", prom.free_port(), rule_files=[rules],
            scrape_configs=[prom.static_job("vllm", ["127.0.0.1:8000"])],
            alertmanager=am.address))
        server.wait_for(lambda: server.query('up') != [], "a first scrape")
        hook.wait_for(lambda p: p["alerts"][0]["labels"]["alertname"] == "VllmEngineStuck")

Ports: :func:`free_port` hands out loopback ports of ``PORT_RANGE`` (26000-26999 by default: the
simulator of ``tests/integration/test_prometheus.py`` takes 26000-26499, these daemons 26900-26999),
each at most once per process, skipping ports something listens on.

Standard library only.
"""

import ctypes
import http.server
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

from tests.support.ports import block

REPO = Path(__file__).resolve().parents[2]
RULES_DIR = REPO / "extensions" / "prometheus"
RULES = RULES_DIR / "vllm.rules.yml"
RULES_TEMPLATE = RULES_DIR / "vllm.rules.yml.j2"
RULE_TESTS_DIR = RULES_DIR / "tests"
ENSURE = "scripts/ensure-prometheus.sh"

# Where Debian puts the binaries; PATH is searched first.
TOOLS = {
    "prometheus": ("prometheus", "/usr/bin/prometheus"),
    "promtool": ("promtool", "/usr/bin/promtool"),
    "alertmanager": ("prometheus-alertmanager", "/usr/bin/prometheus-alertmanager"),
    "amtool": ("amtool", "/usr/bin/amtool"),
    "node_exporter": ("prometheus-node-exporter", "/usr/bin/prometheus-node-exporter"),
}

PORT_RANGE = block("prometheus-services")
_HANDED_OUT = set()
_PORT_LOCK = threading.Lock()


class PrometheusError(RuntimeError):
    """A daemon did not start, did not become ready, or answered with an error."""


class ToolMissing(PrometheusError):
    """A binary is not installed."""


# ------------------------------------------------------------------------------------- tools

def tool(name):
    """The path of one of :data:`TOOLS` (``prometheus``, ``promtool``, ``alertmanager``, ``amtool``,
    ``node_exporter``), or :class:`ToolMissing` telling how to install it."""
    command, default = TOOLS[name]
    found = shutil.which(command) or (default if os.access(default, os.X_OK) else None)
    if not found:
        raise ToolMissing(f"{command} is not installed ({default} missing): run {ENSURE} "
                          f"(Debian's prometheus, prometheus-alertmanager, prometheus-node-exporter)")
    return found


def version(name):
    """The first line of ``<tool> --version``."""
    proc = subprocess.run([tool(name), "--version"], capture_output=True, text=True, timeout=30, check=False)
    return ((proc.stdout or "") + (proc.stderr or "")).strip().splitlines()[0]


def promtool(*args, cwd=None, timeout=120):
    """Run promtool; returns the CompletedProcess (text, stdout and stderr captured)."""
    return subprocess.run([tool("promtool"), *map(str, args)], capture_output=True, text=True, cwd=cwd,
                          timeout=timeout, check=False)


def amtool(*args, timeout=60):
    return subprocess.run([tool("amtool"), *map(str, args)], capture_output=True, text=True, timeout=timeout,
                          check=False)


def render_rules(dest, variables=None, template=RULES_TEMPLATE, timeout=120):
    """Render ``vllm.rules.yml.j2`` to ``dest`` with ``ansible.builtin.template``, as users do
    (``variables``: e.g. ``{"vllm_prometheus_stuck_seconds": 10}``). Returns ``dest``."""
    dest = Path(dest)
    bindir = os.path.dirname(sys.executable)
    ansible = os.path.join(bindir, "ansible")
    if not os.path.exists(ansible):
        ansible = shutil.which("ansible") or "ansible"
    extra = dict(variables or {}, ansible_python_interpreter=sys.executable)
    env = dict(os.environ, ANSIBLE_NOCOLOR="1", ANSIBLE_LOCALHOST_WARNING="False",
               ANSIBLE_INVENTORY_UNPARSED_WARNING="False", ANSIBLE_RETRY_FILES_ENABLED="False")
    cmd = [ansible, "localhost", "-c", "local", "-i", "localhost,", "-m", "ansible.builtin.template",
           "-a", f"src={template} dest={dest}", "-e", json.dumps(extra)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env, check=False)
    if proc.returncode != 0 or not dest.is_file():
        raise PrometheusError(f"rendering {template} failed (rc {proc.returncode}):\n{proc.stdout[-3000:]}"
                              f"\n{proc.stderr[-2000:]}")
    return dest


# ------------------------------------------------------------------------------------- ports

def _listening(port, host="127.0.0.1"):
    with socket.socket() as sock:
        sock.settimeout(0.2)
        return sock.connect_ex((host, port)) == 0


def free_port(port_range=PORT_RANGE, host="127.0.0.1"):
    """A loopback port of ``port_range`` that nothing listens on and that this process has not
    handed out before."""
    first, last = port_range
    with _PORT_LOCK:
        for port in range(first, last + 1):
            if port in _HANDED_OUT or _listening(port, host):
                continue
            with socket.socket() as sock:
                try:
                    sock.bind((host, port))
                except OSError:
                    continue
            _HANDED_OUT.add(port)
            return port
    raise PrometheusError(f"no free port in {first}-{last}")


# ------------------------------------------------------------------------------------- HTTP

_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def http_get(url, timeout=10.0):
    """``(status, body text)``; ``(None, error)`` when nothing answers."""
    try:
        with _OPENER.open(url, timeout=timeout) as resp:
            return resp.status, resp.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode("utf-8", "replace")
    except (OSError, ValueError) as exc:
        return None, str(exc)


def wait_until(predicate, what, timeout=60.0, interval=0.25, describe=None):
    """Call ``predicate()`` until it returns something true; return that, or raise TimeoutError
    naming ``what`` (and ``describe()``'s text, if given)."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            extra = ""
            if describe is not None:
                try:
                    extra = "\n" + str(describe())
                except Exception as exc:  # noqa: BLE001 - only for the message
                    extra = f"\n(describe failed: {exc})"
            raise TimeoutError(f"{what}: not reached within {timeout:.0f} s{extra}")
        time.sleep(interval)


def _set_pdeathsig():  # runs in the child between fork and exec
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG: SIGTERM when the test process dies
    except OSError:
        pass


def _yaml(data):
    """JSON is YAML: every config here is written as JSON."""
    return json.dumps(data, indent=2) + "\n"


# ------------------------------------------------------------------------------------- daemons

class Daemon:
    """One binary as a child process: ``start()`` waits until ``ready_path`` answers 200 on its
    port, ``stop()`` sends SIGTERM (SIGKILL after ``timeout``). A context manager."""

    name = "daemon"
    ready_path = "/-/ready"

    def __init__(self, workdir, port, host="127.0.0.1", ready_timeout=60.0):
        self.workdir = Path(workdir)
        self.port = port
        self.host = host
        self.ready_timeout = ready_timeout
        self.proc = None
        self.log_path = self.workdir / f"{self.name}.log"
        self._log = None

    @property
    def address(self):
        return f"{self.host}:{self.port}"

    @property
    def url(self):
        return f"http://{self.address}"

    def argv(self):
        raise NotImplementedError

    def prepare(self):
        """Write config files (before the start)."""

    def start(self):
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.prepare()
        if _listening(self.port, self.host):
            raise PrometheusError(f"{self.name}: port {self.port} is already taken")
        self._log = open(self.log_path, "ab")  # pylint: disable=consider-using-with
        self.proc = subprocess.Popen(  # pylint: disable=consider-using-with
            self.argv(), cwd=self.workdir, stdin=subprocess.DEVNULL, stdout=self._log,
            stderr=subprocess.STDOUT, preexec_fn=_set_pdeathsig)
        try:
            wait_until(self._ready, f"{self.name} ready on {self.url}{self.ready_path}",
                       timeout=self.ready_timeout, describe=self.log_tail)
        except BaseException:
            self.stop()
            raise
        return self

    def _ready(self):
        if self.proc.poll() is not None:
            raise PrometheusError(f"{self.name} exited with {self.proc.returncode} before it was ready:\n"
                                  f"{self.log_tail()}")
        status, _body = http_get(self.url + self.ready_path, timeout=2)
        return status == 200

    def running(self):
        return self.proc is not None and self.proc.poll() is None

    def stop(self, timeout=15.0):
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.terminate()
                try:
                    self.proc.wait(timeout=timeout)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait(timeout=10)
            self.proc = None
        if self._log is not None:
            self._log.close()
            self._log = None

    def log_tail(self, chars=4000):
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    def __repr__(self):
        return f"<{type(self).__name__} {self.url} pid={self.proc.pid if self.proc else None}>"


def static_job(name, targets, **extra):
    """A scrape config with static targets (``host:port`` strings)."""
    return dict({"job_name": name, "static_configs": [{"targets": list(targets)}]}, **extra)


class Prometheus(Daemon):
    """A Prometheus server with its own config and TSDB in ``workdir``."""

    name = "prometheus"

    def __init__(self, workdir, port, scrape_configs, rule_files=(), alertmanager=None,
                 scrape_interval="1s", evaluation_interval="1s", scrape_timeout=None, extra_args=(), **kwargs):
        super().__init__(workdir, port, **kwargs)
        self.scrape_configs = list(scrape_configs)
        self.rule_files = [str(Path(p).resolve()) for p in rule_files]
        self.alertmanager = alertmanager
        self.scrape_interval = scrape_interval
        self.evaluation_interval = evaluation_interval
        self.scrape_timeout = scrape_timeout or scrape_interval
        self.extra_args = list(extra_args)
        self.config_path = self.workdir / "prometheus.yml"
        self.data_dir = self.workdir / "data"

    def config(self):
        config = {
            "global": {"scrape_interval": self.scrape_interval, "scrape_timeout": self.scrape_timeout,
                       "evaluation_interval": self.evaluation_interval},
            "rule_files": self.rule_files,
            "scrape_configs": self.scrape_configs,
        }
        if self.alertmanager:
            config["alerting"] = {"alertmanagers": [{"static_configs": [{"targets": [self.alertmanager]}]}]}
        return config

    def prepare(self):
        self.config_path.write_text(_yaml(self.config()))
        check = promtool("check", "config", self.config_path)
        if check.returncode != 0:
            raise PrometheusError(f"promtool check config {self.config_path}:\n{check.stdout}{check.stderr}")

    def argv(self):
        return [tool("prometheus"), f"--config.file={self.config_path}", f"--storage.tsdb.path={self.data_dir}",
                f"--web.listen-address={self.address}", "--log.level=info", *self.extra_args]

    # -- HTTP API --------------------------------------------------------------------------------
    def api(self, path, **params):
        """``GET /api/v1/<path>``; returns ``data`` (raises PrometheusError on an error answer)."""
        query = ("?" + urllib.parse.urlencode(params)) if params else ""
        status, body = http_get(f"{self.url}/api/v1/{path}{query}", timeout=30)
        try:
            answer = json.loads(body)
        except ValueError:
            answer = {}
        if status != 200 or answer.get("status") != "success":
            raise PrometheusError(f"GET /api/v1/{path}{query}: {status} {body[:1000]}")
        return answer["data"]

    def query(self, expr, at=None):
        """An instant query: ``[{"metric": {...}, "value": [t, "v"]}, ...]``."""
        params = {"query": expr}
        if at is not None:
            params["time"] = f"{at:.3f}"
        return self.api("query", **params)["result"]

    def values(self, expr, at=None):
        """An instant query as ``[(labels, float), ...]``."""
        return [(r["metric"], float(r["value"][1])) for r in self.query(expr, at=at)]

    def alerts(self):
        """Active (pending and firing) alerts: ``[{"labels", "annotations", "state", "activeAt", ...}]``."""
        return self.api("alerts")["alerts"]

    def rules(self):
        return self.api("rules")["groups"]

    def targets(self):
        return self.api("targets")["activeTargets"]

    def wait_for(self, predicate, what, timeout=60.0, interval=0.25):
        return wait_until(predicate, what, timeout=timeout, interval=interval,
                          describe=lambda: json.dumps(self.alerts())[:2000])


class Alertmanager(Daemon):
    """An Alertmanager (no cluster) that sends every alert to one webhook, each alert in a group
    of its own (grouped by ``alertname``, ``instance``, ``engine``), with short waits."""

    name = "alertmanager"

    def __init__(self, workdir, port, webhook_url, group_wait="1s", group_interval="1s",
                 repeat_interval="1h", group_by=("alertname", "instance", "engine"), **kwargs):
        super().__init__(workdir, port, **kwargs)
        self.webhook_url = webhook_url
        self.group_wait = group_wait
        self.group_interval = group_interval
        self.repeat_interval = repeat_interval
        self.group_by = list(group_by)
        self.config_path = self.workdir / "alertmanager.yml"
        self.data_dir = self.workdir / "data"

    def config(self):
        return {
            "route": {"receiver": "webhook", "group_by": self.group_by, "group_wait": self.group_wait,
                      "group_interval": self.group_interval, "repeat_interval": self.repeat_interval},
            "receivers": [{"name": "webhook",
                           "webhook_configs": [{"url": self.webhook_url, "send_resolved": True}]}],
        }

    def prepare(self):
        self.config_path.write_text(_yaml(self.config()))
        check = amtool("check-config", self.config_path)
        if check.returncode != 0:
            raise PrometheusError(f"amtool check-config {self.config_path}:\n{check.stdout}{check.stderr}")

    def argv(self):
        # --cluster.listen-address= (empty) turns off the gossip cluster, which would bind :9094.
        return [tool("alertmanager"), f"--config.file={self.config_path}", f"--storage.path={self.data_dir}",
                f"--web.listen-address={self.address}", "--cluster.listen-address=", "--log.level=info"]

    def alerts(self):
        status, body = http_get(f"{self.url}/api/v2/alerts", timeout=30)
        if status != 200:
            raise PrometheusError(f"GET /api/v2/alerts: {status} {body[:1000]}")
        return json.loads(body)


class NodeExporter(Daemon):
    """node_exporter with only the textfile collector, reading ``*.prom`` files of ``textfile_dir``."""

    name = "node_exporter"
    ready_path = "/metrics"

    def __init__(self, workdir, port, textfile_dir, collectors=("textfile",), **kwargs):
        super().__init__(workdir, port, **kwargs)
        self.textfile_dir = Path(textfile_dir)
        self.collectors = list(collectors)

    def argv(self):
        return [tool("node_exporter"), f"--web.listen-address={self.address}", "--collector.disable-defaults",
                *[f"--collector.{c}" for c in self.collectors],
                f"--collector.textfile.directory={self.textfile_dir}"]

    def metrics(self):
        status, body = http_get(f"{self.url}/metrics", timeout=30)
        if status != 200:
            raise PrometheusError(f"GET /metrics: {status} {body[:1000]}")
        return body


# ------------------------------------------------------------------------------------- webhook

class WebhookReceiver:
    """A small HTTP server that records what Alertmanager posts to it.

    ``payloads``: ``[{"received": unix time, "payload": the JSON body}, ...]`` in arrival order.
    ``alerts()`` flattens them: one dict per alert with ``received``, ``status``, ``labels``,
    ``annotations``, ``startsAt``, ``endsAt``.
    """

    def __init__(self, port, host="127.0.0.1", path="/alerts"):
        self.host = host
        self.port = port
        self.path = path
        self.payloads = []
        self.errors = []
        self._lock = threading.Lock()
        self._server = None
        self._thread = None

    @property
    def url(self):
        return f"http://{self.host}:{self.port}{self.path}"

    def start(self):
        receiver = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 - http.server's name
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length)
                try:
                    payload = json.loads(raw)
                except ValueError as exc:
                    with receiver._lock:  # pylint: disable=protected-access
                        receiver.errors.append(f"{self.path}: not JSON ({exc}): {raw[:200]!r}")
                    self.send_response(400)
                    self.end_headers()
                    return
                with receiver._lock:  # pylint: disable=protected-access
                    receiver.payloads.append({"received": time.time(), "path": self.path, "payload": payload})
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args):  # keep the test output quiet
                pass

        self._server = http.server.ThreadingHTTPServer((self.host, self.port), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="webhook", daemon=True)
        self._thread.start()
        return self

    def stop(self):
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._thread.join(10)
            self._server = None

    def alerts(self):
        out = []
        with self._lock:
            payloads = list(self.payloads)
        for entry in payloads:
            for alert in entry["payload"].get("alerts", []):
                out.append(dict(alert, received=entry["received"]))
        return out

    def wait_for(self, predicate, what, timeout=60.0):
        """Wait until some recorded alert satisfies ``predicate(alert)``; return the first such alert."""
        def found():
            for alert in self.alerts():
                if predicate(alert):
                    return alert
            return None
        return wait_until(found, what, timeout=timeout,
                          describe=lambda: json.dumps([(a["status"], a["labels"]) for a in self.alerts()])[:3000])

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()
