"""Fleet check speed: how long checking N vLLM hosts takes with each way of running the check.

Every host is a simulated vLLM server of its own (tests/simulator, one process serving them all, each
on its own loopback port), in an inventory of N hosts with ``ansible_connection: local`` and a
``vllm_url`` each; default forks (5) and ``interval: 5``. The mix of states is the same at every size:
mostly busy (decoding, and a few in a long chunked prefill), some idle, a few hung with work in flight
(stuck), one down. Every run's per-host verdicts are compared with the expected ones.

Approaches, side by side:

  controller  playbooks/fleet_check.yml (vllm_check_from=controller): one modelops.vllm.health task on
              the controller with ``servers`` (every host's server in its own thread), then a per-host fact
  async       playbooks/fleet_check.yml (vllm_check_from=host): an async task per host (poll 0), then
              async_status, as the watchdog role does
  naive       a plain per-host modelops.vllm.health task: each host's waits are paid inside its own task,
              five hosts at a time

Memory: the peak of the summed RSS and PSS (/proc/<pid>/smaps_rollup) of the ansible-playbook process
tree, sampled every 0.2 s, and separately of the detached async module processes (the ``async``
approach runs them "on the hosts", here this machine).

    .venv/bin/python benchmarks/fleet.py                # 10, 50, 100 hosts, all three approaches
    .venv/bin/python benchmarks/fleet.py --quick        # without the naive 100-host run (about 130 s)
    .venv/bin/python benchmarks/fleet.py --sizes 10 --approaches controller,async

Writes benchmarks/results/fleet.json and benchmarks/results/fleet.md (``--out DIR`` to change).
Loopback ports 22500-22799 (``--port-range``). The same code builds the fleet of
tests/integration/test_fleet.py.
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
for _path in (str(REPO), str(REPO / "tests")):
    if _path not in sys.path:
        sys.path.insert(0, _path)

import ansible_run  # noqa: E402  pylint: disable=wrong-import-position,import-error
from tests.simulator.client import SimulatorProcess  # noqa: E402  pylint: disable=wrong-import-position

PLAYBOOK = REPO / "playbooks" / "fleet_check.yml"
WATCHDOG_PLAYBOOK = REPO / "playbooks" / "watchdog.yml"
APPROACHES = ("controller", "async", "naive")
PORT_RANGE = "22500-22799"

# What each simulated state must be judged.
EXPECTED = {"busy": "busy", "prefill": "busy", "idle": "idle", "hung": "stuck", "down": "down"}

LOAD = {"concurrency": 2, "max_tokens": 100_000_000, "prompt_tokens": 16}
# A long chunked prefill: 4 prompt tokens a step, 8 steps a second: 30,000 tokens last about 15 minutes,
# the step counter stays frozen and only the KV-cache gauge moves (docs/vllm-facts.md).
PREFILL = {"concurrency": 1, "max_tokens": 1, "prompt_tokens": 30_000}
PREFILL_OPTIONS = {"chunk_tokens": 4}


# --------------------------------------------------------------------------------------- the fleet

def plan(size):
    """The simulated state of each of ``size`` hosts: mostly busy, some idle, a few hung, one down."""
    down = 1
    hung = max(1, size // 25)
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


def mix(size):
    """``"100: 81 busy, 2 prefill, 12 idle, 4 hung, 1 down"``."""
    states = plan(size)
    return "%d: %s" % (size, ", ".join("%d %s" % (states.count(s), s) for s in ("busy", "prefill", "idle", "hung", "down")))


def host_name(index):
    return "gb10-%03d" % (index + 1)


class Fleet(object):
    """``size`` simulated vLLM servers in the states of :func:`plan`, one per inventory host."""

    def __init__(self, sim, size, states=None, prefix=""):
        self.sim = sim
        self.prefix = prefix  # of the simulator's server ids, for several fleets in one simulator
        self.size = size
        self.states = list(states or plan(size))
        self.hosts = [host_name(i) for i in range(size)]
        self.servers = []

    @property
    def expected(self):
        return dict((h, EXPECTED[s]) for h, s in zip(self.hosts, self.states))

    def build(self):
        specs = []
        for host, state in zip(self.hosts, self.states):
            # Up for two hours (its own process_start_time_seconds): past the watchdog's start-up grace.
            spec = {"name": self.prefix + host, "process_age": 7200}
            if state == "prefill":
                spec.update(PREFILL_OPTIONS)
            specs.append(spec)
        self.servers = self.sim.create_each(specs)
        self.prepare()
        return self

    def prepare(self):
        """Put every server in its state (again): loads started, hangs and stops applied."""
        for server, state in zip(self.servers, self.states):
            sid = server["id"]
            if state in ("busy", "hung"):
                self.sim.start_load(sid, **LOAD)
            elif state == "prefill":
                self.sim.start_load(sid, **PREFILL)
        for server, state in zip(self.servers, self.states):
            sid = server["id"]
            if state == "hung":
                self.sim.wait_for(sid, lambda s: s["totals"]["running"] == LOAD["concurrency"]
                                  and s["totals"]["generation_tokens"] > 0)
                self.sim.set_state(sid, "hang")
            elif state == "down":
                self.sim.set_state(sid, "stop")
        for server, state in zip(self.servers, self.states):
            if state in ("busy", "prefill"):
                self.sim.wait_for(server["id"], lambda s: s["totals"]["running"] >= 1)

    def reset(self):
        """Back to the planned states after a run that may have restarted servers."""
        for server, state in zip(self.servers, self.states):
            info = self.sim.get(server["id"])
            if state == "down":
                if info["status"] == "listening":
                    self.sim.set_state(server["id"], "stop")
                continue
            if info["status"] != "listening" or info["restarts"]:
                raise RuntimeError("server %s (%s) is %s after %d restart(s): rebuild the fleet"
                                   % (server["id"], state, info["status"], info["restarts"]))

    def delete(self):
        for server in self.servers:
            try:
                self.sim.delete(server["id"])
            except Exception:  # pylint: disable=broad-except
                pass
        self.servers = []

    def inventory(self, path, extra_host_vars=None, extra_groups=None):
        """An inventory of the fleet: group ``vllm``, one host per server, ``ansible_connection: local``.

        ``extra_host_vars``: ``{host: {var: value}}`` added to the fleet's hosts; ``extra_groups``:
        ``{group: {host: {var: value}}}`` more groups (for example ``vllm_proxies``)."""
        hosts = {}
        for host, server in zip(self.hosts, self.servers):
            hostvars = local_host_vars(vllm_url=server["url"])
            hostvars.update((extra_host_vars or {}).get(host, {}))
            hosts[host] = hostvars
        children = {"vllm": {"hosts": hosts}}
        for group, members in (extra_groups or {}).items():
            children.setdefault(group, {"hosts": {}})["hosts"].update(
                (name, local_host_vars(**hostvars)) for name, hostvars in members.items())
        Path(path).write_text(json.dumps({"all": {"children": children}}, indent=1))
        return str(path)


def local_host_vars(**hostvars):
    """The variables of an inventory host that Ansible reaches on this machine."""
    return dict({"ansible_connection": "local", "ansible_python_interpreter": sys.executable}, **hostvars)


# --------------------------------------------------------------------------------------- playbooks

SAVE_PLAY = """
- name: Save every host's verdicts
  hosts: localhost
  gather_facts: false
  tasks:
    - name: Write them (vllm_check and vllm_checks of every host)
      ansible.builtin.copy:
        content: "{{ _out | to_json }}"
        dest: "{{ out_dir }}/{{ item }}.json"
        mode: "0600"
      loop: [vllm_check, vllm_checks]
      vars:
        _out: >-
          {%- set out = {} -%}
          {%- for host in groups['all'] -%}{%- set _ = out.update({host: hostvars[host][item] | default(None)}) -%}{%- endfor -%}
          {{ out }}
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
      register: vllm_naive
    - name: Keep the verdict
      ansible.builtin.set_fact:
        vllm_check: "{{ vllm_naive }}"
        vllm_checks: "{{ {inventory_hostname: vllm_naive} }}"
"""


def playbook_text(approach):
    if approach == "naive":
        return NAIVE_PLAY + SAVE_PLAY
    return "- name: The fleet check\n  ansible.builtin.import_playbook: %s\n%s" % (PLAYBOOK, SAVE_PLAY)


def approach_args(approach):
    return {"controller": ["-e", "vllm_check_from=controller"], "async": ["-e", "vllm_check_from=host"],
            "naive": []}[approach]


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
    """Samples, every ``period`` seconds, the summed RSS/PSS of the tree under ``root`` and of the
    processes whose command line contains ``marker`` (detached async jobs), separately."""

    def __init__(self, root, marker=None, period=0.2):
        self.root = root
        self.marker = marker
        self.period = period
        self.peak = {"tree_rss_kb": 0, "tree_pss_kb": 0, "tree_processes": 0, "detached_rss_kb": 0,
                     "detached_pss_kb": 0, "detached_processes": 0, "largest_process_rss_kb": 0}
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
        pids = [int(p) for p in os.listdir("/proc") if p.isdigit()]
        for pid in pids:
            stat = _stat(pid)
            if stat and stat[1] != "Z":
                children.setdefault(stat[0], []).append(pid)
        tree, todo = {self.root}, [self.root]
        while todo:
            for child in children.get(todo.pop(), []):
                if child not in tree:
                    tree.add(child)
                    todo.append(child)
        detached = set()
        if self.marker:
            for pid in pids:
                if pid not in tree and self.marker in _read("/proc/%d/cmdline" % pid).replace("\0", " "):
                    detached.add(pid)
        sums = {}
        for name, group in (("tree", tree), ("detached", detached)):
            rss = pss = 0
            for pid in group:
                one_rss, one_pss = _memory_kb(pid)
                rss += one_rss
                pss += one_pss
                self.peak["largest_process_rss_kb"] = max(self.peak["largest_process_rss_kb"], one_rss)
            sums[name] = (rss, pss, len(group))
        for name in ("tree", "detached"):
            rss, pss, count = sums[name]
            self.peak[name + "_rss_kb"] = max(self.peak[name + "_rss_kb"], rss)
            self.peak[name + "_pss_kb"] = max(self.peak[name + "_pss_kb"], pss)
            self.peak[name + "_processes"] = max(self.peak[name + "_processes"], count)

    def _run(self):
        while not self._stop.is_set():
            self._sample()
            self._stop.wait(self.period)


# --------------------------------------------------------------------------------------- one run

class FleetRun(object):
    """The outcome of one ansible-playbook run over a fleet."""

    def __init__(self, approach, size, seconds, rc, stdout, stderr, verdicts, memory, checks=None):
        self.approach = approach
        self.checks = checks  # {host: {server name: result}}
        self.size = size
        self.seconds = seconds
        self.rc = rc
        self.stdout = stdout
        self.stderr = stderr
        self.verdicts = verdicts
        self.memory = memory

    def states(self):
        return dict((host, (v or {}).get("state")) for host, v in (self.verdicts or {}).items())

    def wrong(self, expected):
        """``{host: (expected, got, reason)}`` for every host judged otherwise than expected."""
        out = {}
        for host, want in expected.items():
            got = (self.verdicts or {}).get(host) or {}
            if got.get("state") != want:
                out[host] = (want, got.get("state"), got.get("reason"))
        return out

    def __repr__(self):
        return "<FleetRun %s %d hosts rc=%s %.1fs>\n%s\n%s" % (
            self.approach, self.size, self.rc, self.seconds, self.stdout[-3000:], self.stderr[-2000:])


def run_fleet_playbook(playbook, inventory, args=(), workdir=None, timeout=1800, sample_memory=True,
                       extra_env=None):
    """Run ``ansible-playbook`` (default forks) over ``inventory``; returns
    (seconds, rc, stdout, stderr, outputs, memory peak)."""
    workdir = Path(workdir or tempfile.mkdtemp(prefix="modelops-vllm-fleet-"))
    out_dir = workdir / "out"
    out_dir.mkdir(parents=True, exist_ok=True)
    path = workdir / "play.yml"
    path.write_text(playbook)
    remote_tmp = workdir / "remote-tmp"
    env = ansible_run.env(dict({
        "ANSIBLE_REMOTE_TMP": str(remote_tmp),
        "ANSIBLE_ASYNC_DIR": str(workdir / "async"),
        "ANSIBLE_LOCAL_TEMP": str(workdir / "local-tmp"),
    }, **(extra_env or {})))
    env.pop("ANSIBLE_FORKS", None)
    cmd = [ansible_run._bin("ansible-playbook"),  # pylint: disable=protected-access
           "-i", str(inventory), str(path), "-e", "out_dir=%s" % out_dir] + list(args)
    started = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,  # pylint: disable=consider-using-with
                            env=env, cwd=str(workdir), stdin=subprocess.DEVNULL)
    sampler = MemorySampler(proc.pid, marker=str(remote_tmp)).start() if sample_memory else None
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
    return seconds, proc.returncode, stdout, stderr, outputs, memory


def check_fleet(fleet, approach, workdir=None, interval=5, sample_memory=True, args=(), **inventory_kwargs):
    """Run one approach over ``fleet``; returns a :class:`FleetRun`. ``args``: more ansible-playbook
    arguments; ``inventory_kwargs``: ``extra_host_vars`` and ``extra_groups`` of :meth:`Fleet.inventory`."""
    workdir = Path(workdir or tempfile.mkdtemp(prefix="modelops-vllm-fleet-"))
    workdir.mkdir(parents=True, exist_ok=True)
    inventory = fleet.inventory(workdir / "inventory.json", **inventory_kwargs)
    args = approach_args(approach) + ["-e", "vllm_check_interval=%s" % interval] + list(args)
    seconds, rc, stdout, stderr, outputs, memory = run_fleet_playbook(
        playbook_text(approach), inventory, args=args, workdir=workdir, sample_memory=sample_memory)
    return FleetRun(approach, fleet.size, seconds, rc, stdout, stderr, outputs.get("vllm_check.json"), memory,
                    checks=outputs.get("vllm_checks.json"))


# --------------------------------------------------------------------------------------- the benchmark

def _mb(kb):
    return round(kb / 1024.0, 1) if kb else 0.0


def markdown(rows, meta):
    lines = [
        "# Fleet check wall time (benchmarks/fleet.py)",
        "",
        "%s; %d cores; ansible-core %s; forks 5 (default); interval %s s; one simulated vLLM server per host"
        % (meta["machine"], meta["cores"], meta["ansible"], meta["interval"]),
        "(tests/simulator, all in one process), `ansible_connection: local`. Mix per size: %s."
        % meta["mix"],
        "",
        "| hosts | approach | wall time (s) | judged right | controller tree peak RSS / PSS (MB) | "
        "detached async jobs peak RSS / PSS (MB) | largest process RSS (MB) | load avg before / after |",
        "|---:|---|---:|---:|---:|---:|---:|---:|",
    ]
    for row in rows:
        lines.append("| %d | %s | %.1f | %d/%d | %.0f / %.0f | %s | %.0f | %.1f / %.1f |" % (
            row["hosts"], row["approach"], row["seconds"], row["right"], row["hosts"], row["tree_rss_mb"],
            row["tree_pss_mb"],
            ("%.0f / %.0f" % (row["detached_rss_mb"], row["detached_pss_mb"])) if row["detached_processes"] else "-",
            row["largest_process_rss_mb"], row["load_before"], row["load_after"]))
    return "\n".join(lines) + "\n"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--sizes", default="10,50,100", help="fleet sizes (default 10,50,100)")
    parser.add_argument("--approaches", default=",".join(APPROACHES), help="default controller,async,naive")
    parser.add_argument("--quick", action="store_true", help="skip the naive run at the largest size")
    parser.add_argument("--interval", type=float, default=5.0)
    parser.add_argument("--port-range", default=PORT_RANGE)
    parser.add_argument("--out", default=str(REPO / "benchmarks" / "results"), help="where fleet.json/.md go")
    args = parser.parse_args(argv)
    sizes = sorted(int(s) for s in args.sizes.split(","))
    approaches = [a.strip() for a in args.approaches.split(",") if a.strip()]
    for approach in approaches:
        if approach not in APPROACHES:
            parser.error("unknown approach %s" % approach)

    version = subprocess.run([sys.executable, "-c", "import ansible; print(ansible.__version__)"],
                             capture_output=True, text=True, check=False).stdout.strip()
    meta = {"machine": "%s %s" % (platform.system(), platform.machine()), "cores": os.cpu_count(),
            "ansible": version, "interval": args.interval, "forks": 5, "mix": "; ".join(mix(n) for n in sizes),
            "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    rows = []
    sim_proc = SimulatorProcess(port_range=args.port_range)
    sim = sim_proc.start()
    base = Path(tempfile.mkdtemp(prefix="modelops-vllm-fleet-bench-"))
    try:
        for size in sizes:
            fleet = Fleet(sim, size).build()
            try:
                for approach in approaches:
                    if args.quick and approach == "naive" and size == sizes[-1] and len(sizes) > 1:
                        print("%4d hosts  %-10s  skipped (--quick)" % (size, approach), flush=True)
                        continue
                    fleet.reset()
                    load_before = os.getloadavg()[0]
                    run = check_fleet(fleet, approach, workdir=base / ("%s-%d" % (approach, size)),
                                      interval=args.interval)
                    wrong = run.wrong(fleet.expected)
                    mem = run.memory or {}
                    row = {"hosts": size, "approach": approach, "seconds": round(run.seconds, 1), "rc": run.rc,
                           "right": size - len(wrong), "wrong": wrong,
                           "tree_rss_mb": _mb(mem.get("tree_rss_kb")), "tree_pss_mb": _mb(mem.get("tree_pss_kb")),
                           "tree_processes": mem.get("tree_processes"),
                           "detached_rss_mb": _mb(mem.get("detached_rss_kb")),
                           "detached_pss_mb": _mb(mem.get("detached_pss_kb")),
                           "detached_processes": mem.get("detached_processes"),
                           "largest_process_rss_mb": _mb(mem.get("largest_process_rss_kb")),
                           # other work on the machine skews wall times: the 1-minute load average around the run
                           "load_before": round(load_before, 2), "load_after": round(os.getloadavg()[0], 2)}
                    rows.append(row)
                    print("%4d hosts  %-10s  %6.1f s  rc=%s  judged right %d/%d  tree peak RSS %.0f MB "
                          "(PSS %.0f MB, %s processes)  detached jobs peak RSS %.0f MB (%s processes)"
                          % (size, approach, run.seconds, run.rc, row["right"], size, row["tree_rss_mb"],
                             row["tree_pss_mb"], row["tree_processes"], row["detached_rss_mb"],
                             row["detached_processes"]), flush=True)
                    if wrong:
                        print("      wrong: %s" % json.dumps(wrong)[:2000], flush=True)
                    if run.rc != 0:
                        print(run.stdout[-3000:], run.stderr[-2000:], flush=True)
            finally:
                fleet.delete()
    finally:
        sim_proc.stop()
        shutil.rmtree(base, ignore_errors=True)
    meta["finished"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "fleet.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1) + "\n")
    text = markdown(rows, meta)
    (out / "fleet.md").write_text(text)
    print()
    print(text)
    return 0 if all(r["rc"] == 0 and r["right"] == r["hosts"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
