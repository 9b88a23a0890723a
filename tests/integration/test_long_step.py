"""A long engine step is not a hang (issue 23), on a real vLLM 0.32 (CPU) server.

vLLM publishes every series of ``/metrics`` only when an engine step returns, so one long step freezes all of
them, the KV-cache gauge included, with ``running`` at its value from before the step. A tiny model with 8 layers
served with ``--max-num-batched-tokens 65536`` prefills a prompt of about 57,000 tokens in ONE step: about a
minute on the project's first 2-core machine, 33-35 s on a faster one (docs/vllm-facts.md, "A long engine
step"). That is the healthy look-alike of a hang, in both forms:

- with work already in flight (a request decoding): the check sees requests in flight and nothing moving;
- on a server that looked idle before the step: ``running`` stays 0, so the check probes, and the probe waits
  behind the step.

The watchdog role, with its defaults (only the start-up grace at 0 and a restart command that records), must not
call either ``stuck`` and must not restart: the freeze is shorter than ``vllm_watchdog_freeze_limit`` (300 s). The
run that finds the freeze watches it (``vllm_watchdog_freeze_wait``) and sees the step end. And the scheduled way
(no watch, the freeze measured across runs in the state dir): a SIGSTOPped engine is ``frozen`` at the first run
and restarted once at the first run past the limit. (The watch's restart of a real hang after the limit is
``test_watchdog.py``'s ``test_command_method_restarts_a_real_hung_vllm_once``.)
"""

import hashlib
import itertools
import json
import os
import sys
import threading
import time

import pytest
import requests

from ansible_collections.modelops.vllm.plugins.module_utils._types import duration
from tests.harness.vllm_server import SERVED_MODEL_NAME, long_prompt
from tests.integration.test_watchdog import CTL, FAST, WATCHDOG_PLAY, ServerControl, write_inventory
from tests.support.ansible_run import run_playbook

pytestmark = [pytest.mark.vllm, pytest.mark.integration]

# A prompt that the 8-layer model prefills in one step of 30 s to a minute, by machine.
PROMPT_TOKENS = 57000
DECODING = 30000  # max_tokens of the request that decodes through the step (ignore_eos)


@pytest.fixture(scope="module")
def deep_server(vllm_server_module):
    # One step takes the whole prompt: --max-num-batched-tokens above its length.
    return vllm_server_module(max_model_len=65536, layers=8, extra_args=["--max-num-batched-tokens", "65536"])


def longest_gap(srv):
    """The lower bound, in seconds, of the highest non-empty bucket of the server's inter-token latency histogram
    (the longest gap between two tokens it has had is above it)."""
    buckets = []
    for line in srv.metrics_text(timeout=30).splitlines():
        if line.startswith("vllm:inter_token_latency_seconds_bucket{"):
            le = line.split('le="', 1)[1].split('"', 1)[0]
            buckets.append((float(le), float(line.rsplit(" ", 1)[1])))
    buckets.sort()
    total = buckets[-1][1]
    assert total > 0, buckets
    first = next(i for i, (le, count) in enumerate(buckets) if count >= total)
    return buckets[first - 1][0] if first else 0.0


def series(srv):
    """Every vllm: sample of /metrics but the *_created ones, as one digest."""
    text = srv.metrics_text(timeout=30)
    lines = sorted(line for line in text.splitlines() if line.startswith("vllm:") and "_created" not in line)
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()


def wait_frozen(srv, still=3.0, timeout=60.0):
    """Wait until no vllm: series has changed for ``still`` seconds (the long step has begun)."""
    ends = time.monotonic() + timeout
    last, since = series(srv), time.monotonic()
    while time.monotonic() < ends:
        time.sleep(0.5)
        now = series(srv)
        if now != last:
            last, since = now, time.monotonic()
        elif time.monotonic() - since >= still:
            return
    raise AssertionError("the long step did not begin within %s s" % timeout)


def engine_cpu(srv):
    """Seconds of CPU the engine's processes (every thread) have used."""
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0
    for pid in srv.engine_pids():
        try:
            with open("/proc/%d/stat" % pid) as handle:
                fields = handle.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / ticks


def wait_stepping(srv, before, busy=1.5, timeout=180.0):
    """Wait until the engine has used ``busy`` seconds of CPU since ``before`` (its CPU time when the prompt was
    sent) while its metrics did not move: the long step of an idle-looking server has begun (its metrics alone
    cannot show it: they are an idle server's, and an idle engine uses next to no CPU). CPU time, not a rate: on
    a loaded machine the engine, at nice 19, gets what is left."""
    ends = time.monotonic() + timeout
    digest = series(srv)
    while time.monotonic() < ends:
        time.sleep(0.5)
        if series(srv) != digest:
            raise AssertionError("the metrics moved before the long step was seen: the step is over or never was")
        if engine_cpu(srv) - before >= busy:
            return
    raise AssertionError("the engine did not start the long step within %s s" % timeout)


class BigPrompt(object):
    """One completion of a prompt that is prefilled in one step, in a thread.

    Each prompt is new words (its own seed): vLLM's prefix cache would serve a prompt it has seen from the blocks
    of the last one, and the step would be short (on a loaded machine the first test's decoding request does not
    evict them)."""

    seeds = itertools.count(100)

    def __init__(self, srv):
        self.result = {}
        self.prompt = long_prompt(PROMPT_TOKENS, seed=next(self.seeds))
        self.thread = threading.Thread(target=self._run, args=(srv,), daemon=True)
        self.started = time.monotonic()
        self.thread.start()

    def _run(self, srv):
        answer = requests.post(srv.url + "/v1/completions", timeout=900, json={
            "model": SERVED_MODEL_NAME, "prompt": self.prompt, "max_tokens": 1})
        self.result = {"status": answer.status_code, "seconds": time.monotonic() - self.started}

    def join(self):
        self.thread.join(900)
        return self.result


CHECK_PLAY = """
- name: The collection's report-only check
  ansible.builtin.import_playbook: modelops.vllm.check
"""


def recorder(tmp_path):
    """The `command` restart method, recording its calls (and restarting nothing)."""
    log = tmp_path / "restarts.log"
    record = [sys.executable, "-c", "import sys; open(sys.argv[1], 'a').write(' '.join(sys.argv[2:]) + '\\n')",
              str(log)]
    # A command names no process: the inventory says it restarts the server at the URL (or nothing is restarted).
    return log, {"vllm_watchdog_restart_method": "command", "vllm_watchdog_assume_url_is_service": True,
                 "vllm_watchdog_restart_command": record + ["restart"],
                 "vllm_watchdog_status_command": [sys.executable, "-c", "pass"],
                 "vllm_watchdog_logs_command": [sys.executable, "-c", "print('vllm log')"]}


def defaults_but_grace(srv, tmp_path, method, **more):
    """The watchdog's defaults (interval 5, freeze limit 300, the run watches a freeze up to it), the start-up
    grace at 0, and the restart method given."""
    return dict({"vllm_url": srv.url, "vllm_watchdog_state_dir": str(tmp_path / "state"),
                 "vllm_watchdog_startup_grace": 0}, **dict(method, **more))


def test_a_long_step_with_work_in_flight_is_not_stuck_and_not_restarted(deep_server, tmp_path):
    log, method = recorder(tmp_path)
    inventory = write_inventory(str(tmp_path / "inventory.yml"), {"gb10-long": {}},
                                defaults_but_grace(deep_server, tmp_path, method))
    with deep_server.start_completions(1, DECODING) as load:
        deep_server.wait_running(1, timeout=60)
        big = BigPrompt(deep_server)
        wait_frozen(deep_server)
        run = run_playbook(WATCHDOG_PLAY, inventory=inventory, workdir=str(tmp_path / "run"), timeout=900)
        done = big.join()
        assert not load.done(), load.results  # the decoding request went on through the step
    assert run.rc == 0, run
    result = run.outputs["gb10-long.json"][0]
    assert result["state"] == "busy", result
    assert "moved again after" in result["reason"] and "a long engine step, not a hang" in result["reason"], result
    assert result["action"] == "none" and not result["restarted"], result
    assert not log.exists(), log.read_text()
    assert done["status"] == 200, done  # the request of the long step finished normally
    print("long step with work in flight: the request took %.1f s; the watchdog said: %s"
          % (done["seconds"], result["line"]))
    deep_server.wait_idle(timeout=120)
    # Now the server's inter-token latency histogram holds that step (the decoding request waited it out): a freeze
    # limit at the lower bound of its bucket (20 s for a step of 20-40 s, 40 s for one of 40-80 s: the step's length
    # is this machine's) is a configuration mistake the check names; the default is not.
    above = longest_gap(deep_server)
    assert above >= 10, above  # the step was long: tens of seconds
    check = write_inventory(str(tmp_path / "check.yml"), {"gb10-long": {}}, {"vllm_url": deep_server.url})
    warned = run_playbook(CHECK_PLAY, inventory=check, workdir=str(tmp_path / "low"), timeout=300,
                          args=["-e", "vllm_check_interval=1", "-e", "vllm_check_freeze_limit=%g" % above])
    assert warned.rc == 0, warned
    said = " ".join((warned.stdout + warned.stderr).split())
    assert ("freeze_limit (%s) is not well above the longest this server has taken between two tokens"
            % duration(above)) in said, said
    quiet = run_playbook(CHECK_PLAY, inventory=check, workdir=str(tmp_path / "default"), timeout=300,
                         args=["-e", "vllm_check_interval=1"])
    assert quiet.rc == 0 and "is not well above" not in quiet.stdout + quiet.stderr, quiet


def test_a_long_step_on_an_idle_looking_server_is_not_stuck_and_not_restarted(deep_server, tmp_path):
    log, method = recorder(tmp_path)
    # Probes of 10 s (default 30): both wait behind the step, which outlasts them.
    inventory = write_inventory(str(tmp_path / "inventory.yml"), {"gb10-long": {}},
                                defaults_but_grace(deep_server, tmp_path, method, vllm_watchdog_probe_timeout=10))
    deep_server.wait_idle(timeout=120)
    before = engine_cpu(deep_server)
    big = BigPrompt(deep_server)
    wait_stepping(deep_server, before)
    run = run_playbook(WATCHDOG_PLAY, inventory=inventory, workdir=str(tmp_path / "run"), timeout=900)
    done = big.join()
    assert run.rc == 0, run
    result = run.outputs["gb10-long.json"][0]
    assert result["state"] != "stuck" and result["action"] == "none" and not result["restarted"], result
    # What it saw: an engine that looked idle, probes that got no answer, then the step ended, everything moved,
    # and one more probe (nothing in flight) was answered.
    assert result["state"] == "idle", result
    assert "the probes waited behind one long engine step" in result["reason"], result
    assert not log.exists(), log.read_text()
    assert done["status"] == 200, done
    print("long step on an idle-looking server: the request took %.1f s; the watchdog said: %s"
          % (done["seconds"], result["line"]))
    deep_server.wait_idle(timeout=120)


def test_a_real_hang_is_frozen_first_then_restarted_once_past_the_limit_across_runs(vllm_server, tmp_path):
    """The scheduled way: no watch (freeze_wait 0), the freeze measured across runs in the state dir."""
    server = vllm_server()
    control = ServerControl(server)
    limit = 20
    try:
        (tmp_path / "ctl.py").write_text(CTL)
        (tmp_path / "control_url").write_text(control.url)
        ctl = [sys.executable, str(tmp_path / "ctl.py")]
        load = server.start_completions(2, max_tokens=30000)
        server.wait_running(2)
        server.hang()
        inventory = write_inventory(str(tmp_path / "inventory.yml"), {"gb10-hung": {}}, dict(
            FAST, vllm_url=server.url, vllm_watchdog_state_dir=str(tmp_path / "state"), vllm_watchdog_interval=2,
            vllm_watchdog_freeze_limit=limit, vllm_watchdog_freeze_wait=0, vllm_watchdog_startup_grace=20,
            vllm_watchdog_restart_method="command", vllm_watchdog_restart_command=ctl + ["restart"],
            vllm_watchdog_assume_url_is_service=True,  # a command names no process (docs/watchdog.md)
            vllm_watchdog_status_command=ctl + ["status"], vllm_watchdog_logs_command=ctl + ["logs"],
            vllm_watchdog_py_spy="", vllm_watchdog_ready_delay=2, vllm_watchdog_ready_timeout=300))
        first = run_playbook(WATCHDOG_PLAY, inventory=inventory, workdir=str(tmp_path / "run1"), timeout=600)
        assert first.rc == 0, first
        frozen = first.outputs["gb10-hung.json"][0]
        assert frozen["state"] == "frozen" and frozen["action"] == "none", frozen
        assert control.restarts == 0
        time.sleep(limit)
        second = run_playbook(WATCHDOG_PLAY, inventory=inventory, workdir=str(tmp_path / "run2"), timeout=600)
        assert second.rc == 0, second
        stuck = second.outputs["gb10-hung.json"][0]
        assert stuck["state"] == "stuck" and stuck["action"] == "restarted", stuck
        assert "past freeze_limit (20s)" in stuck["reason"], stuck
        for thread in control.threads:
            thread.join(300)
        assert control.errors == [] and control.restarts == 1
        verdicts = [json.loads(line) for line in open(os.path.join(str(tmp_path / "state"), "vllm.verdicts.jsonl"))]
        # The two runs, then the outcome of the restart (a step line, not a run).
        assert [(v["state"], bool(v.get("step"))) for v in verdicts][:2] == [("frozen", False), ("stuck", False)]
        assert [v for v in verdicts[2:] if not v.get("step")] == [], verdicts
        load.cancel()
    finally:
        control.close()
