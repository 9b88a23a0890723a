#!/usr/bin/env python
"""Replay the incident's day, side by side: the old watchdog pair against modelops.vllm.watchdog's logic.

One simulated day of GB10 traffic (fixed seed) is replayed, time compressed, against two
identical simulated vLLM servers (tests/simulator, max_num_seqs 12):

  A  the old pair.  Watchdog 1 sends a real chat request every 5 min, waits up to 45 s and
     restarts after 5 failures in a row.  Watchdog 2 counts the HTTP 500s the traffic sees
     (in-flight requests failed by restarts) and restarts when it has seen "too many" in the
     last 30 min, with a threshold that shrinks as the day's 500s grow.
  B  modelops.vllm.watchdog's check and decision code, in-process, on a scaled clock: every
     5 min Judge(Client(url)) from plugins/module_utils/_verdict.py and _http.py, then
     decide() from _decide.py with the role's defaults; restart only when decide() says so,
     then wait until ready and check again, as roles/watchdog does.

Batch jobs holding 2-4 requests for minutes, two periods at the concurrency limit (12 running
and a queue), long prompts (chunked prefill), quiet hours and one real hang late in the day
(the simulator's `hang` state with work in flight, lasting until a restart) hit both servers
at the same moments.  It reports, per server: restarts, false restarts, in-flight requests
failed by restarts, inference requests sent by the checks (the simulator's own request
counts) and how many went to a busy server, and the time from the hang to its restart.

Run:  .venv/bin/python benchmarks/replay_incident.py            # a day in about 5 minutes
      .venv/bin/python benchmarks/replay_incident.py --quick    # a 6-hour day, about 75 s
Options: --json PATH, --png PATH, --no-docs, --from-json PATH (redraw from a saved result),
--role (also run the real role once at the hang), --strict, --factor, --seed, --port-range.
See docs/incident.md and benchmarks/README.md.
"""

import argparse
import datetime
import http.client
import json
import os
import random
import re
import shutil
import traceback
import socket
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
if REPO not in sys.path:  # run as a script: the repository root, for tests.support
    sys.path.insert(0, REPO)

import tests.support.paths  # noqa: E402,F401  pylint: disable=wrong-import-position,unused-import  # the collection importable
from tests.simulator.client import SimulatorProcess  # noqa: E402  pylint: disable=wrong-import-position

from ansible_collections.modelops.vllm.plugins.module_utils._decide import (  # noqa: E402
    DEFAULTS as DECIDE_DEFAULTS, decide, empty_history)
from ansible_collections.modelops.vllm.plugins.module_utils._freeze import Freeze  # noqa: E402
from ansible_collections.modelops.vllm.plugins.module_utils._http import Client  # noqa: E402
from ansible_collections.modelops.vllm.plugins.module_utils._verdict import Judge  # noqa: E402

HOUR = 3600.0
MINUTE = 60.0

# -- the incident, in real (uncompressed) units -------------------------------------------------
DECODE_TPS = 8.0            # tokens/s of one request on the GB10 of the incident
PREFILL_TPS = 2000.0        # prompt tokens/s (one 2048-token chunk per ~1 s step)
MAX_NUM_SEQS = 12
LOAD_SECONDS = 240.0        # a restart reloads ~19 GB of weights: 4 minutes with the port closed
CHECK_EVERY = 5 * MINUTE    # watchdog 1 and the collection's watchdog run every 5 minutes
W1_TIMEOUT = 45.0           # watchdog 1: wait up to 45 s for its chat request
W1_FAILURES = 5             # ... and restart after 5 failures in a row
W1_MAX_TOKENS = 16          # its "small" chat request
W2_EVERY = 10 * MINUTE      # watchdog 2: every 10 minutes
W2_WINDOW = 30 * MINUTE     # counts the 500s of the last 30 minutes (since its own last restart)
W2_START, W2_STEP, W2_FLOOR = 12, 4, 4   # threshold = max(FLOOR, START - 500s seen today // STEP)
RETRY_DELAY = 30.0          # a batch client retries a failed or refused request after 30 s
BATCH_TIMEOUT = HOUR        # a batch client gives up on one request after an hour
CHAT_TIMEOUT = 10 * MINUTE  # an interactive user gives up after 10 minutes
SAMPLE_EVERY = 30.0         # load samples for the picture
CHECK_OFFSET = 90.0         # the 5-minute checks run at hh:01:30, hh:06:30, ...
# The hang starts 4 s into one of the collection's checks (hh:m6:30 + 4 s): the worst moment for it,
# as that check's first read comes before the hang and its second after (the engine moved: busy);
# only the next check can say stuck.
HANG_INTO_CHECK = 30 + 4.0
ROLE_DEFAULTS_FILE = os.path.join(REPO, 'roles', 'watchdog', 'defaults', 'main.yml')


def role_defaults():
    """The role's defaults, read from roles/watchdog/defaults/main.yml (so they cannot drift)."""
    import yaml
    with open(ROLE_DEFAULTS_FILE) as handle:
        raw = yaml.safe_load(handle)
    names = ('interval', 'probe_timeout', 'metrics_timeout', 'startup_grace', 'ready_timeout', 'ready_delay',
             'cooldown', 'max_restarts', 'restart_window', 'unknown_limit', 'freeze_limit')
    out = dict((name, _default_of(raw['vllm_watchdog_' + name])) for name in names)
    # The run that finds a freeze watches it up to the limit ({{ vllm_watchdog_freeze_limit }}).
    out['freeze_wait'] = _default_of(raw['vllm_watchdog_freeze_wait'], vllm_watchdog_freeze_limit=out['freeze_limit'])
    for name in DECIDE_DEFAULTS:
        assert float(out[name]) == float(DECIDE_DEFAULTS[name]), (name, out[name], DECIDE_DEFAULTS[name])
    return out


def _default_of(value, **variables):
    """A default as the role sees it with an empty inventory (``{{ vllm_check_interval | default(5) }}`` is 5)."""
    if isinstance(value, str) and '{{' in value:
        import jinja2
        import yaml
        return yaml.safe_load(jinja2.Environment().from_string(value).render(**variables))
    return value


def hhmm(seconds):
    if seconds is None:
        return '-'
    seconds = int(round(seconds))
    return '%02d:%02d:%02d' % (seconds // 3600, (seconds % 3600) // 60, seconds % 60)


def span(seconds):
    if seconds is None:
        return '-'
    seconds = int(round(seconds))
    if seconds >= 3600:
        return '%dh%02dm' % (seconds // 3600, (seconds % 3600) // 60)
    return '%dm%02ds' % (seconds // 60, seconds % 60) if seconds >= 60 else '%ds' % seconds


# -- the day --------------------------------------------------------------------------------------

class Job(object):
    """A client that keeps `concurrency` requests busy from start to end, each a fresh request
    when the previous one finished (the same request again after a failure)."""

    def __init__(self, name, kind, start, end, concurrency, prompt, output):
        self.name, self.kind, self.start, self.end = name, kind, start, end
        self.concurrency, self.prompt, self.output = concurrency, prompt, output

    def as_dict(self):
        return {'name': self.name, 'kind': self.kind, 'start': self.start, 'end': self.end,
                'concurrency': self.concurrency, 'prompt_tokens': self.prompt, 'output_tokens': self.output}


BATCH = ((500, 3000), (1500, 4000))      # prompt, output tokens: 3-8 minutes per request
EVAL = ((200, 1500), (800, 2500))        # an evaluation sweep: 100-310 s per request
LONG = ((60000, 100000), (100, 300))     # summarisation of long documents: 30-50 s of prefill


def build_plan(seed, quick=False):
    """The day, from a fixed seed.  Times in simulated seconds from midnight."""
    rng = random.Random('plan-%s' % seed)
    H = HOUR
    if quick:
        length = 6 * H
        jobs = [
            Job('eval sweep', 'limit', 0.5 * H, 1.6 * H, 16, *EVAL),
            Job('long prompts', 'long', 1.8 * H, 2.3 * H, 1, *LONG),
            Job('batch', 'batch', 2.5 * H, 5.7 * H, 3, *BATCH),
        ]
        rates = [(0.0, 6 * H, 4 * MINUTE)]
        hang_at = 4 * H + 6 * MINUTE + HANG_INTO_CHECK
    else:
        length = 24 * H
        jobs = [
            Job('nightly batch', 'batch', 3.0 * H, 3.8 * H, 2, *BATCH),
            Job('batch 1', 'batch', 8.2 * H, 9.6 * H, 3, *BATCH),
            Job('eval sweep 1', 'limit', 9.9 * H, 11.3 * H, 16, *EVAL),
            Job('batch 2', 'batch', 11.7 * H, 13.0 * H, 2, *BATCH),
            Job('long prompts 1', 'long', 12.9 * H, 13.7 * H, 1, *LONG),
            Job('batch 3', 'batch', 14.0 * H, 15.3 * H, 4, *BATCH),
            Job('eval sweep 2', 'limit', 15.7 * H, 16.8 * H, 14, *EVAL),
            Job('batch 4', 'batch', 17.3 * H, 19.2 * H, 3, *BATCH),
            Job('long prompts 2', 'long', 18.2 * H, 18.6 * H, 1, *LONG),
            Job('evening batch', 'batch', 20.5 * H, 22.7 * H, 3, *BATCH),
        ]
        # interactive chat: (from, to, mean gap); quiet hours at night
        rates = [(0.0, 7 * H, 45 * MINUTE), (7 * H, 9 * H, 4 * MINUTE), (9 * H, 18 * H, 3 * MINUTE),
                 (18 * H, 22 * H, 5 * MINUTE), (22 * H, 24 * H, 20 * MINUTE)]
        hang_at = 21 * H + 36 * MINUTE + HANG_INTO_CHECK
    chats = []
    for start, end, gap in rates:
        t = start + rng.expovariate(1.0 / gap)
        while t < end:
            chats.append((t, rng.randint(300, 3000), rng.randint(100, 700)))
            t += rng.expovariate(1.0 / gap)
    return {'length': length, 'jobs': jobs, 'chats': chats, 'hang_at': hang_at, 'quick': quick, 'seed': seed}


# -- the compressed clock -------------------------------------------------------------------------

class Clock(object):
    """Simulated seconds since midnight; `factor` simulated seconds per wall second."""

    def __init__(self, factor):
        self.factor = float(factor)
        self.t0 = None
        self.stop = threading.Event()

    def start(self):
        self.t0 = time.monotonic()

    def now(self):
        return (time.monotonic() - self.t0) * self.factor

    def wall(self, sim_seconds):
        return sim_seconds / self.factor

    def sim_of_wall(self, mono):
        return (mono - self.t0) * self.factor

    def sleep(self, sim_seconds):
        if sim_seconds > 0:
            self.stop.wait(sim_seconds / self.factor)

    def sleep_until(self, sim_t):
        while not self.stop.is_set():
            left = (self.t0 + sim_t / self.factor) - time.monotonic()
            if left <= 0:
                return True
            self.stop.wait(min(left, 0.5))
        return False


# -- one simulated server, its traffic and its restarts -------------------------------------------

class Server(object):
    def __init__(self, name, info, sim, clock, scale):
        self.name = name
        self.id = info['id']
        self.url = info['url']
        self.host = info['host']
        self.port = info['port']
        self.sim = sim
        self.clock = clock
        self.scale = scale
        self.lock = threading.Lock()
        self.traffic = []          # one record per traffic request
        self.checks = []           # one record per inference request a check sent
        self.restarts = []
        self.samples = []
        self.hung_since = None
        self.started_at = -12 * HOUR   # the service has been running since yesterday noon
        self.hang_restart = None
        self.read_ms = []          # wall milliseconds of every /metrics read of the collection's checks

    # traffic ------------------------------------------------------------------------------
    def post(self, kind, job, path, body, timeout, user_agent, track):
        """One request on a fresh connection; its record is in `track` from the moment it is sent."""
        rec = {'kind': kind, 'job': job, 'sent': None, 'end': None, 'outcome': None, 'status': None,
               'wall_end': None, 'after_day': None}
        data = json.dumps(body)
        conn = http.client.HTTPConnection(self.host, self.port, timeout=self.clock.wall(timeout))
        rec['wall_sent'] = time.monotonic()
        rec['epoch_sent'] = time.time()
        rec['sent'] = self.clock.sim_of_wall(rec['wall_sent'])
        with self.lock:
            track.append(rec)
        try:
            headers = {'Content-Type': 'application/json', 'User-Agent': user_agent}
            conn.request('POST', path, body=data, headers=headers)
            resp = conn.getresponse()
            resp.read()
            rec['status'] = resp.status
            rec['outcome'] = 'ok' if resp.status == 200 else 'http_%d' % resp.status
        except ConnectionRefusedError:
            rec['outcome'] = 'refused'
        except socket.timeout:
            rec['outcome'] = 'timeout'
        except (ConnectionError, http.client.HTTPException, OSError) as exc:
            rec['outcome'] = 'dropped'
            rec['error'] = '%s: %s' % (type(exc).__name__, exc)
        finally:
            conn.close()
        rec['wall_end'] = time.monotonic()
        rec['end'] = self.clock.sim_of_wall(rec['wall_end'])
        rec['after_day'] = self.clock.stop.is_set()
        return rec

    def completion(self, kind, job, prompt_real, output_real, timeout):
        body = {'prompt': 'w ' * self.scale.tokens(prompt_real), 'max_tokens': self.scale.tokens(output_real),
                'temperature': 0.7, 'ignore_eos': True}
        rec = self.post(kind, job, '/v1/completions', body, timeout, 'replay-%s' % kind, self.traffic)
        rec.update(prompt_tokens=prompt_real, output_tokens=output_real)
        return rec

    def run_job(self, job, worker, seed, day_length):
        rng = random.Random('job-%s-%s-%d' % (seed, job.name, worker))
        # workers join over the first two minutes, so their requests do not end in lockstep
        if not self.clock.sleep_until(job.start + rng.uniform(0, 120)):
            return
        pending = None
        while not self.clock.stop.is_set() and self.clock.now() < min(job.end, day_length):
            if pending is None:
                pending = (rng.randint(*job.prompt), rng.randint(*job.output))
            rec = self.completion(job.kind, job.name, pending[0], pending[1], BATCH_TIMEOUT)
            if rec['outcome'] == 'ok':
                pending = None
            else:
                self.clock.sleep(RETRY_DELAY)

    def run_chats(self, chats):
        for at, prompt, output in chats:
            if not self.clock.sleep_until(at):
                return
            thread = threading.Thread(target=self.completion,
                                      args=('chat', 'interactive', prompt, output, CHAT_TIMEOUT))
            thread.daemon = True
            thread.start()

    def keep_log(self, rec, since_epoch):
        time.sleep(0.2)
        keep = []
        try:
            log = self.sim.requests(self.id)
        except Exception:  # pylint: disable=broad-except
            return          # the simulator is gone (end of the day)
        for entry in log:
            if since_epoch <= entry['time'] <= rec['epoch_end'] + 0.2:
                keep.append({'time': entry['time'], 'request': '%s %s' % (entry['method'], entry['path']),
                             'agent': entry['headers'].get('User-Agent') or entry['headers'].get('user-agent'),
                             'status': entry.get('status')})
        rec['server_log'] = keep

    # state ---------------------------------------------------------------------------------
    def in_flight(self):
        stats = self.sim.stats(self.id)
        return sum(e['running'] + e['waiting'] + e['inbox'] for e in stats['engines']), stats

    def hang(self):
        with self.lock:
            self.sim.set_state(self.id, 'hang')
            self.hung_since = self.clock.now()

    def restart(self, by, reason):
        with self.lock:
            inflight, dummy = self.in_flight()
            at = self.clock.now()
            hung = self.hung_since is not None
            self.sim.set_state(self.id, 'restart', load_seconds=self.clock.wall(LOAD_SECONDS))
            rec = {'at': at, 'by': by, 'hung': hung, 'in_flight': inflight, 'reason': reason,
                   'after_hang': None if not hung else at - self.hung_since}
            if hung and self.hang_restart is None:
                self.hang_restart = rec
            self.hung_since = None
            self.started_at = at
            self.restarts.append(rec)
            return rec

    def service(self):
        """What systemd would say: active while the API server runs or loads its weights."""
        info = self.sim.get(self.id)
        running = info['status'] in ('listening', 'loading')
        return {'running': running, 'started_at': self.scale.epoch(self.started_at),
                'status': 'active/running' if running else 'inactive/dead'}

    def sample(self):
        inflight, stats = self.in_flight()
        eng = stats['engines']
        self.samples.append({'t': self.clock.now(), 'running': sum(e['running'] for e in eng),
                             'waiting': sum(e['waiting'] + e['inbox'] for e in eng),
                             'status': stats['status'], 'hung': self.hung_since is not None,
                             'steps': stats['totals']['steps']})


class Scale(object):
    """How the incident's units map onto the simulator's (see docs/incident.md)."""

    def __init__(self, factor, steps_per_second):
        self.factor = float(factor)
        self.steps_per_second = float(steps_per_second)
        # one engine step gives every running request one simulator token; at `factor` x real time a
        # request must make DECODE_TPS * factor real tokens per wall second
        self.tokens_per_token = DECODE_TPS * self.factor / self.steps_per_second
        self.step_seconds = self.factor / self.steps_per_second          # simulated seconds per step
        self.chunk_tokens = int(round(PREFILL_TPS / DECODE_TPS))        # prefill per step, simulator tokens
        self.epoch0 = 1800000000.0                                       # a simulated midnight (UTC)

    def tokens(self, real_tokens):
        return max(1, int(round(real_tokens / self.tokens_per_token)))

    def epoch(self, sim_seconds):
        return self.epoch0 + sim_seconds

    def as_dict(self):
        return {'factor': self.factor, 'engine_steps_per_wall_second': round(self.steps_per_second, 1),
                'real_tokens_per_simulator_token': round(self.tokens_per_token, 3),
                'simulated_seconds_per_step': round(self.step_seconds, 3), 'chunk_tokens': self.chunk_tokens}


# -- the watchdogs --------------------------------------------------------------------------------

class OldPair(object):
    """A: watchdog 1 (chat probe, 45 s, 5 failures in a row) and watchdog 2 (counts 500s)."""

    def __init__(self, server, clock, day_length):
        self.server = server
        self.clock = clock
        self.day_length = day_length
        self.probes = []
        self.w2_checks = []

    def chat_probe(self):
        body = {'model': 'tiny', 'max_tokens': self.server.scale.tokens(W1_MAX_TOKENS), 'temperature': 0,
                'messages': [{'role': 'system', 'content': 'You are the health check of this server.'},
                             {'role': 'user', 'content': 'Are you there? Answer OK.'}]}
        rec = self.server.post('check', 'watchdog 1', '/v1/chat/completions', body, W1_TIMEOUT, 'old-watchdog-1',
                               self.server.checks)
        rec['inference'] = True
        return rec

    def watchdog1(self, offset):
        failures = 0
        t = offset
        while t < self.day_length and self.clock.sleep_until(t):
            rec = self.chat_probe()
            ok = rec['outcome'] == 'ok'
            failures = 0 if ok else failures + 1
            rec['failures'] = failures
            self.probes.append(rec)
            if failures >= W1_FAILURES:
                self.server.restart('watchdog 1', '%d chat requests in a row failed (%s)' % (failures, rec['outcome']))
                failures = 0
            t += CHECK_EVERY

    def watchdog2(self, offset):
        last_restart = -1e18
        t = offset
        while t < self.day_length and self.clock.sleep_until(t):
            now = self.clock.now()
            with self.server.lock:
                errors = [r['end'] for r in self.server.traffic if r['status'] == 500 and r['end'] is not None]
            seen_today = len(errors)
            recent = sum(1 for e in errors if e > max(now - W2_WINDOW, last_restart))
            threshold = max(W2_FLOOR, W2_START - seen_today // W2_STEP)
            acted = recent >= threshold
            self.w2_checks.append({'at': now, 'recent_500s': recent, 'seen_today': seen_today,
                                   'threshold': threshold, 'restart': acted})
            if acted:
                self.server.restart('watchdog 2', '%d HTTP 500s in the last %s (threshold %d, %d seen today)'
                                    % (recent, span(W2_WINDOW), threshold, seen_today))
                last_restart = self.clock.now()
            t += W2_EVERY


class CountingClient(Client):
    """The collection's HTTP client, recording every inference request (probe) it sends."""

    def __init__(self, url, server, **kwargs):
        Client.__init__(self, url, **kwargs)
        self._server = server
        self._last_read = None

    def metrics(self):
        started = time.monotonic()
        epoch = time.time()
        fetched = Client.metrics(self)
        self._last_read = (started, time.monotonic(), epoch)
        self._server.read_ms.append(round((self._last_read[1] - started) * 1000.0, 2))
        return fetched

    def probe(self, model):
        wall_sent = time.monotonic()
        fetched = Client.probe(self, model)
        rec = {'kind': 'check', 'job': 'modelops.vllm', 'wall_sent': wall_sent, 'last_read': self._last_read,
               'sent': self._server.clock.sim_of_wall(wall_sent), 'inference': True,
               'outcome': 'ok' if fetched.status == 200 else (fetched.error or 'http_%s' % fetched.status),
               'status': fetched.status, 'seconds': fetched.seconds}
        rec['wall_end'] = time.monotonic()
        rec['end'] = self._server.clock.sim_of_wall(rec['wall_end'])
        rec['epoch_end'] = time.time()
        with self._server.lock:
            self._server.checks.append(rec)
            since = self._last_read[0] if self._last_read else wall_sent
            overlap = any(t['wall_sent'] <= rec['wall_end'] and (t['wall_end'] is None or t['wall_end'] >= since)
                          for t in self._server.traffic if t['outcome'] != 'refused')
        if overlap:
            # Traffic around the probe: keep the server's own record of who arrived when (its request log),
            # read a moment later in the background so as not to delay the check.
            thread = threading.Thread(target=self._server.keep_log, args=(rec, (self._last_read or (0, 0, 0))[2] - 1.0))
            thread.daemon = True
            thread.start()
        return fetched


class Collection(object):
    """B: the role's check -> decide -> restart -> wait ready -> check again, in-process."""

    def __init__(self, server, clock, day_length, defaults):
        self.server = server
        self.clock = clock
        self.day_length = day_length
        self.d = defaults
        self.history = empty_history()
        self.freezes = None  # the check's memory of freezes across runs (the role keeps it in its state dir)
        self.verdicts = []
        self.decisions = []
        self.settings = dict((k, defaults[k]) for k in DECIDE_DEFAULTS)

    def judge(self):
        clock = self.clock
        scale = self.server.scale
        client = CountingClient(self.server.url, self.server, metrics_timeout=clock.wall(self.d['metrics_timeout']),
                                probe_timeout=clock.wall(self.d['probe_timeout']),
                                clock=lambda: scale.epoch(clock.now()))
        started = clock.now()
        freeze = Freeze(self.freezes, limit=float(self.d['freeze_limit']), wait=float(self.d['freeze_wait']))
        result = Judge(client, interval=self.d['interval'], sleep=clock.sleep,
                       clock=lambda: scale.epoch(clock.now()), probe_timeout=self.d['probe_timeout'],
                       metrics_timeout=self.d['metrics_timeout'], freeze=freeze).run()
        self.freezes = freeze.memory(judged=result['state'] != 'unknown')
        client.session.close()
        rec = {'at': started, 'done': clock.now(), 'state': result['state'], 'reason': result['reason'],
               'probe': result['probe']['attempts'], 'running': result['running'], 'waiting': result['waiting']}
        return rec, result

    def wait_ready(self):
        """The restart module's ready wait (plugins/module_utils/_ready.py): /health 200, then /v1/models, every ready_delay."""
        deadline = self.clock.now() + float(self.d['ready_timeout'])
        timeout = self.clock.wall(self.d['metrics_timeout'])
        client = Client(self.server.url, metrics_timeout=timeout)
        try:
            while self.clock.now() < deadline and not self.clock.stop.is_set():
                health = client.health()
                if health.status == 200 and client.models().status == 200:
                    return True
                self.clock.sleep(float(self.d['ready_delay']))
            return False
        finally:
            client.session.close()

    def run(self, offset):
        t = offset
        while t < self.day_length and self.clock.sleep_until(t):
            rec, result = self.judge()
            self.verdicts.append(rec)
            service = self.server.service() if rec['state'] in ('stuck', 'down') else {}
            decision = decide(rec['state'], service, self.history, self.server.scale.epoch(self.clock.now()),
                              self.settings)
            self.history = decision['history']
            rec['action'] = decision['action']
            rec['decision'] = decision['reason']
            if decision['action'] != 'none' or rec['state'] not in ('idle', 'busy'):
                self.decisions.append(dict(rec, evidence=result['evidence']))
            if decision['action'] == 'restart':
                self.server.restart('modelops.vllm', '%s: %s' % (result['state'], result['reason']))
                ready = self.wait_ready()
                after, dummy = self.judge()
                after['after_restart'] = True
                after['ready'] = ready
                self.verdicts.append(after)
            now = self.clock.now()
            while t <= now:
                t += CHECK_EVERY


# -- the run --------------------------------------------------------------------------------------

def calibrate(sim, step_rate, windows=5, seconds=0.4):
    """Engine steps per wall second the simulator really makes at `step_rate` with a full batch
    (asyncio timers have millisecond resolution, so it is below the rate asked for).  The best of a
    few short windows: a window in which another process took the CPU says less about the simulator."""
    info = sim.create(max_num_seqs=MAX_NUM_SEQS, step_rate=step_rate)
    try:
        sim.start_load(info['id'], concurrency=MAX_NUM_SEQS, max_tokens=10 ** 7)
        time.sleep(0.3)
        best = 0.0
        for dummy in range(windows):
            first = sim.stats(info['id'])['totals']['steps']
            started = time.monotonic()
            time.sleep(seconds)
            steps = sim.stats(info['id'])['totals']['steps'] - first
            best = max(best, steps / (time.monotonic() - started))
        return best
    finally:
        sim.stop_load(info['id'])
        sim.delete(info['id'])


def replay(args):
    plan = build_plan(args.seed, args.quick)
    defaults = role_defaults()
    clock = Clock(args.factor)
    proc = SimulatorProcess(port_range=args.port_range)
    sim = proc.start()
    threads = []
    loads = [os.getloadavg()[0]]
    wall_started = time.monotonic()
    try:
        measured = calibrate(sim, args.step_rate)
        scale = Scale(args.factor, measured)
        options = dict(max_num_seqs=MAX_NUM_SEQS, step_rate=args.step_rate, chunk_tokens=scale.chunk_tokens,
                       max_model_len=65536, restart_inflight='500')
        a_info, b_info = sim.create_each([dict(options, id='A'), dict(options, id='B')])
        servers = {'A': Server('A', a_info, sim, clock, scale), 'B': Server('B', b_info, sim, clock, scale)}
        old = OldPair(servers['A'], clock, plan['length'])
        ours = Collection(servers['B'], clock, plan['length'], defaults)
        hang = {}
        errors = []

        def guarded(target, *targs):
            try:
                target(*targs)
            except Exception:  # pylint: disable=broad-except
                if not clock.stop.is_set():
                    errors.append(traceback.format_exc())

        def start(target, *targs):
            thread = threading.Thread(target=guarded, args=(target,) + targs)
            thread.daemon = True
            threads.append(thread)
            thread.start()

        def do_hang():
            if clock.sleep_until(plan['hang_at']):
                for server in servers.values():      # back to back: a few ms of wall time apart
                    server.hang()
                for server in servers.values():
                    hang[server.name] = {'at': server.hung_since, 'in_flight': server.in_flight()[0]}

        def sampler():
            t = 0.0
            while t < plan['length'] and clock.sleep_until(t):
                for server in servers.values():
                    server.sample()
                t += SAMPLE_EVERY

        clock.start()
        for server in servers.values():
            for job in plan['jobs']:
                for worker in range(job.concurrency):
                    start(server.run_job, job, worker, args.seed, plan['length'])
            start(server.run_chats, plan['chats'])
        start(old.watchdog1, CHECK_OFFSET)
        start(old.watchdog2, 7 * MINUTE)
        start(ours.run, CHECK_OFFSET)
        start(do_hang)
        start(sampler)
        last_print = -1
        while clock.now() < plan['length']:
            time.sleep(0.25)
            loads.append(os.getloadavg()[0])
            hour = int(clock.now() // HOUR)
            if hour != last_print and not args.quiet:
                last_print = hour
                print('  %s  A restarts %d, B restarts %d, B verdicts %d' % (
                    hhmm(hour * HOUR), len(servers['A'].restarts), len(servers['B'].restarts), len(ours.verdicts)),
                    file=sys.stderr, flush=True)
        clock.stop.set()
        time.sleep(0.3)
        snapshot = time.monotonic()
        counts = dict((name, sim.request_counts(s.id)) for name, s in servers.items())
        role = run_role(sim, args) if args.role else None
    finally:
        clock.stop.set()
        proc.stop()
        for thread in threads:
            thread.join(timeout=5)
    wall = time.monotonic() - wall_started
    machine = {'cores': os.cpu_count(), 'load_1min_at_start': round(loads[0], 2),
               'load_1min_max': round(max(loads), 2),
               'load_1min_mean': round(sum(loads) / len(loads), 2)}
    return analyse(plan, scale, defaults, servers, old, ours, hang, counts, snapshot, role, wall, errors, machine)


# -- the real role, once, at the moment of the hang (optional) ------------------------------------

def run_role(sim, args):
    """The same situation as at the hang, on a third simulated server (the role needs real time:
    ansible-playbook takes seconds, which would be hours of the compressed day): work in flight,
    the engine hung.  Then `ansible-playbook playbooks/watchdog.yml` with the role's defaults and
    the `command` restart method, whose command restarts the simulated server. The server has been
    up for two hours (its own process_start_time_seconds), past the role's start-up grace, as the
    replayed servers are at their hang."""
    from tests.support import ansible_run
    from tests.support.servers import UP_TWO_HOURS
    info = sim.create(id='C', max_num_seqs=MAX_NUM_SEQS, step_rate=args.step_rate, **UP_TWO_HOURS)
    sim.start_load(info['id'], concurrency=3, max_tokens=10 ** 6)
    sim.wait_for(info['id'], lambda s: s['engines'][0]['running'] == 3)
    time.sleep(0.5)
    sim.set_state(info['id'], 'hang')
    workdir = tempfile.mkdtemp(prefix='replay-role-')
    control = sim.base_url
    restart = [sys.executable, '-c',
               'import json, sys, urllib.request; urllib.request.urlopen(urllib.request.Request('
               'sys.argv[1], data=json.dumps({"state": "restart", "load_seconds": 2}).encode(), method="POST", '
               'headers={"Content-Type": "application/json"}), timeout=30).read()',
               '%s/servers/%s/state' % (control, info['id'])]
    extra = {'vllm_watchdog_hosts': 'localhost', 'vllm_watchdog_url': info['url'],
             'vllm_watchdog_restart_method': 'command', 'vllm_watchdog_restart_command': restart,
             'vllm_watchdog_assume_url_is_service': True,
             'vllm_watchdog_state_dir': os.path.join(workdir, 'state'), 'vllm_watchdog_ready_delay': 1}
    inventory = os.path.join(workdir, 'inventory.ini')
    with open(inventory, 'w') as handle:
        handle.write('localhost ansible_connection=local\n')
    cmd = [ansible_run._bin('ansible-playbook'), '-i', inventory, os.path.join(REPO, 'playbooks', 'watchdog.yml'),
           '-e', json.dumps(extra)]
    started = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=ansible_run.env(), timeout=600, cwd=workdir,
                          stdin=subprocess.DEVNULL, check=False)
    seconds = time.monotonic() - started
    found = re.search(r'"(localhost/vllm: [^"]*)"', proc.stdout)
    line = ' '.join(found.group(1).split()) if found else None
    after = sim.get(info['id'])
    history = None
    path = os.path.join(workdir, 'state', 'vllm.json')
    if os.path.exists(path):
        with open(path) as handle:
            history = json.load(handle)
    sim.stop_load(info['id'])
    sim.delete(info['id'])
    shutil.rmtree(workdir, ignore_errors=True)
    return {'rc': proc.returncode, 'seconds': round(seconds, 1), 'line': line, 'restarts': after['restarts'],
            'last_state': (history or {}).get('last_state'), 'last_action': (history or {}).get('last_action'),
            'stdout_tail': proc.stdout[-3000:] if proc.returncode else None}


# -- results --------------------------------------------------------------------------------------

def in_flight_at(server, wall):
    """The traffic requests in flight at the server at this moment (client-side times: from the
    moment the client started sending to the moment it had the whole answer)."""
    return [rec for rec in server.traffic
            if rec['outcome'] != 'refused' and rec['wall_sent'] <= wall <= (rec['wall_end'] or float('inf'))]


def busy_detail(server, check):
    """A probe of the collection that met traffic, told from the server's own request log: when did
    the read that showed nothing in flight, the traffic and the probe reach the server?"""
    def ms(seconds):
        return round(seconds * 1000.0, 1)

    log = check.get('server_log') or []
    ours = [e for e in log if e['agent'] == 'modelops.vllm.health']
    probe = [e for e in ours if e['request'] == 'POST /v1/completions']
    probe_at = probe[-1]['time'] if probe else None
    reads = [e for e in ours if e['request'] == 'GET /metrics' and (probe_at is None or e['time'] <= probe_at)]
    read_at = reads[-1]['time'] if reads else None
    arrivals = sorted(e['time'] for e in log if (e['agent'] or '').startswith('replay-'))
    out = {'read_to_probe_ms': ms(probe_at - read_at) if probe_at and read_at else None, 'traffic': []}
    for rec in sorted(in_flight_at(server, check['wall_sent']), key=lambda r: r['epoch_sent']):
        item = {'kind': rec['kind'], 'outcome': rec['outcome'],
                'client_sent_ms_before_probe': ms(check['wall_sent'] - rec['wall_sent'])}
        later = [t for t in arrivals if t >= rec['epoch_sent']]
        if later and probe_at is not None and read_at is not None:
            arrived = later[0]
            arrivals.remove(arrived)
            item['reached_server_ms_before_probe'] = ms(probe_at - arrived)
            item['when'] = ('before the read: the read still showed nothing in flight (vLLM publishes '
                            'running/waiting after the next engine step)' if arrived < read_at else
                            'between the read and the probe' if arrived < probe_at else
                            'after the probe (not in flight when the probe arrived)')
            item['busy_at_probe'] = arrived < probe_at
        else:
            item['when'] = 'unknown (no server log)'
            item['busy_at_probe'] = True
        out['traffic'].append(item)
    out['busy_at_probe'] = any(t['busy_at_probe'] for t in out['traffic'])
    return out


def summarise(server, counts, snapshot, day_length):
    traffic = [r for r in server.traffic if not r['after_day'] and r['sent'] < day_length]
    # what reached the server before its request counts were read
    reached = [r for r in server.traffic if r['outcome'] != 'refused' and r['wall_sent'] < snapshot]
    checks = [r for r in server.checks if r['outcome'] != 'refused' and r['wall_sent'] < snapshot]
    inference = sum(n for key, n in counts.items() if key in ('POST /v1/completions', 'POST /v1/chat/completions'))
    sim_checks = inference - len(reached)
    overlap = [r for r in checks if in_flight_at(server, r['wall_sent'])]
    details = [busy_detail(server, r) for r in overlap] if server.name == 'B' else []
    # A check's request to a busy server: traffic in flight at that moment (client-side times); for the
    # collection's probes, refined with the server's own log (traffic that reached it before the probe)
    busy = [r for i, r in enumerate(overlap) if not details or details[i]['busy_at_probe']]
    outcomes = {}
    for rec in traffic:
        outcomes[rec['outcome']] = outcomes.get(rec['outcome'], 0) + 1
    false = [r for r in server.restarts if not r['hung']]
    return {
        'restarts': len(server.restarts),
        'restarts_by': dict((by, sum(1 for r in server.restarts if r['by'] == by))
                            for by in sorted(set(r['by'] for r in server.restarts))),
        'false_restarts': len(false),
        'failed_by_restarts': sum(1 for r in traffic if r['status'] == 500),
        'dropped': sum(1 for r in traffic if r['outcome'] == 'dropped'),
        'check_inference_requests': sim_checks,
        'check_inference_requests_client_side': len(checks),
        'check_inference_to_busy': len(busy),
        'check_inference_overlapping_traffic': len(overlap),
        'busy_checks': [dict(details[i], sent=hhmm(r['sent']), outcome=r['outcome'])
                        for i, r in enumerate(overlap)] if details else [],
        'hang_to_restart': server.hang_restart['after_hang'] if server.hang_restart else None,
        'hang_restarted_by': server.hang_restart['by'] if server.hang_restart else None,
        'traffic': outcomes,
        'traffic_requests': len(traffic),
        'requests_received': counts,
        'restart_log': [dict(r, at_hhmm=hhmm(r['at'])) for r in server.restarts],
    }


def code_version():
    """The commit of the collection code the replay ran, and whether plugins/ or roles/ had local changes."""
    try:
        head = subprocess.run(['git', '-C', REPO, 'rev-parse', '--short', 'HEAD'], capture_output=True, text=True,
                              check=True).stdout.strip()
        dirty = subprocess.run(['git', '-C', REPO, 'status', '--porcelain', '--', 'plugins', 'roles'],
                               capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return 'unknown'
    return head + (' with local changes in plugins/ or roles/' if dirty else '')


def percentile(values, q):
    values = sorted(values)
    if not values:
        return None
    return values[min(len(values) - 1, int(round(q * (len(values) - 1))))]


def analyse(plan, scale, defaults, servers, old, ours, hang, counts, snapshot, role, wall, errors, machine):
    day = plan['length']
    a = summarise(servers['A'], counts['A'], snapshot, day)
    b = summarise(servers['B'], counts['B'], snapshot, day)
    for chk, rec in zip(b['busy_checks'], [r for r in servers['B'].checks if r['outcome'] != 'refused'
                                           and r['wall_sent'] < snapshot and in_flight_at(servers['B'], r['wall_sent'])]):
        verdict = next((v for v in ours.verdicts if v['at'] <= rec['sent'] <= v['done']), None)
        chk['after_restart'] = bool(verdict and verdict.get('after_restart'))
        chk['verdict'] = verdict and {k: verdict[k] for k in ('state', 'reason', 'running', 'waiting')}
    verdicts = {}
    for rec in ours.verdicts:
        verdicts[rec['state']] = verdicts.get(rec['state'], 0) + 1
    stuck_check = next((v for v in ours.verdicts if v['state'] == 'stuck'), None)
    bound = 2 * CHECK_EVERY + ((stuck_check['done'] - stuck_check['at']) if stuck_check else 0)
    # measured decode speed of a request (simulated tokens/s), from completed batch requests
    speeds = sorted(r['output_tokens'] / (r['end'] - r['sent']) for s in servers.values() for r in s.traffic
                    if r['outcome'] == 'ok' and r['kind'] == 'batch' and r['end'] > r['sent'])
    reads = servers['B'].read_ms
    timeout_ms = 1000.0 * float(defaults['metrics_timeout']) / scale.factor
    machine.update({
        'metrics_read_ms': {'median': percentile(reads, 0.5), 'p95': percentile(reads, 0.95),
                            'max': max(reads) if reads else None, 'count': len(reads),
                            'over_timeout': sum(1 for x in reads if x >= timeout_ms),
                            'timeout_ms': round(timeout_ms, 1)},
    })
    decode = speeds[len(speeds) // 2] if speeds else 0.0
    because = []
    if abs(decode - DECODE_TPS) > 0.15 * DECODE_TPS:
        because.append('a request decoded at %.1f tokens/s, not %.0f' % (decode, DECODE_TPS))
    if machine['load_1min_max'] > 1.5 * machine['cores']:
        because.append('the load average reached %.1f on %d cores' % (machine['load_1min_max'], machine['cores']))
    if machine['metrics_read_ms']['over_timeout']:
        because.append('%d /metrics reads took longer than the scaled metrics_timeout'
                       % machine['metrics_read_ms']['over_timeout'])
    machine['disturbed'] = because
    targets = {
        'A reproduces the cascade (3+ false restarts)': a['false_restarts'] >= 3,
        'B: zero false restarts': b['false_restarts'] == 0,
        'B: zero inference requests to a busy server': b['check_inference_to_busy'] == 0,
        'B: restarts the hung server once': sum(1 for r in servers['B'].restarts if r['hung']) == 1,
        'B: hang to restart within two check intervals plus the reads (%s)' % span(bound):
            b['hang_to_restart'] is not None and b['hang_to_restart'] <= bound,
    }
    if role is not None:
        targets['B: the real role restarts the hung server once'] = role['rc'] == 0 and role['restarts'] == 1
    results = {
        'measured_at': datetime.datetime.now(datetime.timezone.utc).strftime('%Y-%m-%d %H:%M UTC'),
        'wall_seconds': round(wall, 1),
        'code': code_version(),
        'day_seconds': day,
        'quick': plan['quick'],
        'seed': plan['seed'],
        'scale': scale.as_dict(),
        'decode_tokens_per_second_median': round(speeds[len(speeds) // 2], 2) if speeds else None,
        'role_defaults': defaults,
        'machine': machine,
        'old_pair': {'check_every': CHECK_EVERY, 'w1_timeout': W1_TIMEOUT, 'w1_failures': W1_FAILURES,
                     'w2_every': W2_EVERY, 'w2_window': W2_WINDOW, 'w2_threshold': [W2_START, W2_STEP, W2_FLOOR]},
        'plan': {'jobs': [j.as_dict() for j in plan['jobs']], 'chats': len(plan['chats']),
                 'hang_at': plan['hang_at']},
        'hang': hang,
        'A': a,
        'B': b,
        'B_verdicts': verdicts,
        'B_fail': sum(1 for d in ours.decisions if d['action'] == 'fail'),
        'B_decisions': [dict((k, v) for k, v in d.items() if k != 'evidence') for d in ours.decisions],
        'B_stuck_evidence': next((d['evidence'] for d in ours.decisions if d['state'] == 'stuck'), None),
        'targets': targets,
        'role': role,
        'errors': errors,
        'w1_probes': [{'t': r['sent'], 'outcome': r['outcome'], 'failures': r['failures']} for r in old.probes],
        'w2_checks': old.w2_checks,
        'verdicts': ours.verdicts,
        'samples': {name: s.samples for name, s in servers.items()},
    }
    return results


def probe_case(chk):
    """'between' (traffic reached the server between the read and the probe) or 'before' (it reached
    the server before the read, which still showed nothing in flight), for one probe that met traffic."""
    whens = [t['when'] for t in chk['traffic'] if t['busy_at_probe']]
    return 'between' if any(w.startswith('between') for w in whens) else 'before' if whens else None


def busy_cell(x):
    """The count, and for the collection's probes where the traffic they met came from."""
    cases = [probe_case(c) for c in x['busy_checks'] if c['busy_at_probe']]
    if not cases:
        return str(x['check_inference_to_busy'])
    parts = []
    if cases.count('between'):
        parts.append('%d met traffic that reached the server between the read showing nothing in flight and '
                     'the probe' % cases.count('between'))
    if cases.count('before'):
        parts.append('%d met traffic that reached the server just before the read, which still showed nothing in '
                     'flight' % cases.count('before'))
    return '%d (%s)' % (x['check_inference_to_busy'], '; '.join(parts))


def table(res):
    a, b = res['A'], res['B']

    def by(x):
        return ', '.join('%s %d' % (k, v) for k, v in sorted(x['restarts_by'].items())) or '-'

    def hang(x):
        if x['hang_to_restart'] is None:
            return 'not restarted'
        return '%s (by %s)' % (span(x['hang_to_restart']), x['hang_restarted_by'])

    rows = [
        ('restarts', '%d (%s)' % (a['restarts'], by(a)), '%d (%s)' % (b['restarts'], by(b))),
        ('false restarts (server not hung)', a['false_restarts'], b['false_restarts']),
        ('in-flight requests failed by restarts (HTTP 500)', a['failed_by_restarts'], b['failed_by_restarts']),
        ('inference requests sent by the checks', a['check_inference_requests'], b['check_inference_requests']),
        ('... of them to a busy server', a['check_inference_to_busy'], busy_cell(b)),
        ('time from the real hang to its restart', hang(a), hang(b)),
        ('"needs a human" (decide() said fail)', '-', res['B_fail']),
        ('traffic requests (ok / 500 / refused while loading / timed out)',
         '%d (%d / %d / %d / %d)' % ((a['traffic_requests'],) + tuple(a['traffic'].get(k, 0) for k in (
             'ok', 'http_500', 'refused', 'timeout'))),
         '%d (%d / %d / %d / %d)' % ((b['traffic_requests'],) + tuple(b['traffic'].get(k, 0) for k in (
             'ok', 'http_500', 'refused', 'timeout')))),
    ]
    out = ['| | A: old pair (chat probe + 500 counter) | B: modelops.vllm.watchdog logic |', '|---|---|---|']
    for name, x, y in rows:
        out.append('| %s | %s | %s |' % (name, x, y))
    return '\n'.join(out)


def report(res):
    lines = [table(res), '']
    verdicts = ', '.join('%s %d' % (k, v) for k, v in sorted(res['B_verdicts'].items(), key=lambda kv: -kv[1]))
    lines.append('B: the collection\'s verdicts over the day: %s.' % verdicts)
    for rec in res['A']['restart_log']:
        lines.append('A restart at %s by %s (%s; %d in flight; %s)' % (
            rec['at_hhmm'], rec['by'], 'hung' if rec['hung'] else 'NOT hung', rec['in_flight'], rec['reason']))
    for rec in res['B']['restart_log']:
        lines.append('B restart at %s by %s (%s; %d in flight; %s)' % (
            rec['at_hhmm'], rec['by'], 'hung' if rec['hung'] else 'NOT hung', rec['in_flight'], rec['reason']))
    for rec in res['B_decisions']:
        lines.append('B %s at %s: %s -> %s (%s)' % (rec['state'], hhmm(rec['at']), rec['reason'], rec['action'],
                                                    rec['decision']))
    if res['role']:
        lines.append('real role at the hang (ansible-playbook, %(seconds)s s, rc %(rc)s): %(line)s; '
                     'server restarts %(restarts)s' % res['role'])
    m = res['machine']
    lines.append('machine: %d cores, load average (1 min) %.2f at the start, %.2f mean, %.2f max; the collection\'s '
                 '/metrics reads took %s ms median, %s ms p95, %s ms max (timeout %s ms wall = %s s simulated; %d of '
                 '%d over it); a request decoded at %s tokens/s (target %.0f)' % (
                     m['cores'], m['load_1min_at_start'], m['load_1min_mean'], m['load_1min_max'],
                     m['metrics_read_ms']['median'], m['metrics_read_ms']['p95'], m['metrics_read_ms']['max'],
                     m['metrics_read_ms']['timeout_ms'], res['role_defaults']['metrics_timeout'],
                     m['metrics_read_ms']['over_timeout'], m['metrics_read_ms']['count'],
                     res['decode_tokens_per_second_median'], DECODE_TPS))
    if m['disturbed']:
        lines.append('WARNING: the machine was busy with other work during this run (%s): its timings are not '
                     'representative' % '; '.join(m['disturbed']))
    for chk in res['B']['busy_checks']:
        lines.append('B probe at %s met traffic (%s; read to probe %s ms): %s' % (
            chk['sent'], 'busy when it arrived' if chk['busy_at_probe'] else 'not busy when it arrived',
            chk['read_to_probe_ms'], json.dumps(chk['traffic'])))
    for err in res['errors']:
        lines.append('ERROR in a replay thread:\n' + err)
    lines.append('')
    for name, ok in res['targets'].items():
        lines.append('%s  %s' % ('met   ' if ok else 'MISSED', name))
    for key in ('A', 'B'):
        x = res[key]
        if x['check_inference_requests'] != x['check_inference_requests_client_side'] or x['dropped']:
            lines.append('note %s: simulator-counted check requests %d, client-side %d, dropped traffic %d' % (
                key, x['check_inference_requests'], x['check_inference_requests_client_side'], x['dropped']))
    return '\n'.join(lines)


# -- the picture ----------------------------------------------------------------------------------

STATE_COLOURS = {'idle': '#9e9e9e', 'busy': '#1f77b4', 'stuck': '#d62728', 'restarted': '#2ca02c',
                 'starting': '#98df8a', 'down': '#000000', 'unknown': '#ff7f0e', 'sleeping': '#8c564b',
                 'up': '#17becf'}


def plot(res, path):
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    hours = res['day_seconds'] / HOUR
    fig, axes = plt.subplots(3, 1, figsize=(13, 9), sharex=True,
                             gridspec_kw={'height_ratios': [3, 3, 1.3], 'hspace': 0.32})
    titles = {'A': 'A: the old pair (watchdog 1: a chat request every 5 min, 45 s, restart after 5 failures; '
                   'watchdog 2: counts HTTP 500s)',
              'B': 'B: modelops.vllm.watchdog (its check and decide() every 5 min, in-process, scaled clock)'}
    restart_style = {'watchdog 1': '#d62728', 'watchdog 2': '#9467bd', 'modelops.vllm': '#2ca02c'}
    marker_y = {'watchdog 1': 2.0, 'watchdog 2': 4.2, 'modelops.vllm': 2.0}
    hang_at = res['plan']['hang_at'] / HOUR
    ymax = MAX_NUM_SEQS + 12
    for ax, key in zip(axes[:2], ('A', 'B')):
        samples = res['samples'][key]
        t = [s['t'] / HOUR for s in samples]
        running = [s['running'] for s in samples]
        waiting = [s['waiting'] for s in samples]
        ax.stackplot(t, running, waiting, colors=['#6baed6', '#fd8d3c'], step='post', linewidth=0)
        ax.axhline(MAX_NUM_SEQS, color='#555555', linestyle=':', linewidth=1)
        ax.text(hours * 0.005, MAX_NUM_SEQS + 0.4, 'max_num_seqs %d' % MAX_NUM_SEQS, fontsize=8, color='#555555')
        start = None
        for s in samples + [{'t': res['day_seconds'], 'status': 'end'}]:
            if s['status'] == 'loading' and start is None:
                start = s['t']
            elif s['status'] != 'loading' and start is not None:
                ax.axvspan(start / HOUR, s['t'] / HOUR, color='#999999', alpha=0.45, linewidth=0)
                start = None
        end = res[key]['hang_to_restart']
        end = (hang_at + end / HOUR) if end is not None else hours
        ax.axvspan(hang_at, end, color='#d62728', alpha=0.2, linewidth=0)
        for rec in res[key]['restart_log']:
            colour = restart_style[rec['by']]
            ax.axvline(rec['at'] / HOUR, color=colour, linewidth=0.9, alpha=0.8)
            ax.plot([rec['at'] / HOUR], [ymax - marker_y[rec['by']]], marker='v', color=colour, markersize=11,
                    linestyle='none',
                    markeredgecolor='black' if not rec['hung'] else colour, markeredgewidth=1.3)
        if key == 'B':
            names = {'limit': 'at the limit', 'long': 'long prompts'}
            for job in res['plan']['jobs']:
                if job['kind'] in names:
                    ax.annotate(names[job['kind']], xy=(job['start'] / HOUR, MAX_NUM_SEQS + 6.6), fontsize=7.5,
                                color='#444444')
            ax.annotate('the hang', xy=(hang_at, MAX_NUM_SEQS + 6.6), xytext=(-4, 0), textcoords='offset points',
                        ha='right', fontsize=7.5, color='#d62728')
        ax.set_ylim(0, ymax)
        ax.set_ylabel('requests in the server')
        x = res[key]
        hang = ('hang restarted after %s' % span(x['hang_to_restart'])) if x['hang_to_restart'] is not None \
            else 'hang never restarted'
        ax.set_title('%s\n%d restart(s), %d of them false; %d in-flight requests failed (HTTP 500); %d inference '
                     'requests from the checks, %d to a busy server; %s' % (
                         titles[key], x['restarts'], x['false_restarts'], x['failed_by_restarts'],
                         x['check_inference_requests'], x['check_inference_to_busy'], hang),
                     fontsize=9.5, loc='left')
        ax.grid(axis='x', alpha=0.3)
    ax = axes[2]
    for rec in res['verdicts']:
        calm = rec['state'] in ('idle', 'busy')
        ax.plot([rec['at'] / HOUR], [1], marker='|' if calm else 'D', color=STATE_COLOURS.get(rec['state'], 'black'),
                markersize=12 if calm else 7, markeredgewidth=1.5, linestyle='none')
    w1 = {'ok': '#2ca02c', 'timeout': '#d62728', 'refused': '#555555', 'http_500': '#9467bd'}
    for rec in res['w1_probes']:
        ax.plot([rec['t'] / HOUR], [0], marker='|' if rec['outcome'] == 'ok' else 'x',
                color=w1.get(rec['outcome'], 'black'), markersize=10, markeredgewidth=1.5, linestyle='none')
    ax.set_yticks([0, 1])
    ax.set_yticklabels(['A: watchdog 1\'s\nchat request', 'B: the verdict'], fontsize=8.5)
    ax.set_ylim(-0.7, 1.7)
    ax.set_title('each 5-minute check', fontsize=9.5, loc='left')
    ax.set_xlim(0, hours)
    ticks = list(range(0, int(hours) + 1, 2 if hours > 8 else 1))
    ax.set_xticks(ticks)
    ax.set_xticklabels(['%02d:00' % h for h in ticks])
    ax.set_xlabel('simulated time of day (compressed x%g: one simulated hour = %s of wall time)' % (
        res['scale']['factor'], span(HOUR / res['scale']['factor'])), fontsize=9)
    present = sorted(set(r['state'] for r in res['verdicts']), key=lambda s: list(STATE_COLOURS).index(s))
    handles = [Patch(color='#6baed6', label='running'),
               Patch(color='#fd8d3c', label='waiting (queued; in the hang: arrived, never scheduled)'),
               Patch(color='#999999', alpha=0.45, label='restarting (weights load, port closed)'),
               Patch(color='#d62728', alpha=0.2, label='the real hang, until restarted')]
    handles += [Line2D([], [], marker='v', color=c, linestyle='none', markersize=9, label='restart by %s' % by)
                for by, c in restart_style.items()]
    handles += [Line2D([], [], marker='v', color='white', markeredgecolor='black', linestyle='none', markersize=9,
                       label='black edge: a false restart (not hung)')]
    handles += [Line2D([], [], marker='|' if s in ('idle', 'busy') else 'D', color=STATE_COLOURS[s],
                       linestyle='none', markersize=9, markeredgewidth=1.5, label='verdict %s' % s) for s in present]
    handles += [Line2D([], [], marker='|', color='#2ca02c', linestyle='none', markeredgewidth=1.5,
                       label='chat request answered'),
                Line2D([], [], marker='x', color='#d62728', linestyle='none', label='chat request timed out (45 s)'),
                Line2D([], [], marker='x', color='#555555', linestyle='none', label='chat request refused (restarting)')]
    fig.legend(handles=handles, loc='upper center', bbox_to_anchor=(0.5, 0.035), ncol=4, fontsize=8.5, frameon=False)
    fig.savefig(path, dpi=110, bbox_inches='tight')
    plt.close(fig)


BEGIN, END = '<!-- replay-results:begin -->', '<!-- replay-results:end -->'


def update_doc(res, path, png_rel):
    with open(path) as handle:
        text = handle.read()
    if BEGIN not in text or END not in text:
        raise SystemExit('%s has no %s ... %s block' % (path, BEGIN, END))
    a_log = '\n'.join('| %s | %s | %s | %d | %s |' % (r['at_hhmm'], r['by'], 'yes' if r['hung'] else 'no',
                                                      r['in_flight'], r['reason']) for r in res['A']['restart_log'])
    b_log = '\n'.join('| %s | %s | %s | %d | %s |' % (r['at_hhmm'], r['by'], 'yes' if r['hung'] else 'no',
                                                      r['in_flight'], r['reason'][:160]) for r in res['B']['restart_log'])
    verdicts = ', '.join('%s %d' % (k, v) for k, v in sorted(res['B_verdicts'].items(), key=lambda kv: -kv[1]))
    targets = '\n'.join('- %s: **%s**' % (name, 'met' if ok else 'MISSED') for name, ok in res['targets'].items())
    m = res['machine']
    machine = ('The machine: %d cores, load average (1 min) %.1f at the start, %.1f on average, %.1f at most; the '
               'collection\'s `/metrics` reads took %s ms (median), %s ms (p95), %s ms (max) of wall time against a '
               'scaled `metrics_timeout` of %s ms; %d of %d took longer.' % (
                   m['cores'], m['load_1min_at_start'], m['load_1min_mean'], m['load_1min_max'],
                   m['metrics_read_ms']['median'], m['metrics_read_ms']['p95'], m['metrics_read_ms']['max'],
                   m['metrics_read_ms']['timeout_ms'], m['metrics_read_ms']['over_timeout'],
                   m['metrics_read_ms']['count']))
    if m['disturbed']:
        unknown = res['B_verdicts'].get('unknown', 0)
        machine += ('\n\nOther work on the machine reached this run (%s). %s' % (
            '; '.join(m['disturbed']),
            ('It caused %d `unknown` verdict(s) of the collection (a slow `/metrics` is never taken for stuck); '
             'a quiet machine gives none.' % unknown) if unknown else
            'No verdict of the collection was `unknown`.'))
    met = []
    for chk in res['B']['busy_checks']:
        groups = {}
        for t in chk['traffic']:
            groups.setdefault(t['when'], []).append(t)
        parts = []
        for when, items in groups.items():
            ms = sorted(t.get('reached_server_ms_before_probe') for t in items
                        if t.get('reached_server_ms_before_probe') is not None)
            kinds = sorted(set(t['kind'] for t in items))
            parts.append('%d %s request%s reached the server %s ms before the probe, %s' % (
                len(items), '/'.join(kinds), '' if len(items) == 1 else 's',
                ('%s-%s' % (ms[0], ms[-1]) if ms and ms[0] != ms[-1] else ms[0] if ms else '?'), when))
        met.append('- %s%s: the read that showed nothing in flight reached the server %s ms (wall) before the probe; '
                   '%s. %s' % (chk['sent'], ' (the check right after the restart)' if chk.get('after_restart') else '',
                               chk['read_to_probe_ms'], '; '.join(parts),
                               'Counted as sent to a busy server.' if chk['busy_at_probe'] else 'Not counted.'))
    if met:
        met = ['', 'The collection\'s probes that met traffic (each read before them showed nothing in flight):',
               ''] + met
    role = ''
    if res['role']:
        role = ('\nThe real role, once, at the moment of the hang (`ansible-playbook playbooks/watchdog.yml`, '
                '`command` restart method, the role\'s defaults, real time, %s s): `%s`; the simulated server '
                'was restarted %d time(s).\n' % (res['role']['seconds'], res['role']['line'], res['role']['restarts']))
    block = '\n'.join([
        BEGIN,
        '',
        'Measured %s on commit %s: seed %s, x%g (1 simulated day in %s), %s of wall time for the whole run; a '
        'request decoded at a median %.1f tokens/s (simulated; target %.0f).' % (
            res['measured_at'], res.get('code', 'unknown'), res['seed'], res['scale']['factor'], span(res['day_seconds'] / res['scale']['factor']),
            span(res['wall_seconds']), res['decode_tokens_per_second_median'] or 0, DECODE_TPS),
        '',
        machine,
        '',
        table(res),
        '',
        'The collection\'s verdicts over the day: %s.' % verdicts,
    ] + met + [
        '',
        targets,
        role,
        '![The replayed day: load, restarts and verdicts](%s)' % png_rel,
        '',
        'Restarts of A:',
        '',
        '| time | by | hung? | in flight | why |',
        '|---|---|---|---|---|',
        a_log or '| - | | | | |',
        '',
        'Restarts of B:',
        '',
        '| time | by | hung? | in flight | why |',
        '|---|---|---|---|---|',
        b_log or '| - | | | | |',
        '',
        END,
    ])
    text = text[:text.index(BEGIN)] + block + text[text.index(END) + len(END):]
    with open(path, 'w') as handle:
        handle.write(text)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--quick', action='store_true',
                        help='a 6-hour day (about 75 s), for a smoke run; writes nothing into docs/')
    parser.add_argument('--factor', type=float, default=300.0, help='simulated seconds per wall second (300)')
    parser.add_argument('--seed', type=int, default=5, help='the traffic seed (5)')
    parser.add_argument('--step-rate', type=float, default=1000.0,
                        help='simulator engine steps per wall second asked for (the measured rate is used)')
    parser.add_argument('--port-range', default='23000-23999', help='loopback ports for the simulator')
    parser.add_argument('--json', help='write every result and event here')
    parser.add_argument('--png', help='the picture (default docs/images/incident-replay.png, not with --quick)')
    parser.add_argument('--no-docs', action='store_true', help='do not write docs/incident.md and its picture')
    parser.add_argument('--role', action='store_true',
                        help='also run the real role (ansible-playbook) once on a server in the state of the hang')
    parser.add_argument('--strict', action='store_true', help='exit 1 when the collection misses a target')
    parser.add_argument('--from-json', metavar='PATH',
                        help='do not replay: redraw the picture and the doc table from a saved --json result')
    parser.add_argument('--quiet', action='store_true')
    args = parser.parse_args()
    if args.from_json:
        with open(args.from_json) as handle:
            res = json.load(handle)
        args.quick = res['quick']
    docs = not args.quick and not args.no_docs
    png = args.png or (os.path.join(REPO, 'docs', 'images', 'incident-replay.png') if docs else None)
    if not args.from_json:
        if not args.quiet:
            print('replaying a %s day at x%g ...' % ('6-hour' if args.quick else '24-hour', args.factor),
                  file=sys.stderr)
        res = replay(args)
    print(report(res))
    print('run time %s (wall)' % span(res['wall_seconds']))
    if png:
        os.makedirs(os.path.dirname(os.path.abspath(png)), exist_ok=True)
        plot(res, png)
        print('picture: %s' % png)
    if docs:
        doc = os.path.join(REPO, 'docs', 'incident.md')
        update_doc(res, doc, os.path.relpath(png, os.path.dirname(doc)))
        print('table: %s' % doc)
    if args.json and not args.from_json:
        with open(args.json, 'w') as handle:
            json.dump(res, handle, indent=1, default=str)
        print('json: %s' % args.json)
    missed = [name for name, ok in res['targets'].items() if not ok and name.startswith('B')]
    return 1 if (args.strict and missed) else 0


if __name__ == '__main__':
    sys.exit(main())
