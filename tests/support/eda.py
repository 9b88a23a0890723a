"""The event-driven restart of issue 11 on this machine, every part real: simulated vLLM servers
scraped by Prometheus with the collection's rules, Alertmanager, ansible-rulebook running the
collection's rulebook (``extensions/eda/rulebooks/vllm_stuck.yml``) with its Alertmanager source
plugin, the watchdog playbook it runs, the stand-ins of ``tests/standins/`` as the service manager,
and node_exporter serving the watchdog's textfile. For ``tests/integration/test_eda.py`` and
``benchmarks/eda_latency.py``.

Usage::

    from tests.support import eda

    with run_simulator(port_range="27000-27499") as sim, eda.EdaStack(sim, workdir) as stack:
        stack.settle()                       # every engine in its first state, seen by Prometheus
        path = stack.hang_and_wait()         # hang the hung server; wait for its restart and the run
        path.times, path.restarts, ...       # what happened, when

What it needs: ``ansible-rulebook`` in the venv (``requirements/test.txt``), Java 17+
(``scripts/ensure-eda.sh``), Debian's Prometheus, Alertmanager and node_exporter
(``scripts/ensure-prometheus.sh``). A missing one raises :class:`prometheus.ToolMissing` naming the
script. Ports: Prometheus, Alertmanager, node_exporter and the rulebook's webhook take free ports
of ``PORT_RANGE`` (27900-27999); the caller's simulator has its own range (27000-27899).

Every process started here is stopped by :meth:`EdaStack.stop` (the context manager's exit), also
after a failure: the daemons by their pid, ansible-rulebook with every process it started (the
ansible-playbook runs of its actions run in sessions of their own, so they are found by parent pid).
"""

import calendar
import contextlib
import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import yaml

from tests.support import ansible_run
from tests.support import prometheus as prom
from tests.support.alert_routes import rulebook_alerts
from tests.support.ports import block
from tests.support.standins import Standins

REPO = prom.REPO

RULEBOOK_FILE = REPO / "extensions" / "eda" / "rulebooks" / "vllm_stuck.yml"
RULEBOOK = "modelops.vllm.vllm_stuck"          # the rulebook, by its name in the collection
SOURCE_PLUGIN = REPO / "extensions" / "eda" / "plugins" / "event_source" / "alertmanager.py"
ENSURE = "scripts/ensure-eda.sh"
PORT_RANGE = block("eda-services")
STUCK = "VllmEngineStuck"
# The alerts the rulebook acts on (VllmWatchdogCheck and VllmEngineStuck), read from the rulebook. With
# the rules rendered short (SHORT) both fire together, each in its own notification: the rulebook's one
# action may answer either, whichever arrives first, so the event path's times start from the first.
TRIGGERS = tuple(sorted(rulebook_alerts()))

# The rules rendered short, as in tests/integration/test_prometheus.py: stuck after 10 s without
# progress (each evaluation looks back 4 s), restarts visible 2 minutes, down after 5 s.
SHORT = {
    "vllm_prometheus_stuck_seconds": 10,
    "vllm_prometheus_progress_window_seconds": 4,
    "vllm_prometheus_restart_window_seconds": 120,
    "vllm_prometheus_down_seconds": 5,
}
# The watchdog's check with short waits (it reads /metrics three times, `interval` apart).
FREEZE = 6
FAST = {
    "vllm_watchdog_interval": 1,
    # A freeze limit longer than a run's two waits: the alert's run must keep watching the hang until it has lasted
    # the limit, then restart in that same run (the default limit, 300 s, is test_long_step.py's).
    "vllm_watchdog_freeze_limit": FREEZE,
    "vllm_watchdog_probe_timeout": 5,
    "vllm_watchdog_metrics_timeout": 5,
    "vllm_watchdog_ready_delay": 1,
    "vllm_watchdog_ready_timeout": 60,
}
LONG = 10_000_000  # max_tokens: decoding for the whole run

# The servers, one inventory host each (gb10-<name>), and the state each is in before the hang.
# `hung` has two data-parallel engines that both hang: two stuck alerts for one host, one run.
SERVERS = {
    "busy": {"options": {}, "load": "decode"},                       # decoding all the time
    "prefill": {"options": {"chunk_tokens": 4}, "load": "prefill"},  # 30,000-token prompt in 4-token chunks
    "idle": {"options": {}, "load": None},                           # nothing in flight
    "hung": {"options": {"engines": 2}, "load": "decode"},           # hangs with work in flight
    "restarted": {"options": {}, "load": "decode"},                  # restarted, then busy again
    "down": {"options": {}, "load": "decode"},                       # the process goes away
}
FIRST_STATES = {("busy", "0"): "busy", ("prefill", "0"): "busy", ("idle", "0"): "idle", ("hung", "0"): "busy",
                ("hung", "1"): "busy", ("restarted", "0"): "busy", ("down", "0"): "busy"}

PROMETHEUS_UA = "Prometheus/"
WATCHDOG_UA = "modelops.vllm.health"


def host_of(name):
    return "gb10-" + name


def service_of(name):
    return "vllm-" + name


# ------------------------------------------------------------------------------------- tools

def java_version():
    """``openjdk version "17.0.15" ...``; :class:`prom.ToolMissing` naming scripts/ensure-eda.sh when
    there is no Java 17 or newer (what ansible-rulebook finds: $JAVA_HOME/bin/java, else java on PATH)."""
    home = os.environ.get("JAVA_HOME")
    java = os.path.join(home, "bin", "java") if home else shutil.which("java")
    if not java or not os.access(java, os.X_OK):
        raise prom.ToolMissing(f"Java is not installed (ansible-rulebook needs Java 17+): run {ENSURE}")
    proc = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=60, check=False)
    text = (proc.stderr or proc.stdout).strip()
    found = re.search(r'version "(\d+)', text)
    if not found or int(found.group(1)) < 17:
        raise prom.ToolMissing(f"{java} is not Java 17+ ({text.splitlines()[0] if text else 'no version'}): "
                               f"run {ENSURE}")
    return text.splitlines()[0]


def rulebook_bin():
    path = Path(sys.executable).with_name("ansible-rulebook")
    if not path.exists():
        raise prom.ToolMissing(f"{path} is missing: run `make venv` (requirements/test.txt pins ansible-rulebook); "
                               f"Java comes from {ENSURE}")
    return str(path)


def versions():
    """Every tool of the event path with its version; a missing one raises :class:`prom.ToolMissing`."""
    out = dict((name, prom.version(name)) for name in ("prometheus", "alertmanager", "node_exporter"))
    out["java"] = java_version()
    proc = subprocess.run([rulebook_bin(), "--version"], capture_output=True, text=True, timeout=120, check=False)
    out["ansible-rulebook"] = (proc.stdout.splitlines() or ["?"])[0].strip()
    return out


# ------------------------------------------------------------------------------------- processes

def _children():
    """{parent pid: [child pids]} of every process, from /proc."""
    tree = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as handle:
                stat = handle.read()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        tree.setdefault(ppid, []).append(int(entry))
    return tree


def descendants(pid):
    """Every process started by ``pid``, children first found first."""
    tree, out, todo = _children(), [], [pid]
    while todo:
        for child in tree.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def _signal(pids, sig):
    for pid in pids:
        try:
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


def _parse_log_time(stamp):
    """``2026-12-01 11:21:11,363`` (Python logging's asctime, local time) as a Unix time."""
    whole, _sep, millis = stamp.partition(",")
    return time.mktime(time.strptime(whole, "%Y-%m-%d %H:%M:%S")) + int(millis or 0) / 1000.0


class Rulebook:
    """``ansible-rulebook --rulebook modelops.vllm.vllm_stuck`` as a child process, its webhook on
    ``host:port`` (the rulebook's ``vllm_eda_*`` variables), its log (``-vv``) in ``workdir``."""

    LINE = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) - (\S+) - (\w+) - (.*)$")

    def __init__(self, workdir, port, inventory, env, token=None, rulebook=RULEBOOK, host="127.0.0.1",
                 ready_timeout=120.0, variables=None):
        self.workdir = Path(workdir)
        self.port = port
        self.host = host
        self.inventory = str(inventory)
        self.env = dict(env)
        self.token = token
        self.rulebook = rulebook
        self.ready_timeout = ready_timeout
        self.variables = dict(variables or {})  # more of the rulebook's vllm_eda_* variables (vllm_eda_inventory)
        self.log_path = self.workdir / "ansible-rulebook.log"
        self.vars_path = self.workdir / "eda-vars.yml"
        self.proc = None
        self._log = None

    @property
    def url(self):
        return f"http://{self.host}:{self.port}"

    @property
    def webhook_url(self):
        return self.url + "/alerts"

    def start(self):
        self.workdir.mkdir(parents=True, exist_ok=True)
        variables = {"vllm_eda_host": self.host, "vllm_eda_port": self.port}
        if self.token:
            variables["vllm_eda_token"] = self.token
        variables.update(self.variables)
        self.vars_path.write_text(yaml.safe_dump(variables))
        if prom._listening(self.port, self.host):  # pylint: disable=protected-access
            raise prom.PrometheusError(f"ansible-rulebook: port {self.port} is already taken")
        argv = [rulebook_bin(), "--rulebook", self.rulebook, "--inventory", self.inventory,
                "--vars", str(self.vars_path), "-vv"]
        self._log = open(self.log_path, "ab")  # pylint: disable=consider-using-with
        self.proc = subprocess.Popen(  # pylint: disable=consider-using-with,subprocess-popen-preexec-fn
            argv, cwd=self.workdir, env=self.env, stdin=subprocess.DEVNULL, stdout=self._log,
            stderr=subprocess.STDOUT, preexec_fn=prom._set_pdeathsig)  # pylint: disable=protected-access
        try:
            prom.wait_until(self._ready, f"ansible-rulebook's webhook on {self.url}", timeout=self.ready_timeout,
                            interval=0.2, describe=self.log_tail)
        except BaseException:
            self.stop()
            raise
        return self

    def _ready(self):
        if self.proc.poll() is not None:
            raise prom.PrometheusError(f"ansible-rulebook exited with {self.proc.returncode} before its webhook "
                                       f"answered:\n{self.log_tail()}")
        status, body = prom.http_get(self.url + "/", timeout=2)
        return status == 200 and body == "up"

    def stop(self, timeout=20.0):
        """SIGTERM to ansible-rulebook and everything it started (found before the signal, by parent
        pid), SIGKILL to whatever is left after ``timeout``."""
        if self.proc is not None:
            pids = descendants(self.proc.pid)
            if self.proc.poll() is None:
                self.proc.terminate()
            _signal(pids, signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline and any(os.path.exists(f"/proc/{pid}") for pid in pids):
                time.sleep(0.1)
            _signal([pid for pid in pids if os.path.exists(f"/proc/{pid}")], signal.SIGKILL)
            self.proc = None
        if self._log is not None:
            self._log.close()
            self._log = None

    def running(self):
        return self.proc is not None and self.proc.poll() is None

    def text(self):
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def log_tail(self, chars=6000):
        return self.text()[-chars:]

    def summary(self, playbook_lines=60):
        """What to show after a failure: the source's and the rule engine's own lines (not the Java
        rules engine's debug output), then the end of the playbook output it printed."""
        text = self.text().splitlines()
        keep = [line for line in text if self.LINE.match(line) and (
            "alertmanager: " in line or "call_action" in line or " - ERROR - " in line or " - WARNING - " in line)]
        playbook = [line for line in text if not self.LINE.match(line) and not line.startswith(("20", "\t", " at "))]
        return "\n".join(["-- ansible-rulebook:"] + keep[-40:] + ["-- playbook output:"] + playbook[-playbook_lines:])

    def lines(self, logger=None, contains=None):
        """``[(unix time, logger, level, message)]`` of the Python log lines."""
        out = []
        for line in self.text().splitlines():
            found = self.LINE.match(line)
            if not found:
                continue
            stamp, name, level, message = found.groups()
            if (logger is None or name == logger) and (contains is None or contains in message):
                out.append((_parse_log_time(stamp), name, level, message))
        return out

    def received(self):
        """The source plugin's "N alert(s) received" lines: ``[(unix time, message)]``."""
        return [(t, m) for t, _n, _l, m in self.lines(contains="alertmanager: ") if " received on " in m]

    def actions(self, action="run_playbook"):
        """When the rule engine called an action (``call_action <action>``, a debug line)."""
        return [t for t, _n, _l, m in self.lines(contains="call_action ") if m.strip() == f"call_action {action}"]

    def recaps(self):
        """Every PLAY RECAP of the playbook runs it printed: ``[{host: {"ok": n, "changed": n, ...}}]``."""
        out, current = [], None
        for line in self.text().splitlines():
            if line.startswith("PLAY RECAP"):
                current = {}
                out.append(current)
                continue
            if current is not None:
                found = re.match(r"^(\S+)\s+:\s+(.*)$", line)
                if found and "=" in found.group(2):
                    current[found.group(1)] = dict((k, int(v)) for k, v in re.findall(r"(\w+)=(\d+)", found.group(2)))
                elif line.strip() and not found:
                    current = None
        return out

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()


class BearerAlertmanager(prom.Alertmanager):
    """Alertmanager whose webhook sends ``Authorization: Bearer <token>``, as the docs configure it."""

    def __init__(self, *args, token=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.token = token

    def config(self):
        config = super().config()
        if self.token:
            for receiver in config["receivers"]:
                for hook in receiver.get("webhook_configs", []):
                    hook["http_config"] = {"authorization": {"type": "Bearer", "credentials": self.token}}
        return config


# ------------------------------------------------------------------------------------- the stack

class EventPath:
    """What :meth:`EdaStack.hang_and_wait` saw: ``times`` (Unix times of each step), the stand-ins'
    restarts, the recaps of the rulebook's playbook runs."""

    def __init__(self):
        self.times = {}
        self.restarts = []
        self.recaps = []

    def parts(self):
        """Seconds between the steps, in order (None where a step was not seen)."""
        t = self.times

        def between(a, b):
            return round(t[b] - t[a], 2) if t.get(a) is not None and t.get(b) is not None else None

        return {
            "hang_to_alert_fired_s": between("hang", "alert_fired"),
            "alert_fired_to_webhook_s": between("alert_fired", "webhook"),
            "webhook_to_rulebook_action_s": between("webhook", "rulebook_action"),
            "rulebook_action_to_first_check_read_s": between("rulebook_action", "first_check_read"),
            "first_check_read_to_restart_command_s": between("first_check_read", "restart_command"),
            "rulebook_action_to_restart_command_s": between("rulebook_action", "restart_command"),
            "hang_to_restart_command_s": between("hang", "restart_command"),
            "restart_command_to_run_done_s": between("restart_command", "run_done"),
        }


class EdaStack:
    """Every part of the event path, started in :meth:`start`, stopped in :meth:`stop`."""

    def __init__(self, sim, workdir, settings=None, port_range=PORT_RANGE, servers=None):
        self.sim = sim
        self.workdir = Path(workdir)
        self.settings = dict(SHORT if settings is None else settings)
        self.port_range = port_range
        self.spec = dict(SERVERS if servers is None else servers)
        self.servers = {}
        self.token = secrets.token_hex(16)
        self.textdir = self.workdir / "textfile"
        self.state_root = self.workdir / "state"
        self.standins = Standins(self.workdir, sim.base_url, log_name="standins-argv.log")
        self.inventory = self.workdir / "inventory.yml"
        self.rules = None
        self.node = self.alertmanager = self.rulebook = self.prometheus = None
        self._stack = contextlib.ExitStack()
        self.t_start = None

    # -- set-up ----------------------------------------------------------------------------------
    def instance(self, name):
        return "127.0.0.1:%d" % self.servers[name]["port"]

    def by_instance(self):
        return dict((self.instance(name), name) for name in self.servers)

    def _create_servers(self):
        for name, spec in self.spec.items():
            # Up for two hours by their own process_start_time_seconds: past the watchdog's start-up grace.
            self.servers[name] = self.sim.create(**dict({"process_age": 7200}, **spec["options"]))
        for name, spec in self.spec.items():
            srv = self.servers[name]
            if spec["load"] == "decode":
                engines = int(spec["options"].get("engines", 1))
                for engine in range(engines):
                    self.sim.start_load(srv["id"], concurrency=2, max_tokens=LONG,
                                        engine=engine if engines > 1 else None)
            elif spec["load"] == "prefill":
                self.sim.start_load(srv["id"], concurrency=1, prompt_tokens=30000, max_tokens=1)
        for name, spec in self.spec.items():
            if spec["load"] == "decode":
                self.sim.wait_for(self.servers[name]["id"], lambda s: s["totals"]["generation_tokens"] > 0)

    def _write_inventory(self):
        hosts = {}
        for name, srv in self.servers.items():
            hosts[host_of(name)] = {
                "ansible_connection": "local",
                "ansible_python_interpreter": sys.executable,
                "vllm_url": srv["url"],
                "vllm_watchdog_service": service_of(name),
                "vllm_watchdog_state_dir": str(self.state_root / host_of(name)),
                "vllm_watchdog_textfile": str(self.textdir / ("%s.prom" % host_of(name))),
            }
        # No privilege escalation (the play's vllm_watchdog_become): the stand-ins and the state dirs need none.
        group_vars = dict(FAST, vllm_watchdog_restart_method="systemd", vllm_watchdog_become=False)
        self.inventory.write_text(yaml.safe_dump({"all": {"children": {"vllm": {"hosts": hosts, "vars": group_vars}}}}))
        started = round(time.time() - 7200, 3)
        self.standins.write(dict((service_of(name), {"server": srv["id"], "state": "running", "started_at": started,
                                                     "load_seconds": 1})
                                 for name, srv in self.servers.items()))

    def _rulebook_env(self):
        return ansible_run.env(dict(self.standins.env(), ANSIBLE_ASYNC_DIR=str(self.workdir / "async")))

    def _port(self):
        return prom.free_port(self.port_range)

    def start(self):
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.textdir.mkdir(exist_ok=True)
        try:
            self.rules = prom.render_rules(self.workdir / "vllm.rules.yml", self.settings)
            self._create_servers()
            self._write_inventory()
            self.node = self._stack.enter_context(prom.NodeExporter(self.workdir / "node", self._port(), self.textdir))
            self.rulebook = self._stack.enter_context(Rulebook(
                self.workdir / "rulebook", self._port(), self.inventory, self._rulebook_env(), token=self.token))
            self.alertmanager = self._stack.enter_context(BearerAlertmanager(
                self.workdir / "alertmanager", self._port(), self.rulebook.webhook_url, token=self.token))
            vllm_job = {"job_name": "vllm", "static_configs": [
                {"targets": [self.instance(name)], "labels": {"vllm_host": host_of(name)}} for name in self.servers]}
            self.prometheus = self._stack.enter_context(prom.Prometheus(
                self.workdir / "prometheus", self._port(), rule_files=[self.rules], alertmanager=self.alertmanager.address,
                scrape_configs=[vllm_job, prom.static_job("node", [self.node.address])]))
            self.t_start = time.time()
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self):
        """Stop every daemon (also after a failure); the simulated servers are deleted."""
        errors = []
        try:
            self._stack.close()
        except Exception as exc:  # noqa: BLE001 - delete the servers too, then report
            errors.append(repr(exc))
        for srv in self.servers.values():
            try:
                self.sim.delete(srv["id"])
            except Exception as exc:  # noqa: BLE001
                errors.append(repr(exc))
        self.servers = {}
        if errors:
            raise prom.PrometheusError("stopping the EDA stack: " + "; ".join(errors))

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    # -- reading ---------------------------------------------------------------------------------
    def states(self):
        """{(server name, engine): state} as Prometheus records it now."""
        names = self.by_instance()
        return dict(((names.get(labels["instance"], labels["instance"]), labels["engine"]), labels["state"])
                    for labels, _value in self.prometheus.values("engine:vllm_state"))

    def settle(self, timeout=90):
        """Wait until Prometheus sees every engine in its first state and nothing alerts."""
        expected = dict((key, state) for key, state in FIRST_STATES.items() if key[0] in self.servers)
        prom.wait_until(lambda: self.states() == expected, "every engine in its first state: %s" % expected,
                        timeout=timeout, describe=lambda: "states now: %s\nalerts: %s" % (
                            self.states(), self.prometheus.alerts()))
        return time.time()

    def requests(self, name):
        return self.sim.requests(self.servers[name]["id"])

    def watchdog_requests(self, name, since=0.0):
        """The requests the watchdog's check sent to a server (its User-Agent), after ``since``."""
        return [r for r in self.requests(name) if r["time"] >= since
                and (r.get("headers") or {}).get("user-agent", "").startswith(WATCHDOG_UA)]

    def trigger_alerts_in_alertmanager(self):
        return [a for a in self.alertmanager.alerts() if a["labels"].get("alertname") in TRIGGERS]

    # -- the event path ----------------------------------------------------------------------------
    def hang_and_wait(self, others=True, timeout=180):
        """Hang every engine of ``hung`` (and restart ``restarted``, stop ``down``, when ``others``);
        wait for the stand-in's restart of ``hung``, then for the rulebook's playbook run to end and
        the stuck alert to resolve. Returns an :class:`EventPath`."""
        path = EventPath()
        hung = self.servers["hung"]
        self.sim.set_state(hung["id"], "hang")
        path.times["hang"] = time.time()
        if others:
            if "restarted" in self.servers:
                self.sim.set_state(self.servers["restarted"]["id"], "restart", load_seconds=0.5)
                path.times["other_restart"] = time.time()
            if "down" in self.servers:
                self.sim.set_state(self.servers["down"]["id"], "stop")
                path.times["other_stop"] = time.time()
            if "restarted" in self.servers:
                self.sim.wait_for(self.servers["restarted"]["id"], lambda s: s["status"] == "listening")
                self.sim.start_load(self.servers["restarted"]["id"], concurrency=2, max_tokens=LONG)

        seen = {}

        def restarted():
            for alert in self.trigger_alerts_in_alertmanager():   # while it is active: its FiredAt
                if alert["labels"].get("vllm_host") == host_of("hung"):
                    seen.setdefault((alert["labels"]["alertname"], alert["labels"].get("engine")), alert)
            # the watchdog stops, waits for the memory, then starts: the start is the restart
            return [e for e in self.standins.restart_entries() if e["argv"] == ["systemctl", "start", service_of("hung")]]

        prom.wait_until(restarted, "the stand-in's restart of %s" % service_of("hung"), timeout=timeout, interval=0.2,
                        describe=lambda: "alerts: %s\nstand-ins: %s\nstates: %s\n%s" % (
                            json.dumps(self.alertmanager.alerts())[:3000], self.standins.calls(), self.states(),
                            self.rulebook.summary()))
        path.times["restart_command"] = restarted()[0]["time"]
        prom.wait_until(self.rulebook.recaps, "the end of the rulebook's playbook run", timeout=timeout,
                        describe=self.rulebook.summary)
        path.times["run_done"] = time.time()
        prom.wait_until(lambda: not [a for a in self.prometheus.alerts() if a["labels"].get("alertname") == STUCK],
                        "the stuck alerts resolved in Prometheus", timeout=60,
                        describe=lambda: json.dumps(self.prometheus.alerts())[:3000])

        fired = [prom_time(a["startsAt"]) for a in seen.values()]
        path.times["alert_fired"] = min(fired) if fired else None
        firing = ["%s firing %s" % (name, self.instance("hung")) for name in TRIGGERS]
        received = [t for t, message in self.rulebook.received()
                    if t >= path.times["hang"] - 1 and any(f in message for f in firing)]
        path.times["webhook"] = received[0] if received else None
        actions = [t for t in self.rulebook.actions() if t >= path.times["hang"] - 1]
        path.times["rulebook_action"] = actions[0] if actions else None
        reads = self.watchdog_requests("hung", since=path.times["hang"])
        path.times["first_check_read"] = reads[0]["time"] if reads else None
        path.restarts = self.standins.restart_entries()
        path.recaps = self.rulebook.recaps()
        return path


def prom_time(rfc3339):
    """Alertmanager's ``2026-12-01T10:31:52.123456789Z`` as a Unix time."""
    head, _sep, frac = rfc3339.rstrip("Z").partition(".")
    return calendar.timegm(time.strptime(head, "%Y-%m-%dT%H:%M:%S")) + float("0." + (frac or "0")[:6])
