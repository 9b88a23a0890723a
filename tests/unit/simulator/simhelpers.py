"""Helpers shared by the simulator tests (parsing /metrics with prometheus_client)."""

from pathlib import Path

import requests
from prometheus_client.parser import text_string_to_metric_families

from tests.support import paths
from tests.support.ports import span


REPO = Path(paths.REPO)
FIXTURES = Path(paths.FIXTURES)   # real captures, kept in the repository
PORT_RANGE = span("simulator-tests")   # loopback ports these tests may use


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
