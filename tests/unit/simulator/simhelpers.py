"""Helpers shared by the simulator tests (parsing /metrics with prometheus_client)."""

import os
from pathlib import Path

import requests
from prometheus_client.parser import text_string_to_metric_families

from tests.support import paths
from tests.support.ports import block


def worker_port_range(name="simulator-tests", environ=None):
    """This pytest-xdist worker's share of the port block ``name``, as ``"first-last"``: each worker has a
    simulator of its own, and a simulator takes any free port of its range. On a shared range a server that
    restarts frees its port for a moment, another worker's simulator could take it, and the test's next request
    reached a server of another test (test_restart_resets_counters_and_start_time failed so: its /health
    answered during the restart)."""
    environ = os.environ if environ is None else environ
    first, last = block(name)
    worker = environ.get("PYTEST_XDIST_WORKER", "")
    count = int(environ.get("PYTEST_XDIST_WORKER_COUNT") or 1) if worker else 1
    index = int(worker[2:]) if worker.startswith("gw") and worker[2:].isdigit() else 0
    size = (last - first + 1) // max(count, 1)
    lo = first + index * size
    return "%d-%d" % (lo, lo + size - 1)


REPO = Path(paths.REPO)
FIXTURES = Path(paths.FIXTURES)   # real captures, kept in the repository
PORT_RANGE = worker_port_range()   # loopback ports these tests may use: this worker's share of its block


def families(text):
    return list(text_string_to_metric_families(text))


def samples(text):
    """{(sample name, ((label, value), ...)): value}"""
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def value(text_or_samples, name, **labels):
    smp = samples(text_or_samples) if isinstance(text_or_samples, str) else text_or_samples
    want = {k: str(v) for k, v in labels.items()}
    total = None
    for (sname, slabels), val in smp.items():
        if sname != name:
            continue
        lab = dict(slabels)
        if all(lab.get(k) == v for k, v in want.items()):
            total = (total or 0.0) + val
    return total


def scrape(server, **kw):
    verify = server.get("ca_path") or True
    resp = requests.get(server["url"] + "/metrics", timeout=kw.pop("timeout", 10), verify=verify, **kw)
    resp.raise_for_status()
    return resp.text


ENGINE_COUNTERS = (
    "vllm:iteration_tokens_total_count", "vllm:iteration_tokens_total_sum", "vllm:generation_tokens_total",
    "vllm:prompt_tokens_total", "vllm:request_success_total", "vllm:num_preemptions_total",
    "vllm:estimated_flops_per_gpu_total",
)


def progress_view(text, engine=None):
    """The values a watchdog compares between two reads (engine counters and the KV gauge)."""
    smp = samples(text)
    view = {}
    for (name, labels), val in smp.items():
        lab = dict(labels)
        if engine is not None and lab.get("engine") != str(engine):
            continue
        if name in ENGINE_COUNTERS or name.startswith("vllm:num_requests") or name == "vllm:kv_cache_usage_perc":
            view[(name, labels)] = val
    return view
