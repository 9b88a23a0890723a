"""The field-failure corpus: one simulated server per reported signature, and the watchdog role run
over all of them again and again through ``ansible-playbook``, as a schedule runs it.

Used by ``tests/integration/test_field_signatures.py`` (short settings, the invariants asserted) and
``benchmarks/field_signatures.py`` (how long each signature takes to catch, projected to the
defaults). Each signature names its source, what the watchdog must conclude, and whether a restart
is the right answer. The pause API and a SIGSTOPped engine are played on real vLLM instead
(``tests/integration/test_field_failures.py``).
"""

import os
import sys
import threading
import time
import urllib.request

from tests.support import servers
from tests.support.ansible_run import run_playbook
from tests.support.standins import Standins

LONG = 10 ** 8  # max_tokens: decoding for ever at the simulator's step rates
# The freeze limit of the scaled schedule: no movement for this long proves a hang (the default is 300 s; scaled like
# the window, 1200 s -> 20 s, it would be 5 s; a little more, so that a run's two waits alone never reach it).
FREEZE = 6.0
# The role's settings for a scaled schedule: short waits and timeouts (a check takes seconds). The run that finds a
# freeze watches it up to the limit (the role's default freeze_wait).
SCALED = {
    "vllm_watchdog_interval": 1,
    "vllm_watchdog_freeze_limit": FREEZE,
    "vllm_watchdog_probe_timeout": 3,
    "vllm_watchdog_metrics_timeout": 3,
    "vllm_watchdog_ready_delay": 1,
    "vllm_watchdog_ready_timeout": 60,
}


class Signature(object):
    def __init__(self, host, source, what, setup, restart, verdicts, options=None, extra=None):
        self.host = host              # the inventory host (and the stand-ins' service) that plays it
        self.source = source          # the report it comes from
        self.what = what
        self.setup = setup            # setup(sim, sid, window): put the server in the signature
        self.restart = restart        # whether the watchdog must restart it (once)
        self.verdicts = verdicts      # the verdicts it may get on any run before a restart
        self.options = options or {}  # simulator options at creation
        self.extra = extra or {}      # host variables for the role


def _load(sim, sid, **load):
    sim.start_load(sid, **dict({"concurrency": 2, "max_tokens": LONG, "prompt_tokens": 16}, **load))


def _decode_deadlock(sim, sid, window):
    # Clients give up after 2 s without a token and send the next request: prompts keep being
    # prefilled (prompt tokens and steps rise), no token comes out, the aborts are processed. Five clients on four
    # sequences, as in _starved: one always waits for a slot (never given up: it has no token to wait for), so work is
    # in flight also at the moment the four running requests are given up together and not yet sent again (with four
    # clients, on a loaded machine, a check's first read met that moment, saw nothing in flight and probed).
    _load(sim, sid, concurrency=5, prompt_tokens=256, repeat=True)
    sim.wait_for(sid, lambda s: s["totals"]["generation_tokens"] > 0)
    sim.set_state(sid, "decode_stall", abort_after=2)


def _reprefill(count):
    def setup(sim, sid, window):
        # One request of 1,000 prompt tokens in 100-token chunks at 10 steps/s: a cycle of about 1.1 s;
        # the KV cache (64 blocks of 16) fills and is freed once a cycle.
        sim.set_state(sid, "reprefill_loop", count_preemptions=count)
        _load(sim, sid, concurrency=1, prompt_tokens=1000, max_tokens=16)
    return setup


def _starved(sim, sid, window):
    # Decode starved by prefill (as vllm#54919 reads it: steps and prompt tokens move, generated tokens do
    # not) for less than half the window, then tokens again; over and over. Clients that waited 2 s give
    # up and send the next request, whose prompt is prefilled: the prefill that starves the decodes. Five clients on
    # four sequences: one always waits for a slot (never given up: it has no token to wait for), so that work is in
    # flight at every moment, also the one where the four running requests are given up together and not yet sent
    # again (with four clients a check's first read once met that moment, saw nothing in flight and probed).
    _load(sim, sid, concurrency=5, prompt_tokens=256, repeat=True)
    sim.wait_for(sid, lambda s: s["totals"]["generation_tokens"] > 0)

    def again():
        while not sim_stopped.is_set():
            try:
                sim.set_state(sid, "decode_stall", seconds=window * 0.4, abort_after=2)
            except Exception:  # noqa: BLE001 - the simulator is going away
                return
            sim_stopped.wait(window * 0.6)
    thread = threading.Thread(target=again, daemon=True)
    thread.start()


def _long_step(sim, sid, window):
    # One long engine step after another (a large prefill chunk, a kernel compile; docs/vllm-facts.md measured 66-81 s
    # on real vLLM): every series frozen with work in flight for half the freeze limit, then everything moves again.
    _load(sim, sid, concurrency=1)
    sim.wait_for(sid, lambda s: s["totals"]["generation_tokens"] > 0)

    def again():
        while not sim_stopped.is_set():
            try:
                sim.set_state(sid, "hang")
                if sim_stopped.wait(FREEZE * 0.5):
                    return
                sim.set_state(sid, "resume")
            except Exception:  # noqa: BLE001 - the simulator is going away
                return
            sim_stopped.wait(1.5)
    thread = threading.Thread(target=again, daemon=True)
    thread.start()


def _prefill(sim, sid, window):
    servers.prefill(sim, sid)


def _hang_idle(sim, sid, window):
    sim.set_state(sid, "hang")


def _hang_idle_polled(sim, sid, window):
    # Requests never reach the scheduler; something polls /v1/models, so only http_requests_total moves.
    sim.set_state(sid, "hang")
    url = sim.get(sid)["url"] + "/v1/models"

    def poll():
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        while not sim_stopped.is_set():
            try:
                opener.open(url, timeout=5).read()
            except Exception:  # noqa: BLE001 - a poller that does not care
                pass
            sim_stopped.wait(0.5)
    threading.Thread(target=poll, daemon=True).start()


def _dead_with_waiting(sim, sid, window):
    # One slot, four requests: 1 running, 3 waiting, then the engine stops for good.
    _load(sim, sid, concurrency=4)
    sim.wait_for(sid, lambda s: s["totals"]["waiting"] == 3 and s["totals"]["generation_tokens"] > 0)
    sim.set_state(sid, "hang")


def _stranded(sim, sid, window):
    _load(sim, sid, concurrency=3, deferred_seconds=10 ** 6)
    sim.wait_for(sid, lambda s: s["totals"]["waiting"] == 3)


def _paused(sim, sid, window):
    _load(sim, sid)
    sim.wait_for(sid, lambda s: s["totals"]["generation_tokens"] > 0)
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    request = urllib.request.Request(sim.get(sid)["url"] + "/pause?mode=keep", data=b"", method="POST")
    opener.open(request, timeout=30).read()


def _weights(sim, sid, window):
    _load(sim, sid)
    sim.wait_for(sid, lambda s: s["totals"]["generation_tokens"] > 0)
    sim.set_state(sid, "weight_update", operations={"update": 1})


sim_stopped = threading.Event()

SIGNATURES = [
    Signature("deadlock", "vllm#45094", "a decode deadlock over NCCL (TP2+PP2) while prefill runs at full speed",
              _decode_deadlock, True, ("busy",), {"max_num_seqs": 4, "step_rate": 50}),
    Signature("reprefill", "vllm#52520", "one request prefilled again and again, its preemptions counted",
              _reprefill(True), True, ("busy",), {"chunk_tokens": 100, "step_rate": 10, "kv_num_blocks": 64}),
    Signature("reprefill-uncounted", "vllm#52520 (0.33 code)",
              "the same loop as vLLM 0.33 counts it: nothing but the KV cache filling and freed",
              _reprefill(False), True, ("busy",), {"chunk_tokens": 100, "step_rate": 10, "kv_num_blocks": 64}),
    Signature("starved", "vllm#54919", "decode starved by prefill, shorter than the window, then fine",
              _starved, False, ("busy",), {"max_num_seqs": 4, "step_rate": 50}),
    Signature("prefill", "docs/vllm-facts.md", "one very long chunked prefill: only the KV cache moves",
              _prefill, False, ("busy",)),
    Signature("long-step", "docs/vllm-facts.md (a long engine step)",
              "one long engine step after another: every series frozen for half the freeze limit, then it moves",
              _long_step, False, ("busy", "frozen")),
    Signature("idle-hang", "vllm#46811", "gauges frozen at running 0: it looks idle and a probe hangs",
              _hang_idle, True, ()),
    Signature("unscheduled", "vllm#51921", "requests never reach the scheduler; only http_requests_total moves",
              _hang_idle_polled, True, ()),
    Signature("dead-engine", "vllm#39863", "EngineCore stopped silently with 3 requests waiting",
              _dead_with_waiting, True, (), {"max_num_seqs": 1}),
    Signature("stranded", "vllm#45388", "KV-connector stranding: deferred-only work that never moves",
              _stranded, True, ("unknown",), extra={"vllm_watchdog_unknown_limit": 1000}),
    Signature("paused", "vLLM's pause API (mode=keep)", "an RL trainer paused generation to swap weights",
              _paused, False, ("paused",), {"dev_mode": True}),
    Signature("weights", "vLLM's RL weight transfer", "a weight transfer in flight: generation frozen on purpose",
              _weights, False, ("paused",), {"dev_mode": True}),
]

# The results are saved from the controller for every host: a host that failed (it needs a human) is out
# of the later plays, and its results are what the test is about.
WATCHDOG_PLAY = """
- name: The collection's watchdog playbook
  ansible.builtin.import_playbook: modelops.vllm.watchdog

- name: Save what the role found and did, for every host
  hosts: localhost
  gather_facts: false
  tasks:
    - name: Save vllm_watchdog_results
      ansible.builtin.copy:
        content: "{{ hostvars[item].ansible_facts.vllm_watchdog_results | default(none) | to_json }}"
        dest: "{{ out_dir }}/{{ item }}.json"
        mode: "0600"
      loop: "{{ groups['vllm'] }}"
"""


class Corpus(object):
    """Every signature on its own simulated server and inventory host, watched by the role."""

    def __init__(self, sim, directory, window, settings, signatures=None):
        import yaml  # pylint: disable=import-outside-toplevel
        self.sim = sim
        self.directory = str(directory)
        self.window = window
        self.signatures = list(signatures or SIGNATURES)
        self.standins = Standins(self.directory, sim.base_url)
        self.servers = {}
        self.started = {}
        self.runs = []  # (started, ended, {host: result})
        sim_stopped.clear()
        services = {}
        hosts = {}
        for sig in self.signatures:
            info = servers.create(sim, "idle", **sig.options)
            self.servers[sig.host] = info
            services["vllm-" + sig.host] = {"server": info["id"], "state": "running", "started_at": time.time() - 7200}
            hosts[sig.host] = dict({"ansible_connection": "local", "ansible_python_interpreter": sys.executable,
                                    "vllm_url": info["url"], "vllm_watchdog_service": "vllm-" + sig.host}, **sig.extra)
        self.standins.write(services)
        group = dict(settings, vllm_watchdog_state_dir=os.path.join(self.directory, "state", "{{ inventory_hostname }}"),
                     vllm_watchdog_restart_method="systemd", vllm_watchdog_stall_window=window)
        self.inventory = os.path.join(self.directory, "inventory.yml")
        with open(self.inventory, "w") as handle:
            yaml.safe_dump({"all": {"children": {"vllm": {"hosts": hosts, "vars": group}}}}, handle)

    def start(self):
        """Put every server in its signature; the start time of each is when it was set."""
        for sig in self.signatures:
            sig.setup(self.sim, self.servers[sig.host]["id"], self.window)
            self.started[sig.host] = time.time()

    def run(self):
        """One watchdog run over every host; returns {host: result}."""
        index = len(self.runs)
        started = time.time()
        run = run_playbook(WATCHDOG_PLAY, inventory=self.inventory, args=["--forks", str(len(self.signatures))],
                           workdir=os.path.join(self.directory, "run%d" % index), timeout=600,
                           extra_env=self.standins.env())
        results = dict((sig.host, (run.outputs.get(sig.host + ".json") or [None])[0]) for sig in self.signatures)
        self.runs.append((started, time.time(), results, run))
        return results, run

    def restarts(self, host):
        """The restart commands the stand-ins saw for a host's service, with their times."""
        unit = "vllm-" + host
        return [entry for entry in self.standins.restart_entries() if unit in entry["argv"]]

    def probes(self, host):
        """The check's one-token probes the host's server answered or got (by the check's User-Agent)."""
        return [entry for entry in self.sim.requests(self.servers[host]["id"])
                if entry["method"] == "POST" and entry["path"].startswith("/v1/")
                and (entry.get("headers") or {}).get("user-agent") == "modelops.vllm.health"]

    def stop(self):
        sim_stopped.set()
