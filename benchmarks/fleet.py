"""A watchdog pass over a fleet reached over real SSH: the role against a plain loop and the no-op floor.

Every host is an inventory host of its own, reached over real SSH on its own loopback address
(tests/support/sshfleet.py: Debian's sshd started directly, one simulated vLLM server per host on
``http://127.x.y.z:8000``), forks 5 (AWX's default), ``interval: 5``, with Ansible's ``pipelining`` off
(its default) and on (what the collection recommends and its execution environment sets). Side by side, in
one run:

  ping        a no-op play (one ``ansible.builtin.ping`` per host): the floor of anything that visits
              every host
  naive       a plain per-host ``modelops.vllm.health`` task: each host's waits are paid in its own
              task, five hosts at a time
  role        ``playbooks/watchdog.yml``, the checks on each host (the default): the check starts in
              the background on every host, then one gate run per host collects and decides
  role-ctrl   ``playbooks/watchdog.yml`` with ``vllm_watchdog_check_on_controller``: one module run on
              the controller checks every instance of the play, then one gate run per host
  controller  ``playbooks/fleet_check.yml`` from the controller (report only, no per-host module run)

The fleet is healthy (mostly busy, a few in a long chunked prefill, some idle): the common case,
where the work done per host is the cost. The goal of issue 9: a healthy watchdog pass takes at
most ``2 x interval + 2 x ping + 10 s``, the ping play measured in the same run. Each run reports
its wall time, what it judged, the SSH connections and sessions sshd logged per host, the module
runs on each host (a callback counts the tasks that ran a module on the host), and the peak memory
of the ansible-playbook process tree on the controller.

    .venv/bin/python benchmarks/fleet.py                    # 10, 50, 100 hosts, every approach, both settings
    .venv/bin/python benchmarks/fleet.py --sizes 10 --approaches ping,role --pipelining on

Writes benchmarks/results/fleet.json and benchmarks/results/fleet.md (``--out DIR``, ``--name NAME`` to change).
sshd on port 25100, host addresses from 127.0.30.2, the simulator on 25400-25499 (tests/support/ports.py;
options to change).
The :class:`Fleet` here also serves tests/integration/test_fleet.py.
"""

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # run as a script: the repository root, for tests.support
    sys.path.insert(0, str(REPO))

from tests.support import ansible_run  # noqa: E402  pylint: disable=wrong-import-position,import-error
from tests.support import servers as states  # noqa: E402  pylint: disable=wrong-import-position
from tests.support.sshfleet import SSHFleet  # noqa: E402  pylint: disable=wrong-import-position
from tests.support.ports import block, span  # noqa: E402  pylint: disable=wrong-import-position

PLAYBOOK = REPO / "playbooks" / "fleet_check.yml"
WATCHDOG_PLAYBOOK = REPO / "playbooks" / "watchdog.yml"
CALLBACKS = REPO / "benchmarks" / "callback_plugins"
APPROACHES = ("ping", "naive", "role", "role-ctrl", "controller")
SSH_PORT = block("fleet-bench-sshd")[0]
FIRST_ADDRESS = "127.0.30.2"
SIM_PORTS = span("fleet-bench")

# What each simulated state must be judged.
EXPECTED = {"busy": "busy", "prefill": "busy", "idle": "idle", "hung": "stuck", "down": "down"}

# Servers that have been up for two hours (their own process_start_time_seconds): past the start-up grace.
# At 8 steps a second a long prefill (tests/support/servers.py) lasts about 15 minutes.
SERVER_OPTIONS = dict(states.UP_TWO_HOURS, step_rate=8)
# The planned state -> the state of tests/support/servers.py that makes it.
MAKE = {"busy": "busy", "prefill": "prefill", "idle": "idle", "hung": "stuck", "down": "down"}


# --------------------------------------------------------------------------------------- the fleet

def plan(size, healthy=False):
    """The simulated state of each of ``size`` hosts: mostly busy, some idle, a few in a long prefill;
    unless ``healthy``, also a few hung and one down."""
    down = 0 if healthy else 1
    hung = 0 if healthy else max(1, size // 25)
    idle = max(1, size // 8)
    prefill = max(1, size // 50)
    busy = size - down - hung - idle - prefill
    if busy < 1:
        raise ValueError("a fleet needs at least 5 hosts")
    states = ["busy"] * busy + ["prefill"] * prefill + ["idle"] * idle + ["hung"] * hung + ["down"] * down
    # spread them over the inventory, so every batch of forks gets some of each
    order = sorted(range(size), key=lambda i: ((i * 37) % size))
    spread = [None] * size
    for slot, state in zip(order, states):
        spread[slot] = state
    return spread


def mix(states):
    """``"100: 85 busy, 2 prefill, 12 idle"``."""
    kinds = [s for s in ("busy", "prefill", "idle", "hung", "down") if s in states]
    return "%d: %s" % (len(states), ", ".join("%d %s" % (states.count(s), s) for s in kinds))


def local_host_vars(**hostvars):
    """The variables of an inventory host that is not one of the fleet's (reached on this machine)."""
    return dict({"ansible_connection": "local", "ansible_python_interpreter": sys.executable}, **hostvars)


class Fleet(object):
    """``size`` hosts over real SSH, each with a simulated vLLM server in its state of :func:`plan`."""

    def __init__(self, size, states=None, ssh_port=SSH_PORT, first_address=FIRST_ADDRESS, sim_port_range=SIM_PORTS,
                 workdir=None):
        self.size = size
        self.states = list(states or plan(size))
        self.ssh = SSHFleet(size, ssh_port=ssh_port, first_address=first_address, sim_port_range=sim_port_range,
                            server_options=SERVER_OPTIONS, workdir=workdir)
        self.hosts = self.ssh.hosts

    @property
    def sim(self):
        return self.ssh.sim

    @property
    def servers(self):
        return [self.ssh.servers[host] for host in self.hosts]

    @property
    def expected(self):
        return dict((h, EXPECTED[s]) for h, s in zip(self.hosts, self.states))

    def build(self):
        self.ssh.start()
        try:
            for server, state in zip(self.servers, self.states):
                states.put(self.sim, server["id"], MAKE[state])
        except BaseException:
            self.ssh.stop()
            raise
        return self

    def reset(self):
        """Check that the servers are still in their planned states (a run may have restarted some)."""
        for server, state in zip(self.servers, self.states):
            info = self.sim.get(server["id"])
            if state == "down":
                if info["status"] == "listening":
                    self.sim.set_state(server["id"], "stop")
                continue
            if info["status"] != "listening" or info["restarts"]:
                raise RuntimeError("server %s (%s) is %s after %d restart(s): rebuild the fleet"
                                   % (server["id"], state, info["status"], info["restarts"]))
        self.ssh.close_connections()

    def delete(self):
        self.ssh.stop()

    def inventory(self, path, extra_host_vars=None, extra_groups=None):
        """The fleet's inventory (group ``vllm``; every host over SSH). ``extra_groups``:
        ``{group: {host: vars}}``; hosts that are not the fleet's are reached locally."""
        groups = {}
        for group, members in (extra_groups or {}).items():
            groups[group] = dict((name, hostvars if name in self.hosts else local_host_vars(**hostvars))
                                 for name, hostvars in members.items())
        return self.ssh.inventory(path, extra_host_vars=extra_host_vars, extra_groups=groups)


# --------------------------------------------------------------------------------------- playbooks

SAVE_PLAY = """
- name: Save every host's verdicts
  hosts: localhost
  gather_facts: false
  tasks:
    - name: Write them
      ansible.builtin.copy:
        content: "{{ _out | to_json }}"
        dest: "{{ out_dir }}/{{ item }}.json"
        mode: "0600"
      loop: [vllm_check, vllm_checks, vllm_watchdog_results]
      vars:
        # vllm_watchdog_results is a fact (the role's gate module returns it); vllm_check(s) are set_fact variables.
        _out: >-
          {%- set out = {} -%}
          {%- for host in groups['all'] -%}
          {%- set _from = hostvars[host].ansible_facts if item == 'vllm_watchdog_results' else hostvars[host] -%}
          {%- set _ = out.update({host: _from[item] | default(None)}) -%}
          {%- endfor -%}
          {{ out }}
"""

PING_PLAY = """
- name: A no-op play over the fleet (the floor)
  hosts: vllm
  gather_facts: false
  tasks:
    - name: Ping
      ansible.builtin.ping:
"""

NAIVE_PLAY = """
- name: Check every host, each in its own task (the naive way)
  hosts: vllm
  gather_facts: false
  tasks:
    - name: Judge the server from its own metrics
      modelops.vllm.health:
        url: "{{ vllm_url }}"
        interval: "{{ vllm_check_interval | default(5) }}"
        freeze_limit: "{{ vllm_check_freeze_limit | default(300) }}"
      register: vllm_naive
    - name: Keep the verdict
      ansible.builtin.set_fact:
        vllm_check: "{{ vllm_naive }}"
        vllm_checks: "{{ {inventory_hostname: vllm_naive} }}"
"""


def playbook_text(approach):
    if approach == "ping":
        return PING_PLAY
    if approach == "naive":
        return NAIVE_PLAY + SAVE_PLAY
    if approach in ("role", "role-ctrl"):
        return "- name: The watchdog\n  ansible.builtin.import_playbook: %s\n%s" % (WATCHDOG_PLAYBOOK, SAVE_PLAY)
    return "- name: The fleet check\n  ansible.builtin.import_playbook: %s\n%s" % (PLAYBOOK, SAVE_PLAY)


def approach_args(approach, interval):
    # The stuck hosts' hang is proven within one check's two waits (freeze limit 2 x interval) in every approach:
    # what is measured is the pass, not how long proof of a hang takes.
    freeze = ["-e", "vllm_check_freeze_limit=%s" % (2 * interval)]
    return {
        "ping": [],
        "naive": ["-e", "vllm_check_interval=%s" % interval] + freeze,
        "role": ["-e", "vllm_watchdog_interval=%s" % interval] + freeze,
        "role-ctrl": ["-e", "vllm_watchdog_interval=%s" % interval, "-e", "vllm_watchdog_check_on_controller=true"]
        + freeze,
        "controller": ["-e", "vllm_check_interval=%s" % interval, "-e", "vllm_check_from=controller"] + freeze,
        # playbooks/fleet_check.yml with the checks on each host (a test's path; not in the benchmark's default)
        "async": ["-e", "vllm_check_interval=%s" % interval, "-e", "vllm_check_from=host"] + freeze,
    }[approach]


def role_host_vars(fleet, state_dir, sim_base_url):
    """Per host: the watchdog's state on "the host" (this machine: a directory per host), and a restart
    command that asks the simulator to restart that host's server."""
    extra = {}
    for host, server in zip(fleet.hosts, fleet.servers):
        extra[host] = {
            "vllm_watchdog_restart_method": "command",
            "vllm_watchdog_assume_url_is_service": True,  # the command names no process: it restarts the URL's server
            "vllm_watchdog_restart_command": [
                "curl", "-sSf", "--noproxy", "*", "-X", "POST", "-H", "Content-Type: application/json",
                "-d", '{"state": "restart"}', "%s/servers/%s/state" % (sim_base_url, server["id"])],
            "vllm_watchdog_state_dir": str(Path(state_dir) / host),
            "vllm_watchdog_ready_delay": 1,
        }
    return extra


# --------------------------------------------------------------------------------------- memory

def _read(path):
    try:
        with open(path) as handle:
            return handle.read()
    except OSError:
        return ""


def _stat(pid):
    data = _read("/proc/%d/stat" % pid)
    if not data:
        return None
    fields = data[data.rindex(")") + 2:].split()
    return int(fields[1]), fields[0]  # ppid, state


def _memory_kb(pid):
    """(RSS, PSS) in kB."""
    rss = pss = 0
    for line in _read("/proc/%d/smaps_rollup" % pid).splitlines():
        if line.startswith("Rss:"):
            rss = int(line.split()[1])
        elif line.startswith("Pss:"):
            pss = int(line.split()[1])
    return rss, pss


class MemorySampler(object):
    """Samples, every ``period`` seconds, the summed RSS/PSS of the process tree under ``root``
    (ansible-playbook and its workers, without the ssh clients' remote side)."""

    def __init__(self, root, period=0.2):
        self.root = root
        self.period = period
        self.peak = {"tree_rss_kb": 0, "tree_pss_kb": 0, "tree_processes": 0}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self):
        self._thread.start()
        return self

    def stop(self):
        self._stop.set()
        self._thread.join()
        return self.peak

    def _sample(self):
        children = {}
        for pid in (int(p) for p in os.listdir("/proc") if p.isdigit()):
            stat = _stat(pid)
            if stat and stat[1] != "Z":
                children.setdefault(stat[0], []).append(pid)
        tree, todo = {self.root}, [self.root]
        while todo:
            for child in children.get(todo.pop(), []):
                if child not in tree:
                    tree.add(child)
                    todo.append(child)
        rss = pss = 0
        for pid in tree:
            one_rss, one_pss = _memory_kb(pid)
            rss += one_rss
            pss += one_pss
        self.peak["tree_rss_kb"] = max(self.peak["tree_rss_kb"], rss)
        self.peak["tree_pss_kb"] = max(self.peak["tree_pss_kb"], pss)
        self.peak["tree_processes"] = max(self.peak["tree_processes"], len(tree))

    def _run(self):
        while not self._stop.is_set():
            self._sample()
            self._stop.wait(self.period)


# --------------------------------------------------------------------------------------- one run

class FleetRun(object):
    """The outcome of one ansible-playbook run over a fleet."""

    def __init__(self, approach, size, seconds, rc, stdout, stderr, outputs, memory, sessions=None, module_runs=None,
                 profile=None):
        self.approach = approach
        self.profile = profile or []
        self.size = size
        self.seconds = seconds
        self.rc = rc
        self.stdout = stdout
        self.stderr = stderr
        self.outputs = outputs
        self.memory = memory
        self.sessions = sessions or {}
        self.module_runs = module_runs or {}

    @property
    def verdicts(self):
        """{host: the host's verdict} (its first instance's, for the watchdog)."""
        checks = self.outputs.get("vllm_check.json") or {}
        results = self.outputs.get("vllm_watchdog_results.json") or {}
        out = {}
        for host in set(checks) | set(results):
            if checks.get(host):
                out[host] = checks[host]
            elif results.get(host):
                out[host] = results[host][0]
        return out

    @property
    def checks(self):
        return self.outputs.get("vllm_checks.json") or {}

    @property
    def results(self):
        return self.outputs.get("vllm_watchdog_results.json") or {}

    def wrong(self, expected):
        """``{host: (expected, got, reason)}`` for every host judged otherwise than expected."""
        out = {}
        for host, want in expected.items():
            got = self.verdicts.get(host) or {}
            if got.get("state") != want:
                out[host] = (want, got.get("state"), got.get("reason"))
        return out

    def __repr__(self):
        return "<FleetRun %s %d hosts rc=%s %.1fs>\n%s\n%s" % (
            self.approach, self.size, self.rc, self.seconds, self.stdout[-3000:], self.stderr[-2000:])


def run_fleet_playbook(playbook, inventory, args=(), workdir=None, timeout=1800, sample_memory=True,
                       extra_env=None):
    """Run ``ansible-playbook`` (default forks) over ``inventory``; returns
    (seconds, rc, stdout, stderr, outputs, memory peak, module runs per host, task profile)."""
    workdir = Path(workdir or tempfile.mkdtemp(prefix="modelops-vllm-fleet-"))
    out_dir = workdir / "out"
    out_dir.mkdir(parents=True, exist_ok=True)
    path = workdir / "play.yml"
    path.write_text(playbook)
    counts = workdir / "module_runs.json"
    profile = workdir / "task_profile.json"
    env = ansible_run.env(dict({
        "ANSIBLE_REMOTE_TMP": str(workdir / "remote-tmp"),
        "ANSIBLE_ASYNC_DIR": str(workdir / "async"),
        "ANSIBLE_LOCAL_TEMP": str(workdir / "local-tmp"),
        "ANSIBLE_CALLBACK_PLUGINS": str(CALLBACKS),
        "ANSIBLE_CALLBACKS_ENABLED": "module_runs,task_profile",
        "MODELOPS_MODULE_RUNS": str(counts),
        "MODELOPS_TASK_PROFILE": str(profile),
    }, **(extra_env or {})))
    env.pop("ANSIBLE_FORKS", None)
    cmd = [ansible_run._bin("ansible-playbook"),  # pylint: disable=protected-access
           "-i", str(inventory), str(path), "-e", "out_dir=%s" % out_dir] + list(args)
    started = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,  # pylint: disable=consider-using-with
                            env=env, cwd=str(workdir), stdin=subprocess.DEVNULL)
    sampler = MemorySampler(proc.pid).start() if sample_memory else None
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        stdout, stderr = proc.communicate()
    seconds = time.monotonic() - started
    memory = sampler.stop() if sampler else None
    outputs = {}
    for item in out_dir.iterdir():
        text = item.read_text()
        try:
            outputs[item.name] = json.loads(text)
        except ValueError:
            outputs[item.name] = text
    runs = json.loads(counts.read_text()) if counts.exists() else {}
    tasks = json.loads(profile.read_text()) if profile.exists() else []
    return seconds, proc.returncode, stdout, stderr, outputs, memory, runs, tasks


def check_fleet(fleet, approach, workdir=None, interval=5, sample_memory=True, args=(), pipelining=False,
                checkout=None, **inventory_kwargs):
    """Run one approach over ``fleet``; returns a :class:`FleetRun`. ``args``: more ansible-playbook
    arguments; ``pipelining``: Ansible's (ANSIBLE_PIPELINING); ``checkout``: another checkout of the collection
    whose watchdog playbook and collection (its ``.cache/collections``) run instead of this one's
    (benchmarks/fleet_ab.py); ``inventory_kwargs``: ``extra_host_vars`` and ``extra_groups`` of
    :meth:`Fleet.inventory`."""
    workdir = Path(workdir or tempfile.mkdtemp(prefix="modelops-vllm-fleet-"))
    workdir.mkdir(parents=True, exist_ok=True)
    if approach in ("role", "role-ctrl"):
        extra = role_host_vars(fleet, workdir / "state", fleet.sim.base_url)
        for host, hostvars in (inventory_kwargs.pop("extra_host_vars", None) or {}).items():
            extra.setdefault(host, {}).update(hostvars)
        inventory_kwargs["extra_host_vars"] = extra
    inventory = fleet.inventory(workdir / "inventory.json", **inventory_kwargs)
    fleet.ssh.close_connections()
    mark = fleet.ssh.log_mark()
    text = playbook_text(approach)
    extra_env = {"ANSIBLE_PIPELINING": "True" if pipelining else "False"}
    if checkout:
        root = Path(checkout).resolve()
        text = text.replace(str(WATCHDOG_PLAYBOOK), str(root / "playbooks" / "watchdog.yml"))
        extra_env["ANSIBLE_COLLECTIONS_PATH"] = str(root / ".cache" / "collections")
    seconds, rc, stdout, stderr, outputs, memory, runs, tasks = run_fleet_playbook(
        text, inventory, args=approach_args(approach, interval) + list(args), workdir=workdir,
        sample_memory=sample_memory, extra_env=extra_env)
    return FleetRun(approach, fleet.size, seconds, rc, stdout, stderr, outputs, memory,
                    sessions=fleet.ssh.session_counts(mark), module_runs=runs, profile=tasks)


# --------------------------------------------------------------------------------------- the benchmark

def _mb(kb):
    return round(kb / 1024.0, 1) if kb else 0.0


def markdown(rows, meta):
    lines = [
        "# A watchdog pass over a fleet, over real SSH (benchmarks/fleet.py)",
        "",
        "%s; %d cores; ansible-core %s; OpenSSH %s; forks 5 (AWX's default); interval %s s; pipelining %s;"
        % (meta["machine"], meta["cores"], meta["ansible"], meta["sshd"], meta["interval"],
           " and ".join(meta.get("pipelining", ["off"]))),
        "one simulated vLLM server per host on the host's own loopback address. Healthy fleets: %s."
        % meta["mix"],
        "goal = 2 x interval + 2 x ping + 10 s, with the ping of the same size and setting in the same run.",
        "",
        "| hosts | pipelining | approach | wall (s) | / ping | goal (s) | judged right | module runs per host | SSH "
        "sessions per host | controller peak RSS / PSS (MB) | load avg before / after |",
        "|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in rows:
        lines.append("| %d | %s | %s | %.1f | %s | %s | %s | %s | %.1f | %.0f / %.0f | %.1f / %.1f |" % (
            row["hosts"], row.get("pipelining", "off"), row["approach"], row["seconds"],
            "%.2f" % row["ratio_to_ping"] if row.get("ratio_to_ping") else "-",
            ("%.1f %s" % (row["goal"], "met" if row["seconds"] <= row["goal"] else "MISSED")) if row.get("goal") else "-",
            "-" if row["right"] is None else "%d/%d" % (row["right"], row["hosts"]),
            "%.1f" % row["module_runs_per_host"], row["sessions_per_host"], row["tree_rss_mb"], row["tree_pss_mb"],
            row["load_before"], row["load_after"]))
    return "\n".join(lines) + "\n"


def profile_markdown(rows, meta):
    """Each watchdog run's tasks: wall time, hosts that ran it, the sum and the slowest of the hosts' times."""
    lines = ["# Where a watchdog pass's time goes, task by task (benchmarks/fleet.py)", "",
             "%s; %d cores; ansible-core %s; forks 5; interval %s s. `wall`: from the task's start to the next "
             "task's; `hosts`: results (skipped ones apart); `host s`: the sum of each host's time from its start to "
             "its result, `per host` that sum over the hosts, `slowest`: the slowest host's."
             % (meta["machine"], meta["cores"], meta["ansible"], meta["interval"]), ""]
    for row in rows:
        if row["approach"] not in ("role", "role-ctrl", "naive") or not row.get("profile"):
            continue
        lines += ["## %d hosts, pipelining %s, %s: %.1f s (load %.1f / %.1f)" % (
            row["hosts"], row.get("pipelining", "off"), row["approach"], row["seconds"], row["load_before"],
            row["load_after"]), "",
            "| task | action | wall (s) | hosts | skipped | host s | per host (s) | slowest (s) |",
            "|---|---|---:|---:|---:|---:|---:|---:|"]
        for task in row["profile"]:
            lines.append("| %s | %s | %.2f | %d | %d | %.1f | %.3f | %.2f |" % (
                task["task"].replace("|", "/"), task["action"].split(".")[-1], task["wall"], task["results"],
                task["skipped"], task["host_seconds"], task["host_seconds"] / task["results"] if task["results"] else 0,
                task["host_max"]))
        lines.append("| total | | %.2f | | | | | |" % sum(t["wall"] for t in row["profile"]))
        lines.append("")
    return "\n".join(lines) + "\n"


def sshd_version():
    proc = subprocess.run(["ssh", "-V"], capture_output=True, text=True, check=False)
    return (proc.stderr or proc.stdout).split(",")[0].replace("OpenSSH_", "").strip()


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--sizes", default="10,50,100", help="fleet sizes (default 10,50,100)")
    parser.add_argument("--approaches", default=",".join(APPROACHES), help="default " + ",".join(APPROACHES))
    parser.add_argument("--interval", type=float, default=5.0)
    parser.add_argument("--ssh-port", type=int, default=SSH_PORT)
    parser.add_argument("--first-address", default=FIRST_ADDRESS)
    parser.add_argument("--port-range", default=SIM_PORTS, help="the simulator's control port")
    parser.add_argument("--pipelining", default="off,on",
                        help="Ansible's pipelining: off (its default), on (the collection's recommendation), or both "
                             "(default off,on: every approach with each)")
    parser.add_argument("--out", default=str(REPO / "benchmarks" / "results"), help="where the results go")
    parser.add_argument("--name", default="fleet", help="the results' file name, without .json/.md (default fleet)")
    args = parser.parse_args(argv)
    settings = [p.strip() for p in args.pipelining.split(",") if p.strip()]
    if not settings or set(settings) - {"off", "on"}:
        parser.error("--pipelining takes off, on or off,on")
    sizes = sorted(int(s) for s in args.sizes.split(","))
    approaches = [a.strip() for a in args.approaches.split(",") if a.strip()]
    for approach in approaches:
        if approach not in APPROACHES:
            parser.error("unknown approach %s" % approach)
    if "ping" in approaches:  # the floor first, so every other run of a size is compared with it
        approaches = ["ping"] + [a for a in approaches if a != "ping"]

    version = subprocess.run([sys.executable, "-c", "import ansible; print(ansible.__version__)"],
                             capture_output=True, text=True, check=False).stdout.strip()
    meta = {"machine": "%s %s" % (platform.system(), platform.machine()), "cores": os.cpu_count(),
            "ansible": version, "sshd": sshd_version(), "interval": args.interval, "forks": 5,
            "mix": "; ".join(mix(plan(n, healthy=True)) for n in sizes), "pipelining": settings,
            "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    rows = []
    base = Path(tempfile.mkdtemp(prefix="modelops-vllm-fleet-bench-"))
    failed = False
    try:
        for size in sizes:
            fleet = Fleet(size, states=plan(size, healthy=True), ssh_port=args.ssh_port,
                          first_address=args.first_address, sim_port_range=args.port_range).build()
            try:
                for setting in settings:
                    ping = None
                    for approach in approaches:
                        fleet.reset()
                        load_before = os.getloadavg()[0]
                        run = check_fleet(fleet, approach, workdir=base / ("%s-%d-%s" % (approach, size, setting)),
                                          interval=args.interval, pipelining=setting == "on")
                        judged = approach != "ping"
                        wrong = run.wrong(fleet.expected) if judged else {}
                        mem = run.memory or {}
                        runs = run.module_runs
                        row = {"hosts": size, "pipelining": setting, "approach": approach,
                               "seconds": round(run.seconds, 1), "rc": run.rc,
                               "right": size - len(wrong) if judged else None, "wrong": wrong,
                               "module_runs_per_host": round(sum(runs.get(h, 0) for h in fleet.hosts) / float(size), 2),
                               "ssh_connections": run.sessions.get("connections"),
                               "sessions_per_host": round(run.sessions.get("sessions", 0) / float(size), 1),
                               "tree_rss_mb": _mb(mem.get("tree_rss_kb")), "tree_pss_mb": _mb(mem.get("tree_pss_kb")),
                               "tree_processes": mem.get("tree_processes"),
                               # other work on the machine skews wall times: the 1-minute load average around the run
                               "load_before": round(load_before, 2), "load_after": round(os.getloadavg()[0], 2),
                               # where the time went, task by task (benchmarks/callback_plugins/task_profile.py)
                               "profile": run.profile}
                        if approach == "ping":
                            ping = run.seconds
                        elif ping:
                            row["ratio_to_ping"] = round(run.seconds / ping, 2)
                            row["goal"] = round(2 * args.interval + 2 * ping + 10, 1)
                        rows.append(row)
                        failed = failed or run.rc != 0 or bool(wrong)
                        print("%4d hosts  pipelining %-3s  %-10s  %6.1f s  rc=%s  %s  module runs/host %.1f  "
                              "sessions/host %.1f  peak RSS %.0f MB%s" % (
                                  size, setting, approach, run.seconds, run.rc,
                                  "judged right %d/%d" % (row["right"], size) if judged else "(no check)",
                                  row["module_runs_per_host"], row["sessions_per_host"], row["tree_rss_mb"],
                                  "  goal %.1f s: %s" % (row["goal"], "met" if run.seconds <= row["goal"] else "MISSED")
                                  if row.get("goal") else ""), flush=True)
                        if wrong:
                            print("      wrong: %s" % json.dumps(wrong)[:2000], flush=True)
                        if run.rc != 0:
                            print(run.stdout[-3000:], run.stderr[-2000:], flush=True)
            finally:
                fleet.delete()
    finally:
        shutil.rmtree(base, ignore_errors=True)
    meta["finished"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / ("%s.json" % args.name)).write_text(json.dumps({"meta": meta, "rows": rows}, indent=1) + "\n")
    text = markdown(rows, meta)
    (out / ("%s.md" % args.name)).write_text(text)
    (out / ("%s-profile.md" % args.name)).write_text(profile_markdown(rows, meta))
    print()
    print(text)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
