"""The field-failure corpus, part 1: vLLM's own pause API on a real vLLM 0.32 (CPU) server.

Each test is one reported signature, with its source, the verdict it must get, and what it must not
cause. The simulator plays the signatures real vLLM cannot produce on cue (test_field_signatures.py).

- vLLM 0.32's pause API (``VLLM_SERVER_DEV_MODE=1``, vllm/entrypoints/rl/online/api_router.py), used by
  RL trainers to swap weights mid-generation: ``POST /pause?mode=keep`` freezes every counter with the
  requests in flight; ``mode=wait`` drains, then holds new requests where no gauge counts them. Both
  were judged stuck and restarted before the check asked ``GET /is_paused``. Must be ``paused``, never
  probed, never restarted.
- A SIGSTOPped engine with dev mode on: ``/is_paused`` is an RPC to the engine core and hangs with it,
  so it proves nothing. Must still be ``stuck``.
"""
from __future__ import annotations

import json
import sys
import time

import pytest
import requests

from tests.integration.test_real_vllm import inference_requests, read, running
from tests.integration.test_watchdog import FAST, WATCHDOG_PLAY, write_inventory
from tests.support.ansible_run import health, run_playbook

pytestmark = [pytest.mark.vllm, pytest.mark.integration]

LONG = 30000  # max_tokens that keeps a request decoding for the whole test (ignore_eos)


def is_paused(srv) -> bool:
    answer = requests.get(srv.url + "/is_paused", timeout=10)
    assert answer.status_code == 200, answer.text
    return answer.json()["is_paused"]


def pause(srv, mode: str) -> None:
    answer = requests.post(srv.url + "/pause", params={"mode": mode}, timeout=120)
    assert answer.status_code == 200 and answer.json() == {"status": "paused"}, answer.text
    assert is_paused(srv) is True


def resume(srv) -> None:
    answer = requests.post(srv.url + "/resume", timeout=60)
    assert answer.status_code == 200, answer.text
    assert is_paused(srv) is False


@pytest.fixture(scope="class")
def dev_server(vllm_server_class):
    # --max-num-seqs 2: a full batch; dev mode serves /pause, /resume and /is_paused.
    return vllm_server_class(extra_args=["--max-num-seqs", "2"], env={"VLLM_SERVER_DEV_MODE": "1"})


def recorder(tmp_path):
    """A restart method of the `command` kind that only records that it was called."""
    log = tmp_path / "restarts.log"
    record = [sys.executable, "-c", "import sys; open(sys.argv[1], 'a').write(' '.join(sys.argv[2:]) + '\\n')",
              str(log)]
    return log, {"vllm_watchdog_restart_method": "command", "vllm_watchdog_restart_command": record + ["restart"],
                 "vllm_watchdog_assume_url_is_service": True,
                 "vllm_watchdog_status_command": [sys.executable, "-c", "pass"],
                 "vllm_watchdog_logs_command": [sys.executable, "-c", "print('vllm log')"]}


class TestPauseApi:
    def test_pause_keep_with_requests_in_flight_is_paused_and_sent_nothing(self, dev_server):
        with dev_server.start_completions(2, LONG) as load:
            dev_server.wait_running(2, timeout=60)
            pause(dev_server, "keep")
            try:
                frozen = read(dev_server)
                before = inference_requests(dev_server)
                result, run = health({"url": dev_server.url, "interval": 2, "metrics_timeout": 5})
                after = read(dev_server)
                sent = inference_requests(dev_server) - before
            finally:
                resume(dev_server)
            assert not load.done(), load.results
        assert result["state"] == "paused", result["reason"]
        assert "is_paused" in result["reason"]
        assert result["probe"]["sent"] is False and sent == 0
        assert result["evidence"]["is_paused"] == ['HTTP 200 {"is_paused": true}']
        # What the pause does, as the check saw it: work in flight and nothing moved.
        assert running(frozen) == 2 and result["running"] == 2
        assert {k: v for k, v in frozen.items() if k[0].startswith("vllm:")} == \
            {k: v for k, v in after.items() if k[0].startswith("vllm:")}
        dev_server.wait_idle(timeout=60)

    def test_pause_wait_looks_idle_and_is_paused_without_a_probe(self, dev_server):
        pause(dev_server, "wait")  # nothing in flight: it returns at once
        held = None
        try:
            # A request that arrives during the pause is held where no gauge counts it.
            held = dev_server.start_completions(1, 4)
            time.sleep(2)
            seen = read(dev_server)
            before = inference_requests(dev_server)
            result, run = health({"url": dev_server.url, "interval": 2, "probe_timeout": 10, "metrics_timeout": 5})
            sent = inference_requests(dev_server) - before
            assert not held.done()
        finally:
            resume(dev_server)
            if held is not None:
                held.join(60)
        assert running(seen) == 0
        assert result["state"] == "paused", result["reason"]
        assert result["probe"]["sent"] is False and sent == 0
        dev_server.wait_idle(timeout=60)

    def test_the_watchdog_restarts_nothing_while_paused(self, dev_server, tmp_path):
        log, method = recorder(tmp_path)
        state_dir = tmp_path / "state"
        inventory = write_inventory(str(tmp_path / "inventory.yml"), {"gb10-paused": {}}, dict(
            FAST, vllm_url=dev_server.url, vllm_watchdog_state_dir=str(state_dir), vllm_watchdog_interval=2,
            vllm_watchdog_startup_grace=0, **method))
        with dev_server.start_completions(2, LONG):
            dev_server.wait_running(2, timeout=60)
            pause(dev_server, "keep")
            try:
                runs = [run_playbook(WATCHDOG_PLAY, inventory=inventory, workdir=str(tmp_path / ("run%d" % i)),
                                     timeout=300) for i in range(2)]
            finally:
                resume(dev_server)
        for run in runs:
            assert run.rc == 0, run
            result = run.outputs["gb10-paused.json"][0]
            assert result["state"] == "paused", result
            assert result["action"] == "none" and result["restarted"] is False, result
            assert "never restarted" in result["decision"], result
        assert not log.exists(), log.read_text()
        # The gate counts how long it has been paused, for the human it asks after paused_limit.
        history = json.loads((state_dir / "vllm.json").read_text())
        assert history["last_state"] == "paused" and history["paused_since"] <= time.time()
        dev_server.wait_idle(timeout=60)

    def test_a_sigstopped_engine_with_dev_mode_on_is_still_stuck(self, dev_server):
        with dev_server.start_completions(2, LONG) as load:
            dev_server.wait_running(2, timeout=60)
            dev_server.hang()  # SIGSTOP of VLLM::EngineCore: /is_paused is an RPC to it and hangs
            try:
                time.sleep(1)
                started = time.monotonic()
                # freeze_limit 4: the two waits are the proof (the default, 300 s, is test_long_step.py's).
                result, run = health({"url": dev_server.url, "interval": 2, "metrics_timeout": 5, "freeze_limit": 4})
                seconds = time.monotonic() - started
            finally:
                dev_server.resume()
            assert not load.done(), load.results
        assert result["state"] == "stuck", result["reason"]
        assert result["evidence"]["is_paused"] == ["timeout (no answer in 5.0 s)"], result["evidence"]
        assert result["probe"]["sent"] is False
        print("stuck with dev mode on: %.1f s through ansible-playbook (the unanswered /is_paused costs "
              "metrics_timeout)" % seconds)
        dev_server.wait_idle(timeout=60)
