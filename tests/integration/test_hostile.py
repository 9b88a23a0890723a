"""The hostile-input tier (issue 8): modelops.vllm.health against servers that misbehave on purpose,
driven through ``ansible-playbook -vvv`` exactly as users run it.

It asserts the invariants of the contract, not today's output:

* ``stuck`` only on positive evidence; a server that reports anything running or waiting (or a
  request gauge that is not a reading: negative, NaN, infinite) is never probed;
* a request that could not be sent is a configuration error (a failed task with a message);
* no traceback in any output; no secret (API key, URL password; value, repr or URL-encoded) in any
  output at -vvv;
* one check ends within ``2*interval + 2*probe_timeout + 8*metrics_timeout`` (+15 s for Ansible);
  the returned result is under 1 MB;
* environment proxies are not used by default, and never get the bearer key;
* with ``servers:`` one server's bad input never loses the verdicts of the others.

And the other direction: a raw server whose metrics are frozen with work in flight, and an
idle-looking one whose probe really never answers, ARE ``stuck``.

The servers are ``tests/support/hostile.py`` (raw sockets on 127.0.0.1, ephemeral ports); each
test stops every server it started. Every hostile input is counted in
``tests.support.hostile.REGISTRY``; the session ends with "N inputs tried, M hold".
Memory (module RSS), the gate and the role are in ``test_hostile_memory.py``,
``test_hostile_gate.py`` and ``test_hostile_role.py``; the property-based tests of the pure parts in
``tests/unit/plugins/module_utils/test_properties.py``. The whole tier:

    .venv/bin/python -m pytest tests/integration/test_hostile*.py tests/unit/plugins/module_utils/test_properties.py
"""

import json
import os
import random
import tempfile
import threading
import time

import pytest

from tests.support.ansible_run import health, run_playbook

from tests.support import hostile as h

# Small settings: every case that allows it runs with these.
INTERVAL, PROBE_TIMEOUT, METRICS_TIMEOUT = 0.5, 2.0, 2.0
# freeze_limit 2 x interval: a genuine hang is proven by one check's two waits, so the invariant "never stuck
# without evidence" is tried where stuck is reachable at all (the default limit, 300 s, would hide it).
FAST = {'interval': INTERVAL, 'probe_timeout': PROBE_TIMEOUT, 'metrics_timeout': METRICS_TIMEOUT,
        'freeze_limit': 2 * INTERVAL}
STARTUP = 15.0  # Ansible and Python start-up, on top of a check's own deadline
MAX_RESULT = 1024 * 1024


def deadline(interval=INTERVAL, probe_timeout=PROBE_TIMEOUT, metrics_timeout=METRICS_TIMEOUT):
    """The documented overall deadline of one check."""
    return 2 * interval + 2 * probe_timeout + 8 * metrics_timeout


_SECRET_FILES = []


@pytest.fixture(scope='module', autouse=True)
def hostile_summary(request):
    h.install_summary(request.config)
    yield
    for path in _SECRET_FILES:
        if os.path.exists(path):
            os.unlink(path)


@pytest.fixture
def servers():
    pool = h.Servers()
    yield pool
    pool.stop()


# --------------------------------------------------------------------------- cases

class Case(object):
    """One hostile input: a server (or an option), what must hold, and its issue class."""

    def __init__(self, cls, name, server=None, expect='not_stuck', no_probe=False, secrets=(), states=None,
                 config_error=False, spec=None, check=None):
        self.cls = cls
        self.name = name
        self.server = server
        self.expect = expect          # 'not_stuck', 'stuck', or None (no claim on the state)
        self.no_probe = no_probe      # it reports work in flight (or a gauge that is not a reading)
        self.secrets = list(secrets)
        self.states = states          # exact states allowed, when the case is a control
        self.config_error = config_error
        self.spec = dict(spec or {})
        self.check = check

    def server_spec(self):
        spec = {'name': self.name, 'url': self.server.url if self.server is not None else self.spec.get('url')}
        spec.update(self.spec)
        return spec


def result_problems(case, item):
    """What is wrong with one server's result, by the contract."""
    out = []
    if not isinstance(item, dict):
        return ['it has no result of its own (servers lost its verdict)']
    text = json.dumps(item, default=str)
    if h.has_exception_key(item) or h.traceback_in(text):
        out.append('a traceback or exception in its result: %s' % text[:600])
    state = item.get('state')
    if case.config_error:
        # Contract 2: a configuration error, never a verdict that could restart anything.
        if state == 'stuck':
            out.append('a request that could not be sent was called stuck: %s' % item.get('reason'))
        if not (item.get('error') or item.get('failed')):
            out.append('a request that could not be sent is not a configuration error (state %s: %s)'
                       % (state, str(item.get('reason'))[:300]))
    elif case.expect == 'not_stuck' and state == 'stuck':
        out.append('stuck without evidence: %s' % item.get('reason'))
    elif case.expect == 'stuck' and state != 'stuck':
        out.append('a genuine hang was not called stuck but %s: %s' % (state, item.get('reason')))
    if case.states is not None and state not in case.states:
        out.append('state %s, expected one of %s: %s' % (state, case.states, item.get('reason')))
    if not case.config_error and item.get('error'):
        out.append('a server-side input was reported as a configuration error: %s' % str(item.get('error'))[:300])
    if len(text) >= MAX_RESULT:
        out.append('its result is %d bytes (over 1 MB)' % len(text))
    if case.no_probe and case.server is not None and case.server.posts():
        out.append('probed although it reports work in flight or request gauges that are not readings '
                   '(%d POST(s))' % len(case.server.posts()))
    if case.check is not None:
        out.extend(p for p in case.check(item, case) if p)
    return out


def run_problems(run, result, limit):
    """What is wrong with a whole ansible-playbook run: a traceback anywhere, or the time."""
    out = []
    both = run.stdout + run.stderr
    marker = h.traceback_in(both)
    if marker:
        at = both.find(marker)
        if at < 0:
            at = both.find('"msg": "%s' % h.CRASH_MSG)
        out.append('%s in the ansible-playbook output: ...%s...' % (marker, both[max(0, at):at + 300].replace('\n', ' | ')))
    if isinstance(result, dict) and h.has_exception_key(result):
        out.append('an exception/module_stderr key in the registered result')
    if run.seconds > limit:
        out.append('the run took %.1f s, over the bound of %.1f s' % (run.seconds, limit))
    return out


def secret_problems(secrets, run, result, extra_texts=()):
    out = []
    for secret in secrets:
        found = h.leaks(secret, run.stdout, run.stderr, json.dumps(result, default=str), *extra_texts)
        if found:
            out.append('the secret leaks (as %s) into stdout/stderr/the registered result at -vvv' % found)
    return out


def secrets_as_vars(specs, cases):
    """Move the secret values of specs (an api_key, a URL with a password) into extra vars, as users keep
    them (vault, inventory), out of the playbook text. Returns the ansible-playbook arguments that give them."""
    values = {}
    for index, (spec, case) in enumerate(zip(specs, cases)):
        if not case.secrets:
            continue
        for key in ('api_key', 'url'):
            if key in spec and any(form in spec[key] for secret in case.secrets for form in h.secret_forms(secret)):
                name = 'hostile_secret_%d_%s' % (index, key)
                values[name] = spec[key]
                spec[key] = '{{ %s }}' % name
    if not values:
        return ()
    fd, path = tempfile.mkstemp(prefix='hostile-secrets-', suffix='.json')
    with os.fdopen(fd, 'w') as handle:
        json.dump(values, handle)
    _SECRET_FILES.append(path)
    return ('-e', '@' + path)


def judge_group(cases, options=None, extra_env=None, limit=None, violations=None):
    """Check every case's server in ONE task (``servers:``) and apply the invariants to each result.

    Run-level problems (a traceback in the output, the time) count against every case of the run.
    Returns (violations, result, run)."""
    violations = violations or h.Violations()
    options = dict(FAST, **(options or {}))
    options['servers'] = [case.server_spec() for case in cases]
    limit = limit or deadline(options['interval'], options['probe_timeout'], options['metrics_timeout']) + STARTUP
    result, run = health(options, args=('-vvv',) + secrets_as_vars(options['servers'], cases), extra_env=extra_env)
    by_name = dict((item.get('name'), item) for item in result.get('servers') or [] if isinstance(item, dict))
    whole = run_problems(run, result, limit)
    config_cases = [c for c in cases if c.config_error]
    for case in cases:
        problems = list(whole)
        problems += secret_problems(case.secrets, run, result)
        item = by_name.get(case.name)
        if item is None and result.get('failed'):
            problems.append('no result of its own; the task failed: %s' % str(result.get('msg'))[:300])
        else:
            problems += result_problems(case, item)
        if result.get('failed') and not config_cases and item is not None:
            problems.append('the whole task failed on server-side input: %s' % str(result.get('msg'))[:300])
        if result.get('failed') and not result.get('msg'):
            problems.append('the task failed without a message')
        violations.check(case.cls, case.name, problems)
    return violations, result, run


def _singles_playbook(tasks):
    """One ``url:`` task per case (each registered on its own), in one playbook run; one save at the end."""
    lines = ['- hosts: localhost', '  gather_facts: false', '  tasks:']
    for index, options in enumerate(tasks):
        lines += ['    - name: Check %d' % index, '      modelops.vllm.health:']
        for key, value in options.items():
            lines.append('        %s: %s' % (key, json.dumps(value)))
        lines += ['      register: r%d' % index, '      ignore_errors: true']
    everything = ', '.join("'case%d': r%d" % (i, i) for i in range(len(tasks)))
    lines += ['    - name: Save', '      ansible.builtin.copy:',
              '        content: "{{ {%s} | to_json }}"' % everything,
              '        dest: "{{ out_dir }}/cases.json"', '        mode: "0600"']
    return '\n'.join(lines) + '\n'


def single_problems(case, result):
    """The invariants on the result of a single ``url:`` task."""
    problems = []
    if not isinstance(result, dict):
        return ['no result was saved']
    if case.config_error:
        if result.get('state') == 'stuck':
            problems.append('a request that could not be sent was called stuck: %s' % result.get('reason'))
        if not result.get('failed'):
            problems.append('a request that could not be sent did not fail the task (state %s: %s)'
                            % (result.get('state'), str(result.get('reason'))[:300]))
        elif not result.get('msg') or 'MODULE FAILURE' in str(result.get('msg')):
            problems.append('the task failed without a proper message: %s' % str(result.get('msg'))[:300])
        if h.has_exception_key(result):
            problems.append('a traceback in its result: %s' % str(result.get('exception'))[:300])
    else:
        problems += result_problems(case, result)
        if result.get('failed'):
            problems.append('the task failed: %s' % str(result.get('msg'))[:300])
    return problems


def judge_singles(cases, options=None, extra_env=None, violations=None, limit=None):
    """Check each case with its own ``url:`` task (as most users run the module), all in one playbook
    run (one Ansible start-up). Returns (violations, {case name: result}, run)."""
    violations = violations or h.Violations()
    tasks = []
    for case in cases:
        one = dict(FAST, **(options or {}))
        one['url'] = case.server.url if case.server is not None else case.spec.get('url')
        for key in ('url', 'api_key', 'model', 'kind', 'probe_api'):
            if key in case.spec:
                one[key] = case.spec[key]
        tasks.append(one)
    limit = limit or sum(deadline(t['interval'], t['probe_timeout'], t['metrics_timeout']) for t in tasks) + STARTUP
    args = ('-vvv',) + secrets_as_vars(tasks, cases)
    run = run_playbook(_singles_playbook(tasks), args=args, extra_env=extra_env)
    whole = run_problems(run, {}, limit)
    saved = run.outputs.get('cases.json') or {}
    if any(h.has_exception_key(saved.get('case%d' % i)) for i in range(len(cases))):
        # The crash is in a case's own result: it counts against that case, not against its neighbours.
        whole = [p for p in whole if 'output' not in p]
    results = {}
    for index, case in enumerate(cases):
        result = (run.outputs.get('cases.json') or {}).get('case%d' % index)
        results[case.name] = result
        problems = single_problems(case, result)
        problems += secret_problems(case.secrets, run, result if result is not None else {})
        problems += ['(run-level) %s' % p for p in whole]
        violations.check(case.cls, case.name, problems)
    return violations, results, run


def judge_one(case, options=None, extra_env=None, violations=None, limit=None):
    """Check one case alone (``url:``) in its own playbook run."""
    violations, results, run = judge_singles([case], options=options, extra_env=extra_env, violations=violations,
                                             limit=limit)
    return violations, results[case.name], run


# --------------------------------------------------------------------------- the servers

def now_start(age=3600.0):
    return time.time() - age


def frozen(engines, start=None):
    return h.vllm_text(engines, start=start if start is not None else now_start())


def moving(make_engines, start=None):
    """A body whose counters rise on every read: make_engines(n) -> engines."""
    start = start if start is not None else now_start()
    return h.dynamic(lambda n: h.vllm_text(make_engines(n), start=start))


def busy_engine(n, **more):
    """An engine with work in flight whose counters and KV cache move on every read (n: the read)."""
    values = dict({'running': 1, 'kv': 0.01 + 0.001 * n}, **more)
    return h.engine_numbers(steps=100 + 10 * n, tokens=1000 + 10 * n, **values)


def stuck_capture():
    """The real capture of a hung engine (running 3, SIGSTOP), frozen, with a start an hour ago."""
    return h.with_start_time(h.STUCK, now_start())


def idle_capture():
    return h.with_start_time(h.IDLE, now_start())


def repeated_running(text):
    """The capture with its running sample written twice."""
    lines = text.split('\n')
    i = next(i for i, line in enumerate(lines) if line.startswith('vllm:num_requests_running'))
    return '\n'.join(lines[:i + 1] + [lines[i]] + lines[i + 1:])


def split_running(start):
    text = h.vllm_text({'0': h.engine_numbers(running=0)}, start=start)
    first = 'vllm:num_requests_running{engine="0",model_name="tiny"}'
    return text.replace(first, 'vllm:num_requests_running{engine="0",model_name="other"} 3.0\n' + first, 1)


def binary_body(seed=8):
    rng = random.Random(seed)
    return bytes(rng.randrange(256) for dummy in range(4096))


def chunked_broken(conn, request):
    conn.send(b'HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n'
              b'zz\r\n{"choices"\r\n')
    conn.close()


def check_probes_waited(item, case):
    """The genuine idle hang: two probes, each waited its full probe_timeout."""
    probes = (item.get('evidence') or {}).get('probes') or []
    if len(probes) < 2:
        return ['an idle-looking hang needs two probes, the evidence has %d' % len(probes)]
    short = [p.get('seconds') for p in probes if (p.get('seconds') or 0) < 0.95 * PROBE_TIMEOUT]
    if short:
        return ['the probes of the genuine hang did not wait probe_timeout %s s: %s' % (PROBE_TIMEOUT, short)]
    return []


def server_side_cases(pool):
    """Class 2, 3 and 4 inputs, plus genuine hangs and healthy controls, one server each."""
    far = 'http://127.0.0.1:%d' % h.free_port()
    idle = idle_capture()
    cases = []

    def add(cls, name, expect='not_stuck', no_probe=False, states=None, check=None, **routes):
        server = pool.vllm(name=name, **routes)
        cases.append(Case(cls, name, server, expect=expect, no_probe=no_probe, states=states, check=check))

    # Class 2: the probe of an idle server is reset, closed, cut or refused at once (never a full wait).
    add(2, 'probe-rst', metrics=idle, probe=h.reset)
    add(2, 'probe-fin-close', metrics=idle, probe=h.close)
    add(2, 'probe-headers-then-rst', metrics=idle, probe=h.headers_then_reset())
    add(2, 'probe-partial-body-then-close', metrics=idle, probe=h.partial(h.completion_json(), 10))
    add(2, 'probe-garbage-not-http', metrics=idle, probe=h.garbage(b'\x00\x01\x02 not http at all\r\n\r\n'))
    add(2, 'probe-broken-chunked', metrics=idle, probe=chunked_broken)
    add(2, 'probe-504-at-once', metrics=idle, probe=h.respond(504, '{"error":"upstream timeout"}', 'application/json'))
    add(2, 'probe-408-at-once', metrics=idle, probe=h.respond(408, '', 'application/json'))
    add(2, 'probe-200-error-body', metrics=idle, probe=h.respond(200, '{"error":"timeout"}', 'application/json'))
    add(2, 'probe-rst-after-0.5s', metrics=idle, probe=h.slow(h.reset, 0.5))
    add(2, 'probe-redirect-elsewhere', metrics=idle, probe=h.redirect(far + '/v1/completions', 307))
    server = pool.add(h.HostileServer({}, default=h.reset, name='reset-every-request'))
    cases.append(Case(2, 'reset-every-request', server))

    # Class 3: no usable progress series, or not the same set in every read.
    add(3, 'gauges-only-no-counters-no-kv', no_probe=True, metrics=frozen({'0': {'running': 2, 'waiting': 1}}))
    add(3, 'counters-nan-kv-nan', no_probe=True, metrics=frozen({'0': h.engine_numbers(
        running=1, kv='NaN', **dict((c, 'NaN') for c in h.PROGRESS))}))
    add(3, 'counters-inf-no-kv', no_probe=True, metrics=frozen({'0': h.engine_numbers(
        running=1, kv=None, **dict((c, '+Inf') for c in h.PROGRESS))}))
    add(3, 'counters-nan-kv-frozen', no_probe=True, metrics=frozen({'0': h.engine_numbers(
        running=1, **dict((c, 'NaN') for c in h.PROGRESS))}))
    start = now_start()
    add(3, 'busy-body-cut-after-request-gauges', no_probe=True,
        metrics=[h.with_start_time(h.BUSY_1, start), h.cut_after_request_gauges(h.with_start_time(h.BUSY_2, start))])
    add(3, 'running-on-engine-1-counters-only-on-engine-0', no_probe=True, metrics=frozen({
        '0': h.engine_numbers(running=0), '1': {'running': 1, 'waiting': 0}}))
    add(3, 'running-on-engine-1-engine-0-moving', no_probe=True, metrics=moving(lambda n: {
        '0': h.engine_numbers(running=0, steps=100 + n, tokens=1000 + n), '1': {'running': 1, 'waiting': 0}}, start))
    full = frozen({'0': h.engine_numbers(running=1)}, start)
    add(3, 'kv-gauge-gone-after-first-read', no_probe=True,
        metrics=[full, frozen({'0': h.engine_numbers(running=1, kv=None)}, start)])
    add(3, 'counters-gone-after-first-read', no_probe=True,
        metrics=[full, frozen({'0': {'running': 1, 'waiting': 0, 'kv': 0.01}}, start)])
    add(3, 'html-as-text-plain', metrics=h.respond(200, '<!DOCTYPE html><html><body>Login</body></html>\n'))
    add(3, 'html-as-text-html', metrics=h.respond(200, '<html><body>502</body></html>', 'text/html'))
    add(3, 'binary-body', metrics=h.respond(200, binary_body()))
    add(3, 'running-sample-repeated', metrics=repeated_running(stuck_capture()))
    add(3, 'whole-body-twice', metrics=stuck_capture() + stuck_capture())
    add(3, 'metrics-redirect-elsewhere', metrics=h.redirect(far + '/metrics'))
    add(3, 'empty-metrics-body', metrics=h.respond(200, ''))
    # Running 3 under one label set, then 0 under another on the same engine: whatever the reading makes
    # of it, something reports work in flight, so it is never probed (no claim on the state).
    add(3, 'running-3-then-0-on-one-engine-two-label-sets', expect=None, no_probe=True, metrics=split_running(start))

    # Class 4: request gauges that are not readings (NaN, +Inf, negative): never probed, never a crash.
    add(4, 'running-nan-counters-moving', no_probe=True, metrics=moving(lambda n: {'0': busy_engine(n, running='NaN')}))
    add(4, 'running-inf-counters-moving', no_probe=True, metrics=moving(lambda n: {'0': busy_engine(n, running='+Inf')}))
    add(4, 'running-minus-1-frozen', no_probe=True, metrics=frozen({'0': h.engine_numbers(running=-1)}))
    add(4, 'running-minus-1-waiting-1', no_probe=True, metrics=frozen({'0': h.engine_numbers(running=-1, waiting=1)}))
    add(4, 'waiting-nan-running-0', no_probe=True, metrics=frozen({'0': h.engine_numbers(running=0, waiting='NaN')}))
    add(4, 'waiting-minus-inf', no_probe=True, metrics=frozen({'0': h.engine_numbers(running=0, waiting='-Inf')}))
    add(4, 'running-nan-on-engine-1-engine-0-idle', no_probe=True, metrics=frozen({
        '0': h.engine_numbers(running=0), '1': h.engine_numbers(running='NaN')}))
    add(4, 'deferred-nan-running-1-frozen', no_probe=True, metrics=h.vllm_text(
        {'0': h.engine_numbers(running=1)}, start=start,
        extra='vllm:num_requests_waiting_by_reason{engine="0",model_name="tiny",reason="deferred"} NaN\n'))
    add(4, 'kv-nan-counters-frozen', no_probe=True, metrics=frozen({'0': h.engine_numbers(running=1, kv='NaN')}))

    # Class 14: the same series twice, written so that its raw label text differs (a trailing comma, spaces, {}
    # for no labels): contradictory samples of a frozen server (0, then 3 in flight) are never evidence.
    one_label = h.vllm_text({'0': h.engine_numbers(running=0)}, start=start, model=None)
    add(14, 'running-0-then-3-trailing-comma', metrics=one_label + 'vllm:num_requests_running{engine="0",} 3.0\n')
    add(14, 'running-0-then-3-spaces', metrics=one_label + 'vllm:num_requests_running{ engine = "0" } 3.0\n')
    add(14, 'running-0-then-3-unlabelled-then-braces', metrics=one_label.replace(
        'vllm:num_requests_running{engine="0"} 0.0\n', '') + 'vllm:num_requests_running 0.0\nvllm:num_requests_running{} 3.0\n')
    add(14, 'waiting-0-then-3-trailing-comma', metrics=one_label + 'vllm:num_requests_waiting{engine="0",} 3.0\n')
    add(14, 'kv-then-kv-trailing-comma-running-1', metrics=h.vllm_text(
        {'0': h.engine_numbers(running=1)}, start=start, model=None) + 'vllm:kv_cache_usage_perc{engine="0",} 0.5\n')

    # Class 21: /is_paused (vLLM's pause API) answers that are no proof of a pause, on a frozen engine with
    # work in flight: never `paused` (which is never restarted), never a traceback, the check still bounded.
    # Only exactly {"is_paused": true} with 200 is a pause (the control below).
    for name, answer in (
            ('string-true', h.respond(200, '{"is_paused":"true"}', 'application/json')),
            ('one', h.respond(200, '{"is_paused":1}', 'application/json')),
            ('true-with-500', h.respond(500, '{"is_paused":true}', 'application/json')),
            ('html', h.respond(200, '<html><body>paused</body></html>', 'text/html')),
            ('not-json', h.respond(200, '{"is_paused": tru', 'application/json')),
            ('deep-json', h.respond(200, '[' * 100000 + ']' * 100000, 'application/json')),
            ('huge', h.respond(200, '{"is_paused":true,"x":"%s"}' % ('y' * (3 * 1024 * 1024)), 'application/json')),
            ('binary', h.respond(200, binary_body(), 'application/json')),
            ('reset', h.reset),
            ('never-answers', h.hold),
            ('trickles-true', h.trickle('{"is_paused":true}', every=2.0, ctype='application/json')),
            ('redirect-elsewhere', h.redirect(far + '/is_paused'))):
        add(21, 'is-paused-' + name, expect=None, no_probe=True, states=['stuck'], metrics=stuck_capture(),
            extra={'/is_paused': answer})
    add(0, 'CONTROL-is-paused-true', expect=None, no_probe=True, states=['paused'], metrics=stuck_capture(),
        extra={'/is_paused': h.respond(200, '{"is_paused":true}', 'application/json')})
    add(0, 'CONTROL-weight-update-in-flight', expect=None, no_probe=True, states=['paused'], metrics=h.vllm_text(
        {'0': h.engine_numbers(running=2)}, start=start,
        extra='vllm:rl_weight_update_operations_in_flight{operation="update"} 1.0\n'))
    add(21, 'weight-update-nan', expect=None, no_probe=True, states=['stuck'], metrics=h.vllm_text(
        {'0': h.engine_numbers(running=2)}, start=start,
        extra='vllm:rl_weight_update_operations_in_flight{operation="update"} NaN\n'))

    # Genuine hangs: these ARE stuck (the tier proves both directions).
    add(0, 'GENUINE-frozen-capture-running-3', expect='stuck', no_probe=True, states=['stuck'], metrics=stuck_capture())
    add(0, 'GENUINE-idle-probe-never-answers', expect='stuck', states=['stuck'], metrics=idle, probe=h.hold,
        check=check_probes_waited)
    add(0, 'GENUINE-engine-1-frozen-engine-0-moving', expect='stuck', no_probe=True, states=['stuck'],
        metrics=moving(lambda n: {'0': busy_engine(n), '1': h.engine_numbers(running=2)}),
        check=lambda item, case: [] if item.get('stuck_engines') == ['1'] else
        ['stuck_engines is %r, expected [\'1\']' % item.get('stuck_engines')])
    # Healthy controls.
    add(0, 'CONTROL-idle', expect=None, states=['idle'], metrics=idle)
    add(0, 'CONTROL-busy-moving', expect=None, no_probe=True, states=['busy'], metrics=moving(lambda n: {'0': busy_engine(n)}))
    return cases


def test_server_side_hostile_inputs_in_one_servers_task(servers):
    """Classes 2, 3, 4: ~45 hostile servers in one ``servers:`` task, with genuine hangs and controls."""
    cases = server_side_cases(servers)
    violations, result, run = judge_group(cases)
    assert result.get('servers'), run
    # Controls and genuine hangs are not hostile inputs; keep them out of the count but not out of the checks.
    for case in cases:
        if case.cls == 0:
            h.REGISTRY.tried.pop((0, case.name), None)
    violations.assert_none('(%d servers in one task, %.1f s)' % (len(cases), run.seconds))


# --------------------------------------------------------------------------- single url, as most users run it

def single_cases(pool):
    start = now_start()
    out = []

    def case(cls, name, expect='not_stuck', no_probe=False, states=None, spec=None, secrets=(), config_error=False,
             check=None, **routes):
        server = pool.vllm(name=name, **routes)
        out.append(Case(cls, name, server, expect=expect, no_probe=no_probe, states=states, spec=spec,
                        secrets=secrets, config_error=config_error, check=check))

    case(2, 'single: probe-rst', metrics=idle_capture(), probe=h.reset)
    case(2, 'single: probe-fin-close', metrics=idle_capture(), probe=h.close)
    case(3, 'single: busy-body-cut-after-request-gauges', no_probe=True,
         metrics=[h.with_start_time(h.BUSY_1, start), h.cut_after_request_gauges(h.with_start_time(h.BUSY_2, start))])
    case(3, 'single: gauges-only', no_probe=True, metrics=frozen({'0': {'running': 2, 'waiting': 1}}))
    case(4, 'single: running-nan-counters-moving', no_probe=True,
         metrics=moving(lambda n: {'0': busy_engine(n, running='NaN')}))
    case(4, 'single: running-inf-counters-frozen', no_probe=True, metrics=frozen({'0': h.engine_numbers(running='+Inf')}))
    case(4, 'single: running-minus-1-waiting-1', no_probe=True,
         metrics=frozen({'0': h.engine_numbers(running=-1, waiting=1)}))
    key_nl = 'HOSTILE-KEY-NL-4b1f9e27\n'
    case(1, 'single: api_key with a trailing newline', spec={'api_key': key_nl}, secrets=[key_nl], config_error=True,
         metrics=idle_capture())
    key_euro = 'HOSTILE-KEY-EURO-77ad10c3\u20ac'
    case(1, 'single: api_key with a non-Latin-1 character', spec={'api_key': key_euro}, secrets=[key_euro],
         config_error=True, metrics=idle_capture())
    return out


def check_reads_waited(item, case):
    """The genuine busy hang: three reads of one process, each wait at least the interval."""
    reads = (item.get('evidence') or {}).get('reads') or []
    times = [r.get('at') for r in reads if isinstance(r, dict) and r.get('at') is not None]
    if len(times) < 3:
        return ['a busy hang needs three reads, the evidence has %d' % len(times)]
    gaps = [round(b - a, 3) for a, b in zip(times, times[1:])]
    if any(gap < 0.95 * INTERVAL for gap in gaps[:2]):
        return ['the waits between the reads of the genuine hang were shorter than the interval: %s' % gaps]
    return []


def test_single_url_hostile_inputs(servers):
    """One ``url:`` task per input (as most users run it), in one playbook run; with the two genuine
    hangs, which ARE stuck."""
    cases = single_cases(servers)
    password = 'HOSTILE-PASS-SINGLE-8e1b44f0'
    cred = servers.vllm(name='cred-single', metrics=idle_capture())
    cases.append(Case(9, 'single: url with user:password@', None, secrets=[password], states=['idle'],
                      spec={'url': 'http://hostile-user:%s@127.0.0.1:%d' % (password, cred.port)},
                      check=lambda item, case: ['the password is in a fact key'] if password in json.dumps(
                          list(((item.get('ansible_facts') or {}).get('vllm_health_servers') or {}).keys())) else []))
    busy = servers.vllm(name='frozen', metrics=stuck_capture())
    cases.append(Case(0, 'GENUINE single: frozen capture, running 3', busy, expect='stuck', states=['stuck'],
                      no_probe=True, check=check_reads_waited))
    idle = servers.vllm(name='idle-hang', metrics=idle_capture(), probe=h.hold)
    cases.append(Case(0, 'GENUINE single: idle, the probe never answers', idle, expect='stuck', states=['stuck'],
                      check=lambda item, case: check_probes_waited(item, case) + (
                          [] if len(idle.posts()) == 2 else ['%d probes sent, expected 2' % len(idle.posts())])))
    violations, results, run = judge_singles(cases)
    for case in cases:
        if case.cls == 0:
            h.REGISTRY.tried.pop((0, case.name), None)
    violations.assert_none('(%d url tasks, %.1f s)' % (len(cases), run.seconds))


# --------------------------------------------------------------------------- configuration errors and credentials

def test_config_errors_and_credentials_stay_with_their_server(servers):
    """Class 1 and 9 in one ``servers:`` task: each bad server fails alone, with its own result; the
    healthy and the genuinely stuck server keep their verdicts; no secret in any output."""
    keys = {
        'key-trailing-newline': 'HOSTILE-KEY-A-0f3e8d21\n',
        'key-crlf-inside': 'HOSTILE-KEY-B-9c2d\r\nX-Injected: 1',
        'key-non-latin-1': 'HOSTILE-KEY-C-5e61\u0416\u20ac',
        'key-leading-space': ' HOSTILE-KEY-D-13ab77cd',
        'key-nul-byte': 'HOSTILE-KEY-E-2b9a\x00tail',
    }
    password = 'HOSTILE-PASS-6d2c91e0'
    cases = []
    for name, key in keys.items():
        server = servers.vllm(name=name, metrics=idle_capture())
        cases.append(Case(1, 'servers: ' + name, server, spec={'api_key': key}, secrets=[key], config_error=True))
    bad = 'http://[::1'
    cases.append(Case(10, 'servers: url http://[::1', None, spec={'url': bad}, config_error=True))
    cred = servers.vllm(name='cred', metrics=idle_capture())
    cases.append(Case(9, 'servers: url with user:password@', None, secrets=[password], states=['idle'],
                      spec={'url': 'http://hostile-user:%s@127.0.0.1:%d' % (password, cred.port)}))
    pct = servers.vllm(name='cred-pct', metrics=idle_capture())
    pct_password = 'HOSTILE-PCT-3a7f@word'
    cases.append(Case(9, 'servers: url with a percent-encoded password', None, secrets=[pct_password],
                      states=['idle'], spec={'url': 'http://u:%s@127.0.0.1:%d' % (
                          pct_password.replace('@', '%40'), pct.port)}))
    # Servers whose answers repeat the key, so that any message built from them would carry it.
    far = 'http://127.0.0.1:%d' % h.free_port()
    echoes = {
        'probe redirected elsewhere with the key in the Location': dict(probe=h.redirect_echoing_auth(far)),
        'probe 401 whose body and WWW-Authenticate repeat the key': dict(probe=h.error_echoing_auth(401)),
        '/v1/models 403 repeating the key (no model_name label)': dict(
            metrics=h.with_start_time(h.IDLE, now_start()).replace('model_name="tiny"', 'model="tiny"'),
            models=h.error_echoing_auth(403)),
    }
    for index, (name, routes) in enumerate(echoes.items()):
        key = 'HOSTILE-ECHO-KEY-%d-%s+/=' % (index, os.urandom(4).hex())
        routes.setdefault('metrics', idle_capture())
        server = servers.vllm(name='echo%d' % index, **routes)
        cases.append(Case(1, 'servers: %s' % name, server, spec={'api_key': key}, secrets=[key]))
    healthy = servers.vllm(name='healthy', metrics=idle_capture())
    cases.append(Case(0, 'CONTROL-healthy-beside-bad-ones', healthy, expect=None, states=['idle']))
    frozen_server = servers.vllm(name='frozen', metrics=stuck_capture())
    cases.append(Case(0, 'GENUINE-stuck-beside-bad-ones', frozen_server, expect='stuck', states=['stuck'], no_probe=True))

    violations, result, run = judge_group(cases)
    for case in cases:
        if case.cls == 0:
            h.REGISTRY.tried.pop((0, case.name), None)
    names = [item.get('name') for item in result.get('servers') or []]
    if len(names) != len(cases):
        violations.items.append('servers holds %d results for %d servers: %s' % (len(names), len(cases), names))
    if result.get('failed') and not result.get('msg'):
        violations.items.append('the task failed without a message')
    violations.assert_none()


# --------------------------------------------------------------------------- bad arguments

BAD_ARGUMENTS = [
    # (name, options added to a healthy server's url, must fail the task)
    ('interval nan', {'interval': 'nan'}, True),
    ('interval inf', {'interval': 'inf'}, True),
    ('interval -1', {'interval': -1}, True),
    ('interval 1e10', {'interval': 1e10}, False),
    ('probe_timeout nan', {'probe_timeout': 'nan'}, True),
    ('probe_timeout -inf', {'probe_timeout': '-inf'}, True),
    ('probe_timeout 0', {'probe_timeout': 0}, True),
    ('probe_timeout 1e10', {'probe_timeout': 1e10}, False),
    ('metrics_timeout nan', {'metrics_timeout': 'nan'}, True),
    ('metrics_timeout inf', {'metrics_timeout': 'inf'}, True),
    ('metrics_timeout 1e10', {'metrics_timeout': 1e10}, False),
    ('metrics_max_bytes -1', {'metrics_max_bytes': -1}, True),
    ('workers 0', {'workers': 0}, True),
]

BAD_URLS = [
    # (name, url; {port} is a healthy server)
    ('url http://[::1', 'http://[::1'),
    ('url http://[::1]:99999', 'http://[::1]:99999'),
    ('url port not a number', 'http://127.0.0.1:80a/'),
    ('url with a newline', 'http://127.0.0.1:{port}/\nx'),
    ('url with a space in the host', 'http://127.0.0 .1:{port}'),
    ('url scheme only', 'http://'),
    ('url ftp', 'ftp://127.0.0.1:{port}'),
]


OPTION_NAMES = ('url', 'interval', 'probe_timeout', 'metrics_timeout', 'metrics_max_bytes', 'workers', 'api_key')


def _loop_playbook(items):
    """One health task looped over items (each: some of the module's options), every item's result saved."""
    lines = ['- hosts: localhost', '  gather_facts: false', '  tasks:', '    - name: Check',
             '      modelops.vllm.health:']
    for name in OPTION_NAMES:
        lines.append('        %s: "{{ item.%s | default(omit) }}"' % (name, name))
    lines += ['      loop: %s' % json.dumps(items), '      register: r', '      ignore_errors: true',
              '    - name: Save', '      ansible.builtin.copy:', '        content: "{{ r | to_json }}"',
              '        dest: "{{ out_dir }}/result.json"', '        mode: "0600"']
    return '\n'.join(lines) + '\n'


def test_bad_arguments_give_a_message_never_a_traceback(servers):
    """Class 10: NaN, inf, 1e10, zero and negative settings, and broken URLs."""
    server = servers.vllm(name='healthy', metrics=idle_capture())
    items, expect = [], []
    for name, options, must_fail in BAD_ARGUMENTS:
        items.append(dict(FAST, url=server.url, **options))
        expect.append((name, must_fail))
    for name, url in BAD_URLS:
        items.append(dict(FAST, url=url.replace('{port}', str(server.port))))
        expect.append((name, None))
    # A sum of per-item deadlines: each item is its own check (1e10 items must not wait on a healthy server).
    limit = len(items) * deadline() + STARTUP
    run = run_playbook(_loop_playbook(items), args=('-vvv',))
    saved = run.outputs.get('result.json') or {}
    results = saved.get('results') or []
    violations = h.Violations()
    if len(results) != len(items):
        violations.items.append('%d results for %d items: %r' % (len(results), len(items), run))
    whole = run_problems(run, saved, limit)
    for index, (name, must_fail) in enumerate(expect):
        item = results[index] if index < len(results) else None
        problems = []
        if not isinstance(item, dict):
            problems.append('no result')
        else:
            text = json.dumps(item, default=str)
            if h.has_exception_key(item) or h.traceback_in(text):
                problems.append('a traceback: %s' % str(item.get('msg') or item.get('module_stderr'))[:400])
            if item.get('failed'):
                if not item.get('msg') or 'MODULE FAILURE' in str(item.get('msg')):
                    problems.append('failed without a proper message: %s' % str(item.get('msg'))[:300])
            elif must_fail:
                problems.append('accepted (state %s: %s)' % (item.get('state'), str(item.get('reason'))[:200]))
            if item.get('state') == 'stuck':
                problems.append('stuck on a bad argument: %s' % item.get('reason'))
        violations.check(10, name, problems)
    item_tracebacks = any('traceback' in v for v in violations.items)
    for problem in whole:
        if 'traceback' not in problem.lower() or not item_tracebacks:
            violations.items.append('[class 10] the run: %s' % problem)
    violations.assert_none()


# --------------------------------------------------------------------------- environment proxies

def _proxy_env(proxy_url, names):
    """The proxy in the named variables only: an empty lowercase variable would cancel its uppercase twin in
    urllib's reading of the environment, and the test with it."""
    env = {'NO_PROXY': '', 'no_proxy': ''}
    for name in names:
        env[name] = proxy_url
    return env


@pytest.mark.parametrize('names, use_proxy, impersonating', [
    (('HTTP_PROXY', 'HTTPS_PROXY'), None, False),
    (('http_proxy', 'all_proxy'), None, False),
    (('ALL_PROXY',), None, False),
    (('HTTP_PROXY',), None, True),
    (('HTTP_PROXY', 'http_proxy', 'ALL_PROXY', 'all_proxy'), True, False),
], ids=['HTTP_PROXY', 'http_proxy+all_proxy', 'ALL_PROXY', 'HTTP_PROXY-that-answers-like-vllm',
        'use_proxy-true-loopback'])
def test_environment_proxy_is_not_used_by_default(servers, names, use_proxy, impersonating):
    """Class 5: a proxy is in the environment, answering 502 to everything (or, to give the bearer key a
    way there, answering every target as a healthy vLLM). A healthy loopback server stays idle, the proxy
    sees nothing by default (loopback never, even with use_proxy), and never the key."""
    proxy = servers.add(h.HostileServer({}, default=h.proxy_impersonating if impersonating else h.proxy_502,
                                        name='proxy'))
    env = _proxy_env(proxy.url, names)
    label = '+'.join(names) + (' use_proxy' if use_proxy else '') + (' (a proxy that answers)' if impersonating else '')
    keys = {'loopback': 'HOSTILE-PROXYKEY-1-%s' % os.urandom(4).hex(),
            'localhost': 'HOSTILE-PROXYKEY-2-%s' % os.urandom(4).hex(),
            'unresolvable': 'HOSTILE-PROXYKEY-3-%s' % os.urandom(4).hex()}
    a = servers.vllm(name='a', metrics=idle_capture())
    b = servers.vllm(name='b', metrics=idle_capture())
    cases = [
        Case(5, '%s: 127.0.0.1 healthy' % label, a, states=['idle'], spec={'api_key': keys['loopback']},
             secrets=[keys['loopback']]),
        Case(5, '%s: localhost healthy' % label, None, states=['idle'], secrets=[keys['localhost']],
             spec={'url': 'http://localhost:%d' % b.port, 'api_key': keys['localhost']}),
    ]
    if not use_proxy:
        cases.append(Case(5, '%s: unresolvable name with a key' % label, None, secrets=[keys['unresolvable']],
                          spec={'url': 'http://vllm-hostile-%s.invalid:8000' % os.urandom(3).hex(),
                                'api_key': keys['unresolvable']}))
    options = {'use_proxy': True} if use_proxy else None
    violations, result, run = judge_group(cases, options=options, extra_env=env)
    seen = proxy.seen()
    for case in cases:
        key = case.secrets[0]
        sent = [r for r in seen if key in r.raw_head or key.encode() in r.body]
        if sent:
            violations.check(5, case.name, ['the bearer key reached the environment proxy (%d request(s))' % len(sent)])
    if seen:
        violations.items.append('[class 5] %s: the environment proxy got %d request(s): %s' % (
            label, len(seen), [r.target for r in seen][:5]))
    violations.assert_none()


# --------------------------------------------------------------------------- bounded time

def just_inside(delay, body, ctype='application/json'):
    return h.respond(200, body, ctype, delay=delay)


def test_overall_deadline_whatever_the_server_does(servers):
    """Class 7: servers that answer every request just inside its own timeout (along the longest
    path the verdict can take), trickle, or hold forever. One check (all of them at once, in one
    ``servers:`` task, and one alone) ends within 2*interval + 2*probe_timeout + 8*metrics_timeout."""
    interval, probe_timeout, metrics_timeout = 0.5, 2.0, 5.0
    inside = 0.9 * metrics_timeout
    # Two ansible-playbook runs at once (the group and the single) beside eight slow servers that this process
    # serves: twice the start-up of one run (a clean-clone CI run at load 10 took 64.6 s for the 45 s deadline).
    limit = deadline(interval, probe_timeout, metrics_timeout) + 2 * STARTUP
    start = now_start()
    idle = h.vllm_text({'0': h.engine_numbers(running=0)}, start=start, model=None)
    work = h.vllm_text({'0': h.engine_numbers(running=1)}, start=start, model=None)
    restarted = h.vllm_text({'0': h.engine_numbers(running=0, steps=0, tokens=0)}, start=time.time() - 1, model=None)
    slow_models = just_inside(inside, h.MODELS_JSON)
    # The longest path: idle, two unanswered probes (model looked up each time), work appears and does not
    # move, then a new process (two more reads) that gets a probe too; every read just inside metrics_timeout.
    longest = h.sequence([idle, idle, work, work, restarted], delay=inside)
    cases = []

    def add(name, cls=7, **routes):
        server = servers.vllm(name=name, **routes)
        cases.append(Case(cls, name, server))

    def slow_get(body=''):
        return just_inside(inside, body)

    add('every-request-just-inside-its-timeout-longest-path', metrics=longest, probe=h.hold,
        version=slow_get('{"version":"0.32.0"}'), health=slow_get(), models=slow_models)
    add('every-request-just-inside-probe-answered-just-inside',
        metrics=h.sequence([idle], delay=inside), version=slow_get('{"version":"0.32.0"}'),
        health=slow_get(), models=slow_models,
        probe=just_inside(0.9 * probe_timeout, h.completion_json()))
    add('metrics-trickles-forever', metrics=h.trickle(idle * 50, every=0.2))
    add('metrics-header-bytes-trickle', metrics=h.trickle_headers(0.2))
    add('every-request-held-forever', metrics=h.hold, version=h.hold, health=h.hold, models=h.hold, probe=h.hold)
    # These two are answered (slowly, or by redirects), not silent: class 2 (never a full silent wait).
    add('probe-answer-trickles', cls=2, metrics=idle, probe=h.trickle(h.completion_json() * 20, every=0.3))
    add('probe-same-server-redirect-loop-each-hop-slow', cls=2, metrics=h.sequence([idle], delay=inside),
        extra={'/v1/completions': h.slow(h.redirect('/v1/x1', 307), 0.9 * probe_timeout / 2),
               '/v1/x1': h.slow(h.redirect('/v1/x2', 307), 0.9 * probe_timeout / 2),
               '/v1/x2': h.slow(h.redirect('/v1/completions', 307), 0.9 * probe_timeout / 2)})
    options = {'interval': interval, 'probe_timeout': probe_timeout, 'metrics_timeout': metrics_timeout}
    # And the longest path alone, as one url: both runs at once (they mostly wait).
    alone = servers.vllm(name='alone', metrics=h.sequence([idle, idle, work, work, restarted], delay=inside),
                         probe=h.hold, version=slow_get('{"version":"0.32.0"}'), health=slow_get(), models=slow_models)
    single = h.Violations()
    thread = threading.Thread(target=judge_one, args=(Case(7, 'single: every-request-just-inside-longest-path', alone),),
                              kwargs={'options': options, 'violations': single, 'limit': limit})
    thread.start()
    try:
        violations, result, run = judge_group(cases, options=options, limit=limit)
    finally:
        thread.join()
    violations.items.extend(single.items)
    violations.assert_none()
