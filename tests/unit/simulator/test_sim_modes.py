"""Bad /metrics modes, slowness, scale, and the ways to start the simulator."""

import json
import subprocess
import sys
import time

import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

from simhelpers import PORT_RANGE, REPO, scrape
from tests.simulator.client import SimulatorClient, SimulatorError, run_simulator


def parse_all(text):
    return list(text_string_to_metric_families(text))


def test_no_metrics(sim):
    server = sim.create()
    sim.set_state(server["id"], "no_metrics")
    resp = requests.get(server["url"] + "/metrics", timeout=5)
    assert resp.status_code == 404 and resp.json() == {"detail": "Not Found"}
    sim.set_state(server["id"], "metrics_normal")
    assert requests.get(server["url"] + "/metrics", timeout=5).status_code == 200


@pytest.mark.parametrize("status", [200, 502])
def test_metrics_html(sim, status):
    server = sim.create()
    sim.set_state(server["id"], "metrics_html", status=status)
    resp = requests.get(server["url"] + "/metrics", timeout=5)
    assert resp.status_code == status
    assert resp.headers["content-type"].startswith("text/html")
    assert "<html" in resp.text.lower()


@pytest.mark.parametrize("kind", ["truncated", "syntax"])
def test_metrics_garbage_does_not_parse(sim, kind):
    server = sim.create()
    sim.set_state(server["id"], "metrics_garbage", kind=kind)
    resp = requests.get(server["url"] + "/metrics", timeout=5)
    assert resp.status_code == 200
    with pytest.raises(ValueError):
        parse_all(resp.text)


def test_metrics_garbage_short_body(sim):
    server = sim.create()
    sim.set_state(server["id"], "metrics_garbage", kind="short")
    with pytest.raises(requests.exceptions.RequestException):
        requests.get(server["url"] + "/metrics", timeout=5)


def test_metrics_garbage_binary(sim):
    server = sim.create()
    sim.set_state(server["id"], "metrics_garbage", kind="binary")
    resp = requests.get(server["url"] + "/metrics", timeout=5)
    assert resp.status_code == 200 and len(resp.content) == 4096


def test_metrics_huge(sim):
    server = sim.create()
    sim.set_state(server["id"], "metrics_huge", size_mb=6)
    resp = requests.get(server["url"] + "/metrics", stream=True, timeout=5)
    length = int(resp.headers["content-length"])
    assert length >= 6 * 1024 * 1024
    got = sum(len(chunk) for chunk in resp.iter_content(1 << 20))
    assert got == length


def test_metrics_trickle_never_finishes_in_time(sim):
    server = sim.create()
    sim.set_state(server["id"], "metrics_trickle", bytes_per_second=40)
    t0 = time.monotonic()
    with requests.get(server["url"] + "/metrics", stream=True, timeout=5) as resp:
        length = int(resp.headers["content-length"])
        got = 0
        for chunk in resp.iter_content(1):
            got += len(chunk)
            if time.monotonic() - t0 > 0.5:
                break
    assert length > 40_000
    assert 0 < got < 200   # a read timeout alone never fires: a few bytes keep coming


def test_metrics_redirect(sim):
    server = sim.create()
    sim.set_state(server["id"], "metrics_redirect", location="http://127.0.0.1:19999/elsewhere")
    resp = requests.get(server["url"] + "/metrics", allow_redirects=False, timeout=5)
    assert resp.status_code == 302
    assert resp.headers["location"] == "http://127.0.0.1:19999/elsewhere"


def test_slow_metrics_and_health(sim):
    server = sim.create()
    sim.set_state(server["id"], "slow_metrics", delay=0.3)
    t0 = time.monotonic()
    assert requests.get(server["url"] + "/metrics", timeout=5).status_code == 200
    assert time.monotonic() - t0 >= 0.3
    with pytest.raises(requests.exceptions.ReadTimeout):
        requests.get(server["url"] + "/metrics", timeout=0.1)
    sim.set_state(server["id"], "slow_health", delay=0.3)
    t0 = time.monotonic()
    assert requests.get(server["url"] + "/health", timeout=5).status_code == 200
    assert time.monotonic() - t0 >= 0.3
    sim.set_state(server["id"], "normal")
    assert sim.get(server["id"])["state"]["slow_metrics"] == 0.0


def test_modes_switch_at_run_time(sim):
    server = sim.create()
    sid = server["id"]
    sim.set_state(sid, "multiprocess")
    assert "process_start_time_seconds" not in scrape(server)
    sim.set_state(sid, "multiprocess", on=False)
    sim.set_state(sid, "disable_log_stats")
    assert "vllm:" not in scrape(server)
    info = sim.configure(sid, disable_log_stats=False, max_num_seqs=7, api_key="k")
    assert info["config"]["max_num_seqs"] == 7 and info["changed"] == ["api_key", "disable_log_stats", "max_num_seqs"]
    assert requests.get(server["url"] + "/v1/models", timeout=5).status_code == 401
    info = sim.configure(sid, engines=2)                  # a structural change restarts the process
    assert info["restarts"] == 1
    assert 'engine="1"' in scrape(server)


def test_control_api_errors(sim):
    with pytest.raises(SimulatorError) as err:
        sim.create(no_such_option=1)
    assert err.value.status == 400
    with pytest.raises(SimulatorError) as err:
        sim.set_state("nope", "hang")
    assert err.value.status == 404
    server = sim.create()
    with pytest.raises(SimulatorError):
        sim.set_state(server["id"], "sideways")
    with pytest.raises(SimulatorError):
        sim.set_state(server["id"], "hang", engine=3)


def test_start_loading_server_does_not_listen_yet(sim):
    server = sim.create(start_loading=True, load_seconds=30)
    assert server["status"] == "loading" and server["port"]
    with pytest.raises(requests.exceptions.ConnectionError):
        requests.get(server["url"] + "/health", timeout=2)


def test_hundred_servers_at_once(sim):
    servers = sim.create_many(100, step_rate=8.0)
    ports = {s["port"] for s in servers}
    lo, hi = (int(x) for x in PORT_RANGE.split("-"))
    assert len(ports) == 100 and all(lo <= p <= hi for p in ports)
    with requests.Session() as session:
        for s in servers:
            assert session.get(s["url"] + "/health", timeout=5).status_code == 200
    assert len(sim.list()) == 100


def test_module_cli_and_context_manager():
    cmd = [sys.executable, "-m", "tests.simulator", "--port-range", PORT_RANGE, "--servers", "2",
           "--max-num-seqs", "3", "-o", "step_rate=100", "-o", 'model="m1"']
    with subprocess.Popen(cmd, cwd=str(REPO), stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True) as proc:
        try:
            ready = json.loads(proc.stdout.readline())
            assert ready["event"] == "ready" and len(ready["servers"]) == 2
            assert all(s["config"]["max_num_seqs"] == 3 and s["config"]["model"] == "m1" for s in ready["servers"])
            client = SimulatorClient(ready["control_url"])
            assert client.health()["servers"] == 2
            client.shutdown()
            assert proc.wait(timeout=10) == 0
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    with run_simulator(port_range=PORT_RANGE) as client:
        server = client.create(model="ctx")
        assert requests.get(server["url"] + "/v1/models", timeout=5).json()["data"][0]["id"] == "ctx"
