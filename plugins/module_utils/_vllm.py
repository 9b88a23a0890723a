# -*- coding: utf-8 -*-
# Copyright (c) modelops.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

"""Everything the collection knows about vLLM as an engine, in one place: its profile.

Private to this collection. Standard library only, nothing else from the collection (see
tests/unit/plugins/module_utils/test_layers.py). The reader (``_readings``), the progress window
(``_stall``), the HTTP client (``_http``) and the judge (``_verdict``) take vLLM's metric names, label
names, endpoints, version quirks and dead-engine statuses from here; docs/vllm-facts.md says where each
fact comes from. tests/unit/extensions/test_prometheus_profile.py checks that the Prometheus rules
(extensions/prometheus) watch the same series.

The module's names are the facts; ``PROFILE`` (an ``EngineProfile``) is the same facts as one value, the
one the reader (``read_text``), the window (``Window``), the client (``Client``) and the judge (``Judge``)
receive (each defaults to it) and the registry ``_check.ENGINES`` names. Another engine whose counters fit
the same rule is another ``EngineProfile`` (a module like this one, with its fixtures and a simulator mode)
and one entry in that registry.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

from collections import namedtuple
from types import MappingProxyType

NAME = 'vllm'

# -- metrics ---------------------------------------------------------------------------------------

# Every series of the engine has this prefix; an exposition without one has no engine metrics
# (a server started with --disable-log-stats).
PREFIX = 'vllm:'

# Gauges.
RUNNING = 'vllm:num_requests_running'
WAITING = 'vllm:num_requests_waiting'
WAITING_BY_REASON = 'vllm:num_requests_waiting_by_reason'
KV_CACHE = ('vllm:kv_cache_usage_perc', 'vllm:gpu_cache_usage_perc')
SLEEP_STATE = 'vllm:engine_sleep_state'
# RL weight transfers in flight (0.32+, vllm/entrypoints/rl/online/metrics.py): the trainer froze
# generation on purpose. An API-server gauge, labelled by operation, not by engine.
WEIGHT_UPDATES = 'vllm:rl_weight_update_operations_in_flight'
# The process's start time (prometheus_client's process collector): tells two processes apart.
START_TIME = 'process_start_time_seconds'
# Series only the V0 engine exposes; V0 observes idle zeros into the step histogram.
V0_ONLY = ('vllm:num_requests_swapped', 'vllm:cpu_cache_usage_perc')
# Realtime (streaming speech-to-text) WebSocket sessions open (0.33, an API-server gauge, no engine label,
# vllm/entrypoints/speech_to_text/realtime/metrics.py). A session whose client pauses waits in the scheduler
# as a deferred request (RequestStatus.WAITING_FOR_STREAMING_REQ) for as long as the pause lasts.
WEBSOCKETS = 'vllm:websocket_connections_active'
# How long this server has already taken, by its own histograms (the bucket series, label ``le``): between
# two tokens of a request (one engine step while it decodes: a long prefill step of another request shows
# here), a request's whole prefill, and its first token. (name in the evidence, bucket series)
STEP_HISTOGRAMS = (
    ('inter_token_latency', 'vllm:inter_token_latency_seconds_bucket'),
    ('prefill', 'vllm:request_prefill_time_seconds_bucket'),
    ('first_token', 'vllm:time_to_first_token_seconds_bucket'),
)
BUCKET_LABEL = 'le'

# Counters.
STEPS = 'vllm:iteration_tokens_total_count'
GENERATION = 'vllm:generation_tokens_total'
PROMPT = 'vllm:prompt_tokens_total'
SUCCESS = 'vllm:request_success_total'
PREEMPTIONS = 'vllm:num_preemptions_total'

# Any of these rising means the engine did work between two reads. The step
# histogram alone is not enough: in V1 a prefill-only chunk is not observed.
PROGRESS_COUNTERS = (
    STEPS,
    'vllm:iteration_tokens_total_sum',
    GENERATION,
    PROMPT,
    SUCCESS,
    PREEMPTIONS,
    'vllm:estimated_flops_per_gpu_total',
)
GAUGES = (RUNNING, WAITING, WAITING_BY_REASON, SLEEP_STATE, WEIGHT_UPDATES, WEBSOCKETS) + KV_CACHE
# Series whose *_created value tells a new process (with this prefix and suffix).
CREATED_SUFFIX = '_created'

# -- labels ----------------------------------------------------------------------------------------

# The data-parallel engine index; V0 and 0.7.x have none, so everything is engine DEFAULT_ENGINE.
ENGINE_LABEL = 'engine'
DEFAULT_ENGINE = '0'
MODEL_LABEL = 'model_name'
# vllm:num_requests_waiting_by_reason{reason="deferred"}: waiting requests the scheduler skips on
# purpose (0.25+: a grammar still compiling, remote KV not there yet).
REASON_LABEL = 'reason'
DEFERRED = 'deferred'
# vllm:engine_sleep_state{sleep_state="awake"} is 0 while the engine sleeps on purpose.
SLEEP_LABEL = 'sleep_state'
AWAKE = 'awake'
# vllm:request_success_total{finished_reason=...}: requests that ended this way did no useful work
# (a client that gave up, or an error).
FINISHED_LABEL = 'finished_reason'
NOT_COMPLETED = ('abort', 'error')

# The counters the progress window (_stall) follows across checks, by its own names.
STALL_COUNTERS = {'generation': GENERATION, 'steps': STEPS, 'prompt': PROMPT, 'preemptions': PREEMPTIONS}

# -- endpoints (paths below the server's base URL) -------------------------------------------------

METRICS_PATH = 'metrics'
HEALTH_PATH = 'health'
VERSION_PATH = 'version'
MODELS_PATH = 'v1/models'
# vLLM's pause API (VLLM_SERVER_DEV_MODE=1): {"is_paused": bool}; 404 without dev mode. Not under
# /v1/, so not guarded by --api-key. An RPC to the engine core: a hung engine does not answer.
PAUSE_PATH = 'is_paused'
# The one-token probe, by the health module's probe_api.
PROBE_PATHS = {'completions': 'v1/completions', 'chat': 'v1/chat/completions'}

# -- version quirks --------------------------------------------------------------------------------

# V0 and V1 0.7.x observe a 0 into the step histogram while idle: below this version the step count
# is no progress counter.
IDLE_TICKS_BEFORE = (0, 8)


def parse_version(text):
    """'0.7.3' -> (0, 7); '0.11.0rc1' -> (0, 11); anything else -> None."""
    match = re.match(r'\s*v?(\d{1,4})\.(\d{1,4})', text or '')
    if not match:
        return None
    return int(match.group(1)), int(match.group(2))


# -- dead-engine statuses and the pause answer -----------------------------------------------------

def engine_is_dead(fetched):
    """/health: 503 (>= 0.11) or 500 (0.8-0.10) when the engine died; nothing
    listening means the process is gone. A slow /health says nothing."""
    return fetched.error in ('refused', 'dropped') or (fetched.status is not None and fetched.status >= 500)


def pause_answer(fetched):
    """True when an answer of GET /is_paused proves a pause: HTTP 200 and exactly {"is_paused": true}.
    Anything else (404 without VLLM_SERVER_DEV_MODE, an error, no answer in time: the endpoint is an
    RPC to the engine core, so a hung engine does not answer) is no proof."""
    if fetched.error or fetched.status != 200:
        return False
    body = fetched.json()
    return isinstance(body, dict) and body.get('is_paused') is True


def pause_denied(fetched):
    """True when an answer of GET /is_paused says definitely "not paused" (HTTP 200, {"is_paused": false}):
    the only answer worth asking again later in the same check (404 without dev mode stays so, and a hung
    engine leaves the RPC unanswered)."""
    if fetched.error or fetched.status != 200:
        return False
    body = fetched.json()
    return isinstance(body, dict) and body.get('is_paused') is False


# -- wording: the engine's own flags and names in the sentences of a verdict -----------------------

TITLE = 'vLLM'
# Why an exposition has no series with PREFIX.
NO_METRICS_HINT = 'a server started with --disable-log-stats'
# What proved a pause (GET PAUSE_PATH and its answer).
PAUSE_PROOF = 'GET /is_paused answered {"is_paused": true}'
# Why a new process may show no start time (the restart's wait until ready).
NO_START_TIME_HINT = 'vLLM with --api-server-count above 1 reports no start time'


# -- the profile as one value ----------------------------------------------------------------------

# What an engine profile gives the reader, the window, the client and the judge (the fields are the
# module names above, in lower case). Another engine builds one of these.
EngineProfile = namedtuple('EngineProfile', (
    # metrics
    'name', 'prefix', 'running', 'waiting', 'waiting_by_reason', 'kv_cache', 'sleep_state', 'weight_updates',
    'start_time', 'v0_only', 'steps', 'generation', 'prompt', 'success', 'preemptions', 'progress_counters',
    'gauges', 'created_suffix', 'websockets', 'step_histograms', 'bucket_label',
    # labels
    'engine_label', 'default_engine', 'model_label', 'reason_label', 'deferred', 'sleep_label', 'awake',
    'finished_label', 'not_completed', 'stall_counters',
    # endpoints
    'metrics_path', 'health_path', 'version_path', 'models_path', 'pause_path', 'probe_paths',
    # version quirk, dead-engine statuses, the pause answer: (parse_version(text) -> (major, minor) or None;
    # engine_is_dead(fetched), pause_answer(fetched), pause_denied(fetched) -> bool)
    'idle_ticks_before', 'parse_version', 'engine_is_dead', 'pause_answer', 'pause_denied',
    # wording
    'title', 'no_metrics_hint', 'pause_proof', 'no_start_time_hint',
))

PROFILE = EngineProfile(
    name=NAME, prefix=PREFIX, running=RUNNING, waiting=WAITING, waiting_by_reason=WAITING_BY_REASON,
    kv_cache=KV_CACHE, sleep_state=SLEEP_STATE, weight_updates=WEIGHT_UPDATES, start_time=START_TIME,
    v0_only=V0_ONLY, steps=STEPS, generation=GENERATION, prompt=PROMPT, success=SUCCESS, preemptions=PREEMPTIONS,
    progress_counters=PROGRESS_COUNTERS, gauges=GAUGES, created_suffix=CREATED_SUFFIX,
    websockets=WEBSOCKETS, step_histograms=STEP_HISTOGRAMS, bucket_label=BUCKET_LABEL,
    engine_label=ENGINE_LABEL, default_engine=DEFAULT_ENGINE, model_label=MODEL_LABEL, reason_label=REASON_LABEL,
    deferred=DEFERRED, sleep_label=SLEEP_LABEL, awake=AWAKE, finished_label=FINISHED_LABEL,
    not_completed=NOT_COMPLETED, stall_counters=MappingProxyType(dict(STALL_COUNTERS)),
    metrics_path=METRICS_PATH, health_path=HEALTH_PATH, version_path=VERSION_PATH, models_path=MODELS_PATH,
    pause_path=PAUSE_PATH, probe_paths=MappingProxyType(dict(PROBE_PATHS)),
    idle_ticks_before=IDLE_TICKS_BEFORE, parse_version=parse_version, engine_is_dead=engine_is_dead,
    pause_answer=pause_answer, pause_denied=pause_denied,
    title=TITLE, no_metrics_hint=NO_METRICS_HINT, pause_proof=PAUSE_PROOF, no_start_time_hint=NO_START_TIME_HINT,
)
