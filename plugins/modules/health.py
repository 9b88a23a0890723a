#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) modelops.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r'''
---
module: health
short_description: Tell whether a vLLM server is idle, busy or stuck from its own metrics
version_added: 1.0.0
description:
  - Reads the server's own C(/metrics) (the Prometheus text vLLM exposes) twice or three times, O(interval) seconds apart,
    and says whether the engine is V(idle), V(busy), V(stuck), or one of a few more honest verdicts, with the evidence.
  - A health check must not use what it guards. A server with requests in flight is judged only by whether its counters
    move; it is never sent a request. Only a server with nothing in flight gets a one-token probe
    (C(max_tokens=1), C(temperature=0)), because a hang while idle reads exactly like idle.
  - The engine "moved" when any engine counter rose (steps, step tokens, prompt and generated tokens, finished requests,
    preemptions, estimated FLOPs) or the KV-cache gauge changed. In vLLM V1 the step counter does not move during a long
    chunked prefill, while the KV-cache gauge does, so a long prefill is V(busy), not V(stuck).
  - V(stuck) needs evidence. Work in flight and nothing moved, or an idle-looking engine that got no answer to two
    probes while nothing moved, for at least O(freeze_limit) seconds (300 by default), seen across two waits of this
    check. A timeout of the module's own request is never enough.
  - vLLM publishes its metrics only when an engine step returns, so one long step (a large prefill chunk, a kernel
    compile, a whole prompt with chunked prefill off) freezes every series for as long as it runs. A freeze shorter
    than O(freeze_limit) is V(frozen), neither V(busy) (nothing moved) nor V(stuck) (no proof yet). With O(state_dir) the
    freeze is measured across checks; O(freeze_wait) lets one check keep watching it until it reaches the limit.
  - A restart between two reads (new C(process_start_time_seconds); where that is absent, as with C(--api-server-count 2),
    changed C(*_created) values or a counter that went down) is never judged by comparing counters across the two
    processes; the new process is probed instead (V(restarted) or V(starting)). Reads that alternate between two
    processes are a load balancer, reported as V(unknown) with the advice to check the backends directly.
  - With O(kind=proxy) the module sends C(GET /v1/models) and nothing else.
  - The verdict is returned as the module's result and as the fact C(vllm_health). With O(servers), several servers are
    checked at once, each in its own thread.
author:
  - modelops.vllm maintainers (@modelops)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - ansible.builtin.action_common_attributes.facts
  - modelops.vllm.connection
attributes:
  check_mode:
    support: full
    details:
      - The module only reads; in check mode it still sends the one-token probe to a server with nothing in flight,
        since without it a hang while idle cannot be seen.
  diff_mode:
    support: none
  platform:
    platforms: posix
  facts:
    support: full
options:
  url:
    description:
      - Base URL of the vLLM OpenAI-compatible server, for example V(http://127.0.0.1:8000).
      - The module adds the paths itself (C(/metrics), C(/health), C(/version), C(/v1/models), C(/v1/completions)).
      - Redirects are followed only when they stay on the same scheme, host and port.
      - Exactly one of O(url) and O(servers) is required.
    type: str
  metrics_timeout:
    description:
      - Seconds allowed for one whole answer of C(/metrics), C(/health), C(/version) or C(/v1/models),
        body included. A server that answers slower, or trickles its answer, is cut off.
      - A C(/metrics) read that runs out of time gives the verdict V(unknown), never V(stuck).
    type: float
    default: 10
  name:
    description:
      - A name for the server, shown in RV(name) and RV(line). Default is O(url) (a password in it masked).
    type: str
  servers:
    description:
      - Several servers to check at once, instead of O(url). For example every vLLM instance of one host, or, run
        once on the controller, a whole fleet.
      - Every server is checked in its own thread, so the waits between reads are paid once for all of them.
      - Each item takes O(url) and optionally O(name), O(kind), O(api_key), O(model) and O(probe_api); the other
        options are shared.
      - The verdicts are returned in RV(servers) and RV(states), and as the fact C(vllm_health_servers).
    type: list
    elements: dict
    suboptions:
      name:
        description: A name for this server (unique in the list). Default is its O(servers[].url).
        type: str
      url:
        description: Base URL of this server.
        type: str
        required: true
      kind:
        description: As O(kind), for this server.
        type: str
        choices: [backend, proxy]
      api_key:
        description: As O(api_key), for this server. Never logged.
        type: str
      model:
        description: As O(model), for this server.
        type: str
      probe_api:
        description: As O(probe_api), for this server.
        type: str
        choices: [completions, chat]
  background_dir:
    type: path
    description:
      - With O(servers), start the check in a detached process on this host and return at once, with
        RV(results_file), a new file in this directory (created C(0750) if missing, except in check mode, where a
        private temporary directory takes its place; refused if group or others can write it). Collect the verdicts
        later with M(modelops.vllm.health_results) (or M(modelops.vllm.watchdog_gate)'s
        O(modelops.vllm.watchdog_gate#module:results_file)).
      - This is what C(async) with C(poll) V(0) does, at the cost of a plain module run. The process stops after the
        check's overall deadline plus 60 seconds at most. Files nobody collected are removed after an hour.
  workers:
    description:
      - With O(servers), how many servers are checked at the same time (threads). Keep it at least the number
        of servers, or the waits between reads are paid more than once.
    type: int
    default: 256
  kind:
    description:
      - V(backend) is one vLLM server, judged from its C(/metrics).
      - V(proxy) is a load balancer in front of several backends. Each C(/metrics) read could come from another
        backend, so a proxy is checked by C(GET /v1/models) only (V(up) or V(down)); check its backends directly.
    type: str
    choices: [backend, proxy]
    default: backend
  interval:
    description:
      - Seconds between two reads of C(/metrics) when work is in flight. A V(busy) verdict takes one wait,
        a V(stuck) verdict two.
      - Pick it longer than the slowest engine step you expect. On the engine, one step is milliseconds;
        the default leaves a wide margin.
    type: float
    default: 5
  probe_timeout:
    description:
      - Seconds allowed for the one-token probe of an idle-looking server.
    type: float
    default: 30
  probe_api:
    description:
      - The endpoint of the probe. V(completions) is C(POST /v1/completions); V(chat) is C(POST /v1/chat/completions),
        for a server that serves chat only.
    type: str
    choices: [completions, chat]
    default: completions
  model:
    description:
      - Model name for the probe.
      - Default is the C(model_name) label of the server's metrics, else the first id from C(/v1/models).
    type: str
  metrics_max_bytes:
    description:
      - The largest C(/metrics) answer accepted, in bytes, after decompression; at most 64 MiB. A real C(/metrics)
        body is about 50 KB per engine. The JSON endpoints (C(/version), C(/v1/models), the probe's answer) are capped
        at 1 MiB or this, whichever is smaller.
      - A larger answer gives V(unknown), and so does one of over 500,000 lines (real vLLM writes about 630 per
        engine). Whatever arrives within the cap, the module stays under about 200 MB of memory with the default.
    type: int
    default: 16777216
  state_dir:
    description:
      - A directory on the host that runs the check where it keeps each server's progress memory between runs
        (C(<name>.progress.json), a few KB, and a lock beside it), for O(stall_window) and O(freeze_limit). Created
        C(0750) if missing (not in check mode, which also writes nothing); refused if group or others can write it. The
        P(modelops.vllm.watchdog#role) role passes its own state directory.
      - Without it the window rule is off, and the evidence (its C(progress)) says so, and a freeze is measured within
        one check alone.
    type: path
  freeze_limit:
    description:
      - Seconds without any movement (no counter rose, the KV-cache gauge did not change) that prove a hang. A freeze
        shorter than this is V(frozen), never V(stuck).
      - vLLM publishes its metrics only when an engine step returns, so a healthy server freezes every series for as
        long as its longest step. A 16K-token prefill chunk of a dense 70B model on a GB10 takes 10-20 s, a kernel JIT
        inside a step 30-70 s on Blackwell, a whole prompt with chunked prefill off minutes. vLLM's own stall watchdog
        and C(VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS) wait 300 s; so does the default.
      - The freeze is counted from the first read that showed work in flight on an engine that has not moved since
        (or from the first probe sent to an idle-looking one), across checks with O(state_dir), else within this check
        alone. The result warns when the longest the server has already taken between two tokens
        (C(vllm:inter_token_latency_seconds)) is not well below it.
    type: float
    default: 300
  freeze_wait:
    description:
      - Seconds this check may keep reading a freeze that has not lasted O(freeze_limit) yet, to reach proof in this
        run (a read every O(interval)). It watches only when the limit can be reached within what is left of it; it
        stops as soon as the engine moves (V(busy), a long step). V(0) does not watch (a freeze is V(frozen) at once).
      - It adds to the check's overall deadline. The P(modelops.vllm.watchdog#role) role watches up to the limit.
    type: float
    default: 0
  stall_window:
    description:
      - Seconds. An engine is V(stuck) when, across checks, it had work in flight at every read for at least this long,
        and in that time no token was generated and no request completed (aborted and errored requests do not count),
        yet it kept stepping, prompts kept completing or requests kept being preempted, within this check too. Such
        hangs (a decode deadlock while prefill runs on, one request prefilled again and again) keep some counter moving
        and read V(busy) on every single check.
      - A prefill in progress moves only the KV cache and never trips the rule, however long it runs. Decode starved
        by prefill shorter than the window does not trip it either.
      - V(0) turns the rule off. It needs O(state_dir). Pick it well above the longest stretch without a generated
        token that your healthy servers show (the watchdog role's default is 1200, see its documentation).
    type: float
    default: 0
notes:
  - Run it on the controller (O(url) pointing at the server, with C(delegate_to) V(localhost)) or on the vLLM host itself
    (O(url) V(http://127.0.0.1:8000)); it only needs HTTP access.
  - One check never takes longer than its overall deadline, 2 x O(interval) + 2 x O(probe_timeout) + 8 x
    O(metrics_timeout) + O(freeze_wait) seconds (150 s with the defaults); what is left of it caps every request, and a
    check that runs out of it is V(unknown).
  - A C(/metrics) that answers slower than O(metrics_timeout) gives V(unknown), never V(stuck).
  - >-
    Before it probes, and before it says V(stuck), it asks C(GET /is_paused) (vLLM's pause API, served with
    C(VLLM_SERVER_DEV_MODE=1); 404 otherwise). An answer of exactly C({"is_paused": true}), or a weight transfer in
    flight (C(vllm:rl_weight_update_operations_in_flight) above 0), gives V(paused). The endpoint is an RPC to the
    engine core, so a hung engine does not answer it: no answer in O(metrics_timeout), an error or anything else is
    no proof of a pause, and the verdict stays what the counters say.
  - V(stuck) needs proof. Values that cannot be true (negative, NaN or infinite gauges and counters), progress series
    missing from a read, a probe whose connection was closed or reset, or a probe cut short are no evidence. They give
    V(unknown) with the reason, never V(stuck). A request that cannot be sent at all (an O(api_key) with a newline, a
    URL that does not parse) fails the task.
  - The API key and a password in O(url) never appear in the result, in any spelling (raw, escaped, quoted).
  - V0 servers and V1 0.7.x observe idle zeros into the step histogram; for them (told by C(/version), or by V0-only
    series) the step count is not taken as progress.
  - What to do about each verdict (what the watchdog does with it, what to check next, the command that shows it) is
    in the collection's C(docs/runbook.md); C(ansible-galaxy collection list modelops.vllm) shows where the collection
    is installed.
seealso:
  - name: vLLM production metrics
    description: The metrics vLLM exposes on C(/metrics).
    link: https://docs.vllm.ai/en/latest/usage/metrics.html
'''

EXAMPLES = r'''
- name: Check the vLLM server on this host
  modelops.vllm.health:
    url: http://127.0.0.1:8000
  register: vllm

- name: Show the verdict
  ansible.builtin.debug:
    msg: "{{ vllm.state }}: {{ vllm.reason }}"

- name: Check a server that needs an API key, from the controller
  modelops.vllm.health:
    url: "https://{{ inventory_hostname }}:8000"
    api_key: "{{ vault_vllm_api_key }}"
    ca_path: /etc/pki/internal-ca.pem
    interval: 10
  delegate_to: localhost

- name: Check the load balancer in front of the backends (GET /v1/models only)
  modelops.vllm.health:
    url: http://llm-proxy.example.com
    kind: proxy

- name: Check both vLLM instances of this host in one task (the waits are paid once)
  modelops.vllm.health:
    servers:
      - name: chat
        url: http://127.0.0.1:8000
      - name: embed
        url: http://127.0.0.1:8001
  register: instances

- name: Check a whole fleet from the controller, all servers at once
  modelops.vllm.health:
    servers: "{{ groups['vllm'] | modelops.vllm.vllm_servers(hostvars) }}"
  run_once: true
  delegate_to: localhost

- name: Start the check of this host's servers in the background (every host's waits overlap)
  modelops.vllm.health:
    servers: "{{ [inventory_hostname] | modelops.vllm.vllm_servers(hostvars) }}"
  async: 150
  poll: 0
  register: job

- name: Collect the verdicts (no polling noise; the job's file is removed)
  modelops.vllm.health_results:
    results_file: "{{ job.results_file }}"

- name: Watch a freeze until it is proof of a hang (or the engine moves), up to the limit
  modelops.vllm.health:
    url: http://127.0.0.1:8000
    freeze_limit: 300
    freeze_wait: 300

- name: Fail when a server is stuck
  modelops.vllm.health:
    url: http://127.0.0.1:8000
  register: vllm
  failed_when: vllm.state == 'stuck'
'''

RETURN = r'''
state:
  description:
    - The verdict.
    - V(idle) nothing in flight and a one-token probe answered.
    - V(busy) work in flight and the engine moved between two reads; no probe was sent.
    - V(stuck) work in flight and nothing moved for at least O(freeze_limit) (and across two waits of this check); or an
      idle-looking engine that got no answer to two probes while nothing moved for that long; or, with O(stall_window),
      an engine busy doing nothing useful for that long.
    - V(frozen) work in flight (or two probes unanswered) and nothing moved, for less than O(freeze_limit) so far, as
      one long engine step looks too. Not proof of a hang, never restarted; RV(frozen_for) says how long.
    - V(restarted) the serving process changed between reads; counters were not compared; the new process answered
      a probe (or already has work in flight).
    - V(starting) the process changed between reads and the new one does not answer yet.
    - V(down) nothing answers, or C(/health) says the engine is dead.
    - V(sleeping) the engine sleeps on purpose (C(vllm:engine_sleep_state)); not probed.
    - V(paused) the engine is paused on purpose (C(GET /is_paused) answered true, or an RL weight transfer is in
      flight); not probed, not judged.
    - V(up) it answers but its load cannot be known (a proxy, or a server without usable metrics whose probe answered).
    - V(unknown) the check could not judge (metrics too slow or unreadable, no usable metrics and no probe answer,
      reads from alternating processes).
  returned: when O(url) is given (each item of RV(servers) has the same keys)
  type: str
  sample: busy
reason:
  description: One plain sentence saying why.
  returned: when O(url) is given (each item of RV(servers) has the same keys)
  type: str
  sample: 3 request(s) in flight and the engine moved within 5.0 s (generation_tokens_total, iteration_tokens_total_count); no probe sent
line:
  description: "One line to read: C(<name>: <state> - <reason>)."
  returned: when O(url) is given (each item of RV(servers) has the same keys)
  type: str
  sample: 'http://127.0.0.1:8000: idle - nothing in flight and a one-token probe answered in 0.04 s'
url:
  description: The URL that was checked (a password in it shown as C(********)).
  returned: when O(url) is given (each item of RV(servers) has the same keys)
  type: str
  sample: http://127.0.0.1:8000
kind:
  description: V(backend) or V(proxy), as asked.
  returned: when O(url) is given (each item of RV(servers) has the same keys)
  type: str
  sample: backend
checked_at:
  description: When the check started, ISO 8601 UTC.
  returned: when O(url) is given (each item of RV(servers) has the same keys)
  type: str
  sample: '2026-11-30T04:12:00Z'
probe:
  description: The one-token probe, if one was sent (the last one when there were two).
  returned: when O(url) is given (each item of RV(servers) has the same keys)
  type: dict
  contains:
    sent:
      description: Whether a probe was sent.
      type: bool
      sample: false
    ok:
      description: Whether it answered with a completion (HTTP 200 and a completion token or a finish reason). Null when not sent.
      type: bool
      sample: true
    outcome:
      description: V(ok), V(no_answer) (timeout or dropped connection), V(rejected) (HTTP 4xx), V(server_error), V(refused) or V(invalid).
      type: str
      sample: ok
    seconds:
      description: How long it took.
      type: float
      sample: 0.041
    status:
      description: HTTP status of its answer.
      type: int
      sample: 200
    error:
      description: What went wrong, when it did not answer with a completion.
      type: str
      sample: timeout (no answer in 30.0 s)
    model:
      description: The model named in the probe.
      type: str
      sample: tiny
    attempts:
      description: How many probes were sent.
      type: int
      sample: 1
running:
  description: Requests running (summed over engines) at the last read; null without metrics.
  returned: when O(url) is given (each item of RV(servers) has the same keys)
  type: float
  sample: 3.0
waiting:
  description: Requests waiting (summed over engines) at the last read; null without metrics.
  returned: when O(url) is given (each item of RV(servers) has the same keys)
  type: float
  sample: 0.0
kv_cache_usage:
  description: KV-cache usage 0..1 at the last read (the largest over engines).
  returned: when O(url) is given (each item of RV(servers) has the same keys)
  type: float
  sample: 0.0071
steps_per_second:
  description: Engine steps per second between the first and last read of the same process, when there were two.
  returned: when O(url) is given (each item of RV(servers) has the same keys)
  type: float
  sample: 1972.5
generation_tokens_per_second:
  description: Generated tokens per second between the first and last read of the same process, when there were two.
  returned: when O(url) is given (each item of RV(servers) has the same keys)
  type: float
  sample: 5917.4
restarted:
  description: Whether the serving process changed between reads.
  returned: when O(url) is given (each item of RV(servers) has the same keys)
  type: bool
  sample: false
version:
  description: The vLLM version from C(/version), when it answered.
  returned: when O(url) is given (each item of RV(servers) has the same keys)
  type: str
  sample: 0.32.0
model:
  description: The served model name (from the probe, the metrics' C(model_name) label or C(/v1/models)).
  returned: when O(url) is given (each item of RV(servers) has the same keys)
  type: str
  sample: tiny
models:
  description: Model ids from C(/v1/models), when it was read (always for a proxy).
  returned: when O(url) is given (each item of RV(servers) has the same keys)
  type: list
  elements: str
  sample: [tiny]
stuck_engines:
  description: The data-parallel engines (the C(engine) label) found stuck; empty unless O(kind=backend) and V(stuck).
  returned: when O(url) is given (each item of RV(servers) has the same keys)
  type: list
  elements: str
  sample: []
frozen_for:
  description:
    - With V(frozen) or V(stuck), how long the engine has shown no movement at all, seconds (the longest of the engines
      found frozen); null otherwise.
  returned: when O(url) is given (each item of RV(servers) has the same keys)
  type: float
  sample: 12.0
longest_step:
  description:
    - The longest this server has already taken, from its own histograms (since it started), as the bounds of the
      highest bucket with an observation. C(inter_token_latency) between two tokens of a request (one engine step while
      it decodes; a long prefill step of another request shows here), C(prefill) a request's whole prefill, and
      C(first_token) a request's time to its first token, each C({above, at_most}) in seconds (C(at_most) null past the
      last bucket). Only the histograms the server reports.
  returned: when O(url) is given (each item of RV(servers) has the same keys)
  type: dict
  sample: {"inter_token_latency": {"above": 40.0, "at_most": 80.0}}
config_warnings:
  description:
    - Configuration warnings of this check, for example a O(freeze_limit) that is not well above the longest this
      server has taken between two tokens (at least the top of that bucket, and twice its bottom). The module also
      shows them as Ansible warnings.
  returned: when O(url) is given (each item of RV(servers) has the same keys)
  type: list
  elements: str
  sample: []
evidence:
  description:
    - The raw evidence. For a backend, C(reads) (each read's time, duration, start time, running, waiting, KV cache,
      steps, generated tokens and per-engine numbers, at most 16 engines; values that cannot be true under
      C(problems)), C(moved) (per wait, per engine, what rose and by how much), C(probes), C(health) (the C(/health)
      answer, when asked), C(is_paused) (each C(/is_paused) answer), C(progress) (the window rule, C(window), and
      C(off) with why it is off, or per engine the C(since) and C(seconds) of its streak without useful progress and
      what C(activity) grew in it), C(freeze) (C(limit), C(wait), C(watched) seconds, C(memory) whether it was kept
      across checks, and per frozen engine C(since), C(seconds) and C(remembered)), C(interval), C(deadline) (the
      check's overall time limit, seconds), C(idle_ticks) and C(notes).
    - For a proxy, C(models_answer) and C(seconds).
  returned: when O(url) is given (each item of RV(servers) has the same keys)
  type: dict
  sample: {"interval": 5.0, "moved": [{"0": {"vllm:generation_tokens_total": 18291.0}}], "notes": []}
name:
  description: The server's name (O(name), else its URL).
  returned: when O(url) is given
  type: str
  sample: http://127.0.0.1:8000
error:
  description: Always null in a successful result; set in an item of RV(servers) whose check could not run as configured.
  returned: when O(url) is given
  type: str
  sample: null
results_file:
  description: With O(background_dir), the file the background check writes its result to.
  returned: when O(background_dir) is given
  type: str
  sample: /var/lib/vllm-watchdog/checks/check-3f9a1c.json
servers:
  description:
    - With O(servers), one result per server, in the order given, each with the keys of a single check
      (RV(state), RV(reason), RV(probe), ...) plus RV(name).
  returned: when O(servers) is given
  type: list
  elements: dict
  sample: [{"name": "chat", "state": "busy", "reason": "...", "url": "http://127.0.0.1:8000"}]
states:
  description: With O(servers), the verdict of each server by name.
  returned: when O(servers) is given
  type: dict
  sample: {"chat": "busy", "embed": "idle"}
ansible_facts:
  description: Facts to add to the host.
  returned: always
  type: dict
  contains:
    vllm_health:
      description: With O(url), the whole result above (state, reason, probe, readings, evidence, ...).
      returned: when O(url) is given
      type: dict
    vllm_health_servers:
      description: Every checked server's result by name.
      returned: when O(servers) is given
      type: dict
'''


from ansible.module_utils.basic import AnsibleModule, missing_required_lib

from ansible_collections.modelops.vllm.plugins.module_utils._check import PER_SERVER, check_many, check_one
from ansible_collections.modelops.vllm.plugins.module_utils._http import HAS_REQUESTS, REQUESTS_IMPORT_ERROR, connection_args
from ansible_collections.modelops.vllm.plugins.module_utils._jobs import start_background
from ansible_collections.modelops.vllm.plugins.module_utils._redact import redact, secrets_of
from ansible_collections.modelops.vllm.plugins.module_utils._settings import (
    CHECK_SETTINGS, HEALTH_LIMITS, HEALTH_SETTINGS, MEMORY_OF_CHECKS, check_deadline,
    option_specs)
from ansible_collections.modelops.vllm.plugins.module_utils._statedir import StateError
from ansible_collections.modelops.vllm.plugins.module_utils._types import in_range, range_words
from ansible_collections.modelops.vllm.plugins.module_utils._urls import display_url


def invalid_settings(params):
    """Messages for the numbers that are out of range (NaN and infinities included)."""
    errors = []
    for option, limits in HEALTH_LIMITS.items():
        if in_range(params[option], limits) is None:
            errors.append('%s must be %s, got %s' % (option, range_words(limits), params[option]))
    return errors


def argument_spec():
    return dict(
        connection_args(),
        url=dict(type='str'),
        name=dict(type='str'),
        servers=dict(type='list', elements='dict', options=dict(
            name=dict(type='str'),
            url=dict(type='str', required=True),
            kind=dict(type='str', choices=['backend', 'proxy']),
            api_key=dict(type='str', no_log=True),
            model=dict(type='str'),
            probe_api=dict(type='str', choices=['completions', 'chat']),
        )),
        kind=dict(type='str', default='backend', choices=['backend', 'proxy']),
        probe_api=dict(type='str', default='completions', choices=['completions', 'chat']),
        model=dict(type='str'),
        background_dir=dict(type='path'),
        state_dir=dict(type='path'),
        # interval, probe_timeout, metrics_timeout, stall_window, freeze_limit, freeze_wait, metrics_max_bytes,
        # workers: the catalogue's.
        **dict(option_specs(CHECK_SETTINGS), **dict(option_specs(MEMORY_OF_CHECKS), **option_specs(HEALTH_SETTINGS)))
    )


def main():
    """One check: of one server (url) or of several at once (servers), started in the background with background_dir
    (modelops.vllm.health_results collects it)."""
    module = AnsibleModule(
        argument_spec=argument_spec(),
        required_one_of=[('url', 'servers')],
        mutually_exclusive=[('url', 'servers'), ('url', 'background_dir')],
        supports_check_mode=True,
    )
    params = module.params
    specs = server_specs(params, module.check_mode)
    # Every spelling of every secret is masked in whatever the module returns, failures included.
    secrets = sorted(set(form for spec in specs for form in secrets_of(spec)), key=len, reverse=True)
    module.no_log_values.update(secrets)

    def fail(msg, **kwargs):
        module.fail_json(msg=redact(msg, secrets), **redact(kwargs, secrets))

    if not HAS_REQUESTS:  # also for a check in the background: the detached process imports it
        module.fail_json(msg=missing_required_lib('requests'), exception=REQUESTS_IMPORT_ERROR)
    errors = invalid_settings(params)
    if errors:
        fail('; '.join(errors))
    if params['url'] is not None:
        check_url(module, specs[0], fail)
    names = [spec.get('name') or display_url(spec['url']) for spec in specs]
    if len(set(names)) != len(names):
        fail('servers need unique names (or unique urls): %s' % ', '.join(names))
    if params['background_dir']:
        start_in_background(module, specs, secrets, fail)
    check_servers(module, specs, secrets)


def server_specs(params, check_mode):
    """One check's settings per server: the module's options, each server's own (O(servers)) over them."""
    params['_check_mode'] = check_mode
    if params['servers'] is None:
        return [params]
    specs = []
    for server in params['servers']:
        spec = dict(params)
        spec.update((key, server[key]) for key in PER_SERVER if server.get(key) is not None)
        specs.append(spec)
    return specs


def check_url(module, spec, fail):
    """O(url): one server, its verdict as the result and as the fact vllm_health."""
    result = check_one(spec)
    if result['error']:
        fail(result['error'], url=result['url'], line=result['line'])
    for warning in result.get('config_warnings') or []:
        module.warn('%s: %s' % (result['name'], warning))
    # The verdict once as the result and once as the fact: -v shows each of them once.
    module.exit_json(changed=False, ansible_facts={'vllm_health': result}, **result)


def check_servers(module, specs, secrets):
    """O(servers): every server at once, O(workers) at a time."""
    result = servers_result(check_many(specs, workers=module.params['workers']), secrets)
    for server in result['servers']:
        for warning in server.get('config_warnings') or []:
            module.warn('%s: %s' % (server.get('name'), warning))
    if result.get('failed'):
        module.fail_json(**result)
    module.exit_json(**result)


def start_in_background(module, specs, secrets, fail):
    """O(background_dir): the check of O(servers) in a detached process; its O(results_file) is returned at once."""
    params = module.params

    def work():
        return servers_result(check_many(specs, workers=params['workers']), secrets)

    # The collection's own code the check runs is loaded (the imports above) before the fork: Ansible
    # removes the module's files as soon as this run returns. requests, installed on the host, is
    # imported by the check itself.
    limit = check_deadline(params['interval'], params['probe_timeout'], params['metrics_timeout'],
                           params['freeze_wait']) + 60
    try:
        # Check mode creates nothing: a missing directory is not created (a temporary one, removed
        # with the file when it is collected, takes its place).
        path = start_background(work, params['background_dir'], limit, create=not module.check_mode)
    except (StateError, OSError) as exc:
        fail('the background check cannot start: %s' % exc)
    module.exit_json(changed=False, started=True, results_file=path)


def servers_result(results, secrets):
    """The module's result for ``servers``: every verdict, and a failure for the servers configured wrong."""
    by_name = dict((r['name'], r) for r in results)
    states = dict((r['name'], r['state']) for r in results)
    out = dict(changed=False, servers=results, states=states, ansible_facts={'vllm_health_servers': by_name})
    errors = [r for r in results if r.get('error')]
    if errors:
        # Every server still has its verdict in servers; the task fails for the ones configured wrong.
        out.update(failed=True, msg=redact('the check cannot run as configured for %s' % '; '.join(
            '%s (%s)' % (r['name'], r['error']) for r in errors), secrets))
        del out['ansible_facts']
    return out


if __name__ == '__main__':
    main()
