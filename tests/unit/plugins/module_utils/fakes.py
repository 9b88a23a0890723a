"""Test doubles for the verdict: generated expositions and a scripted server."""

import json
import os

from ansible_collections.modelops.vllm.plugins.module_utils._freeze import Freeze
from ansible_collections.modelops.vllm.plugins.module_utils._types import Fetched

from tests.support.paths import FIXTURES


def timed(server, clock):
    """The server's probes take time on this clock (a FakeServer's ``clock``)."""
    if getattr(server, 'clock', False) is None:
        server.clock = clock
    return server


def two_waits():
    """A freeze limit that this check's own two waits reach (1 s): the rule within one check, as it was before
    freeze_limit. The verdict table's rows are about what one check sees; the limit itself (300 s by default,
    across checks) is tested in test_freeze.py."""
    return Freeze(limit=1.0)


def capture(name):
    with open(os.path.join(FIXTURES, name)) as handle:
        return handle.read()


def engine(running=0, waiting=0, steps=0, step_tokens=0, gen=0, prompt=0, success=0, kv=0.0, awake=1,
           deferred=0, flops=None, preempt=None, aborted=0):
    return dict(running=running, waiting=waiting, steps=steps, step_tokens=step_tokens, gen=gen, prompt=prompt,
                success=success, kv=kv, awake=awake, deferred=deferred, flops=flops, preempt=preempt, aborted=aborted)


def expo(engines=None, start=1796004614.13, created=1796004644.44, model='tiny', v0=False, vllm=True,
         weight_updates=None):
    """A vLLM-0.32-shaped exposition for the given per-engine numbers.

    ``start``/``created`` None leave those series out (multiprocess mode).
    ``v0`` writes the V0 series names and no engine label.
    ``weight_updates``: {operation: value} of vllm:rl_weight_update_operations_in_flight (0.32's RL API).
    """
    engines = engines if engines is not None else {'0': engine()}
    out = ['# HELP python_info Python platform information', '# TYPE python_info gauge',
           'python_info{implementation="CPython",version="3.11.7"} 1.0']
    if start is not None:
        out += ['# TYPE process_start_time_seconds gauge', 'process_start_time_seconds %r' % start]
    if not vllm:
        return '\n'.join(out) + '\n'

    def lab(key, extra=''):
        base = 'model_name="%s"' % model if v0 else 'engine="%s",model_name="%s"' % (key, model)
        return '{%s%s}' % (base, extra)

    def series(name, kind, field, extra='', fmt=float):
        out.append('# TYPE %s %s' % (name, kind))
        for key, e in sorted(engines.items()):
            if e.get(field) is None:
                continue
            out.append('%s%s %r' % (name, lab(key, extra), fmt(e[field])))

    series('vllm:num_requests_running', 'gauge', 'running')
    series('vllm:num_requests_waiting', 'gauge', 'waiting')
    if v0:
        series('vllm:num_requests_swapped', 'gauge', 'deferred')
        series('vllm:gpu_cache_usage_perc', 'gauge', 'kv')
    else:
        out.append('# TYPE vllm:num_requests_waiting_by_reason gauge')
        for key, e in sorted(engines.items()):
            out.append('vllm:num_requests_waiting_by_reason%s %r'
                       % (lab(key, ',reason="capacity"'), float(e['waiting'] - e['deferred'])))
            out.append('vllm:num_requests_waiting_by_reason%s %r' % (lab(key, ',reason="deferred"'), float(e['deferred'])))
        out.append('# TYPE vllm:engine_sleep_state gauge')
        for key, e in sorted(engines.items()):
            out.append('vllm:engine_sleep_state%s %r' % (lab(key, ',sleep_state="awake"'), float(e['awake'])))
            asleep = float(1 - e['awake'])
            out.append('vllm:engine_sleep_state%s %r' % (lab(key, ',sleep_state="weights_offloaded"'), asleep))
        series('vllm:kv_cache_usage_perc', 'gauge', 'kv')
    if weight_updates is not None:
        out.append('# TYPE vllm:rl_weight_update_operations_in_flight gauge')
        for operation, value in sorted(weight_updates.items()):
            out.append('vllm:rl_weight_update_operations_in_flight{operation="%s"} %r' % (operation, float(value)))
    for name, field in (('vllm:generation_tokens', 'gen'), ('vllm:prompt_tokens', 'prompt'),
                        ('vllm:num_preemptions', 'preempt'), ('vllm:estimated_flops_per_gpu', 'flops')):
        series(name + '_total', 'counter', field)
        if created is not None and not v0:
            out.append('# TYPE %s_created gauge' % name)
            for key in sorted(engines):
                out.append('%s_created%s %r' % (name, lab(key), created))
    out.append('# TYPE vllm:request_success_total counter')
    for key, e in sorted(engines.items()):
        out.append('vllm:request_success_total%s %r' % (lab(key, ',finished_reason="stop"'), float(e['success'])))
        out.append('vllm:request_success_total%s 0.0' % lab(key, ',finished_reason="length"'))
        out.append('vllm:request_success_total%s %r' % (lab(key, ',finished_reason="abort"'), float(e.get('aborted') or 0)))
    out.append('# TYPE vllm:iteration_tokens_total histogram')
    for key, e in sorted(engines.items()):
        out.append('vllm:iteration_tokens_total_bucket%s %r' % (lab(key, ',le="+Inf"'), float(e['steps'])))
        out.append('vllm:iteration_tokens_total_count%s %r' % (lab(key), float(e['steps'])))
        out.append('vllm:iteration_tokens_total_sum%s %r' % (lab(key), float(e['step_tokens'])))
    return '\n'.join(out) + '\n'


def ok(text, seconds=0.005):
    return Fetched(status=200, text=text, seconds=seconds)


def completion(tokens=1, seconds=0.04):
    body = {'id': 'cmpl-1', 'object': 'text_completion', 'model': 'tiny',
            'choices': [{'index': 0, 'text': ' a', 'finish_reason': 'length'}],
            'usage': {'prompt_tokens': 2, 'completion_tokens': tokens, 'total_tokens': 2 + tokens}}
    return Fetched(status=200, text=json.dumps(body), seconds=seconds)


NO_ANSWER = Fetched(error='timeout', message='no complete answer in 30.0 s', seconds=30.0)
REFUSED = Fetched(error='refused', message='connection refused', seconds=0.001)
HEALTH_OK = Fetched(status=200, text='', seconds=0.002)
VERSION = Fetched(status=200, text='{"version":"0.32.0"}', seconds=0.002)
NOT_FOUND = Fetched(status=404, text='{"detail":"Not Found"}', seconds=0.001)
PAUSED = Fetched(status=200, text='{"is_paused":true}', seconds=0.002)
NOT_PAUSED = Fetched(status=200, text='{"is_paused":false}', seconds=0.002)
MODELS = Fetched(status=200, text=json.dumps({'object': 'list', 'data': [{'id': 'tiny', 'max_model_len': 32768}]}),
                 seconds=0.002)


class Script(object):
    """Hands out scripted answers in order; the last one repeats."""

    def __init__(self, answers):
        self.answers = list(answers) if isinstance(answers, (list, tuple)) else [answers]
        self.calls = 0

    def next(self):
        answer = self.answers[min(self.calls, len(self.answers) - 1)]
        self.calls += 1
        return answer


class FakeServer(object):
    """A scripted vLLM server for Judge; records every call."""

    def __init__(self, metrics, probe=None, health=HEALTH_OK, version=VERSION, models=MODELS, is_paused=NOT_FOUND):
        self.script = {
            'is_paused': Script(is_paused),
            'metrics': Script([ok(m) if isinstance(m, str) else m for m in
                               (metrics if isinstance(metrics, list) else [metrics])]),
            'probe': Script(probe if probe is not None else completion()),
            'health': Script(health),
            'version': Script(version),
            'models': Script(models),
        }
        self.log = []
        # With a clock (the judge helpers set theirs), a probe takes the time its answer says it took: a probe
        # that got no answer waited its whole timeout.
        self.clock = None

    def _answer(self, what):
        self.log.append(what)
        return self.script[what].next()

    def metrics(self):
        return self._answer('metrics')

    def health(self):
        return self._answer('health')

    def version(self):
        return self._answer('version')

    def models(self):
        return self._answer('models')

    def is_paused(self):
        return self._answer('is_paused')

    def probe(self, model):
        self.log.append('probe:%s' % model)
        answer = self.script['probe'].next()
        if self.clock is not None and answer.seconds:
            self.clock.now += answer.seconds
        return answer

    def count(self, what):
        return sum(1 for entry in self.log if entry.split(':')[0] == what)


class Clock(object):
    """A clock that only moves when the judge sleeps (and a little per read)."""

    def __init__(self, start=1000.0):
        self.now = start
        self.sleeps = []

    def __call__(self):
        return self.now

    def sleep(self, seconds):
        self.sleeps.append(seconds)
        self.now += seconds
