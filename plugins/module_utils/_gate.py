# -*- coding: utf-8 -*-
# Copyright (c) modelops.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

"""One run of the watchdog gate on one host: the lock, the history, the evidence; the decisions are _decide's.

Private to this collection. ``Gate(params, check_mode, run, clock)`` takes the module's parameters (the
settings of ``_decide.DEFAULTS`` and the gate's own: ``state_dir``, ``instances``, ``paused``,
``lock_timeout``, ``status_timeout``, ``log_lines``, ``history_max_bytes``, ``kernel_log`` and the
evidence's tools), and two things from outside, so that a test can give its own:

* ``run(argv, timeout, keep)``: runs a command, returns ``(rc, stdout, stderr)`` (``_service.run_argv``,
  rc None when it could not run). The service manager is asked through it as ``service_status`` asks
  (``run(argv)``, bound to ``status_timeout``), and the evidence's tools and the service's log are run
  through it;
* ``clock()``: seconds since the epoch (``time.time``), for the decisions, the records and their stamps.

Its modes return what they decided and keep nothing else: ``run(items, verdicts, missing_why)`` (one
result per instance), ``record_failure(name, error)`` (the sentence), ``escalate(name, why)`` (action,
reason, history); ``results_from_histories(state_dir, names)`` gives the last results the histories keep
(for the textfile after a step). Nothing is written in check mode.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import time

from ansible_collections.modelops.vllm.plugins.module_utils import _evidence
from ansible_collections.modelops.vllm.plugins.module_utils import _host
from ansible_collections.modelops.vllm.plugins.module_utils import _ranks
from ansible_collections.modelops.vllm.plugins.module_utils import _statedir as statedir
from ansible_collections.modelops.vllm.plugins.module_utils._redact import forms, redact
from ansible_collections.modelops.vllm.plugins.module_utils._types import (
    FAIL, FAILED, NONE, REBOOT, RESTART, RESTARTABLE, SERVING, STATES, parse_started_at)
from ansible_collections.modelops.vllm.plugins.module_utils._decide import (
    DEFAULTS,
    decide,
    decide_escalation,
    load_history,
)
from ansible_collections.modelops.vllm.plugins.module_utils._service import (
    MAX_OUTPUT,
    logs_command,
    lookup,
    planned_commands,
    published_ports,
    run_argv,
    service_status,
    target,
)

# The verdict's numbers kept in the verdict history and returned to the role.
VERDICT_KEYS = ('state', 'reason', 'line', 'url', 'running', 'waiting', 'kv_cache_usage', 'steps_per_second',
                'generation_tokens_per_second', 'restarted', 'version', 'model', 'stuck_engines', 'frozen_for', 'error',
                'checked_at')


def _pause_note(paths):
    """'pause file PATH: first line' when a pause file (of any kind) exists, else None."""
    for path in (paths['instance_paused'], paths['paused']):
        if statedir.exists(path):
            first = statedir.first_line(path)
            return 'pause file %s%s' % (path, ': %s' % first if first else '')
    return None


def _reads(verdict):
    reads = ((verdict or {}).get('evidence') or {}).get('reads') or []
    return [read for read in reads if isinstance(read, dict)] if isinstance(reads, list) else []


def _process_start(verdict):
    for read in reversed(_reads(verdict)):
        if read.get('process_start_time') is not None:
            return read['process_start_time']
    return None


def _last_read(verdict):
    """The last read of the check (its start time and per-engine counters), so that the restart can tell the process
    that answers after it from this one (modelops.vllm.restart's old_reading)."""
    reads = _reads(verdict)
    if not reads:
        return None
    last = reads[-1]
    engines = last.get('engines') if isinstance(last.get('engines'), dict) else {}
    return {'process_start_time': last.get('process_start_time'),
            'engines': dict((key, {'counters': (numbers or {}).get('counters') or {}})
                            for key, numbers in engines.items() if isinstance(numbers, dict))}


def _count_step(hist, action):
    """Counts that only grow, for the node_exporter textfile (the lists of the history keep the window only)."""
    for key, step in (('restarts_total', RESTART), ('reboots_total', REBOOT)):
        total = hist.get(key)
        total = total if isinstance(total, int) and not isinstance(total, bool) and total >= 0 else 0
        hist[key] = total + (1 if action == step else 0)


def _failed_restart(text):
    if text is None:
        return None
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):
        data = None
    if not isinstance(data, dict):
        data = {'error': 'the record of a failed restart cannot be read'}
    return data


def _clip(text, limit):
    text = ' '.join(str(text).split())
    return text if len(text) <= limit else text[:limit - 3] + '...'


def _stamp(now, fmt='%Y-%m-%dT%H:%M:%SZ'):
    return time.strftime(fmt, time.gmtime(now))


class Gate(object):
    """One run of the gate on one host (this file's docstring says what ``params``, ``run`` and ``clock`` are)."""

    def __init__(self, params, check_mode=False, run=run_argv, clock=time.time):
        self.p = params
        self.settings = dict(((key, self.p[key]) for key in DEFAULTS), setting_prefix=self.p.get('setting_prefix') or '')
        self.check_mode = check_mode
        self.runner = run
        self.clock = clock
        # Every spelling of the configured secrets: masked (with vLLM's own spellings of a key) in all that is
        # kept or returned.
        self.spellings = forms([item.get('api_key') for item in self.p['instances'] or []])
        self._kernel = None
        # What the hosts of the instances' other ranks said this run (an instance across hosts), by instance.
        self.ranks = {}
        for report in _ranks.reports(self.p.get('ranks')):
            self.ranks.setdefault(report['instance'], []).append(report)

    def redact(self, value):
        return redact(value, self.spellings)

    def run_cmd(self, argv):
        """The runner as ``service_status`` takes it: ``run(argv) -> (rc, stdout, stderr)``."""
        return self.runner(argv, timeout=self.p['status_timeout'], keep=MAX_OUTPUT)

    def service_of(self, item, state, always=False):
        """What the service manager says: asked for a stuck or down instance (or ``always``, for the evidence)."""
        if item.get('given_service') is not None:
            return item['given_service']
        if state not in RESTARTABLE and not always:
            return {}
        return service_status(self.run_cmd, item['restart_method'], item.get('service'),
                              item.get('compose_project_dir'), item.get('status_command'))

    def kernel(self):
        """The kernel log's lines that matter, read once per gate run (only for a stuck or down instance)."""
        if self._kernel is None:
            path = self.p['kernel_log']
            self._kernel = _host.read_kernel_log(path, timeout=10.0) if path else {'error': 'off'}
        return self._kernel

    def processes(self, item, service):
        """(main pid, the service's processes, how they were found, or why none are read). Only processes proven to be
        the service's are read (a stack dump pauses the process it reads): the tree of the main process the service
        manager names (systemd's MainPID, the container's pid). Without one, none; for the ``command`` method, which
        names no process, the processes that listen on the URL's port only when the inventory says that the URL is
        the service (``assume_url_is_service``)."""
        pid = service.get('main_pid')
        method = lookup(item['restart_method'])
        if pid:
            how = method.main_pid if method is not None and method.main_pid else '?'
            return pid, _host.tree(pid), how
        if method is None or method.main_pid is not None:
            return None, [], ('none: the service manager names no main process of %s (%s), and only processes proven to '
                              'be the service\'s are read; what listens on the URL\'s port is no proof'
                              % (target(item['restart_method'], item.get('service'), item.get('compose_project_dir')),
                                 'it does not run' if service.get('running') is False else 'its main process is 0'
                                 if service else 'not asked'))
        if not item.get('assume_url_is_service'):
            return None, [], ('none: the %s method names no process of what it restarts, and the inventory does not '
                              'say that the URL is the service (%sassume_url_is_service)'
                              % (item['restart_method'], self.p.get('setting_prefix') or ''))
        host, port = _host.url_endpoint(item.get('url'))
        if not port:
            return None, [], 'none: the URL names no port'
        listening = _host.listener_pids(port, _host.addresses_of(host))
        roots = [p for p in listening if (_host.proc_stat(p) or (0, ''))[0] not in listening]
        pids = []
        for root in roots[:4]:
            pids.extend(p for p in _host.tree(root) if p not in pids)
        return None, pids, ('the processes that listen on the URL\'s port %s, which the inventory says is the service '
                            '(%sassume_url_is_service)' % (port, self.p.get('setting_prefix') or ''))

    def url_proof(self, item, service):
        """What shows (or not) that what a restart acts on (the unit, the container) serves the URL: the service's
        processes listen on the URL's address and port, or the container publishes that port; and what listens there
        instead (see _decide.service_evidence)."""
        method = lookup(item['restart_method'])
        proof = {'default_url': bool(item.get('url_is_default')), 'listens': None,
                 'assumed': bool(item.get('assume_url_is_service')),
                 'can_prove': method is not None and method.main_pid is not None,
                 'unit': target(item['restart_method'], item.get('service'), item.get('compose_project_dir'),
                                item.get('restart_command'))}
        if service.get('exists') is False:
            proof['exists'] = False
        host, port = _host.url_endpoint(item.get('url'))
        if not port:
            proof['why'] = 'the URL names no port'
            return proof
        addresses = _host.addresses_of(host)
        proof['endpoint'] = _host.endpoint(addresses[0] if addresses else host, port)
        pid = service.get('main_pid')
        pids = _host.tree(pid) if pid else []
        holders = [p for p in _host.listener_pids(port, addresses) if p not in pids]
        roots = [p for p in holders if (_host.proc_stat(p) or (0, ''))[0] not in holders]
        if roots:
            proof['held_by'] = ', '.join(_host.describe(p) for p in roots[:3])
        if not proof['can_prove']:
            proof['why'] = 'the %s method names no process of what it restarts' % item['restart_method']
            return proof
        if not pid:
            proof['why'] = 'the service manager names no main process of it (%s)' % (
                'it does not run' if service.get('running') is False else 'its main process is 0')
            return proof
        if not pids:
            proof['why'] = 'its main process %d is not there' % pid
            return proof
        found, same = _host.listeners(pids)
        proof['process'] = 'its main %s' % _host.describe(pid)
        proof['listening_on'] = sorted(set(_host.endpoint(f['address'], f['port']) for f in found))[:5]
        if same is not True:
            proof['listening_on'] = []
            if same is False and item['restart_method'] in ('docker', 'compose'):
                # A container with a network of its own: the host's port is the one it publishes.
                published = published_ports(self.run_cmd, service.get('container') or item.get('service'))
                if published is not None:
                    proof['published'] = sorted(set('%s -> %s' % (_host.endpoint(a, p), inner)
                                                    for a, p, inner in published))[:5]
                    proof['listens'] = any(p == port and _host.matches(a, addresses) for a, p, inner in published)
                    proof['listening_on'] = sorted(set(_host.endpoint(a, p) for a, p, inner in published))[:5]
                    return proof
            proof['why'] = ('%s runs in a network namespace of its own (a container): its ports are not the URL\'s'
                            % proof['process']) if same is False else 'its network namespace cannot be read'
            return proof
        proof['listens'] = any(f['port'] == port and _host.matches(f['address'], addresses) for f in found)
        return proof

    def one(self, item, verdict):
        name = item['name']
        paths = statedir.paths(self.p['state_dir'], name)
        verdict = verdict if isinstance(verdict, dict) else {}
        state = verdict.get('state') if verdict.get('state') in STATES else 'unknown'
        ranks = self.ranks.get(name) or []
        # An instance across hosts: the head's verdict, changed only by what its other ranks show (_ranks).
        state, reason = _ranks.instance_verdict(state, str(verdict.get('reason') or ''), ranks)
        out = {'name': name, 'state': state, 'reason': reason[:1000],
               'verdict': dict((k, verdict.get(k)) for k in VERDICT_KEYS if k in verdict), 'service': {},
               'paused': False, 'evidence_file': None, 'history_file': paths['history'], 'waited_for_lock': 0.0,
               'restarts_in_window': 0, 'budget_left': None, 'cooldown': 0.0, 'uptime': None}
        if verdict.get('error'):
            out.update(action=FAIL, decision='the check cannot run as configured: %s' % str(verdict['error'])[:500])
            return self.finish(item, out, paths, None)
        if item.get('kind') == 'proxy':
            out.update(action=NONE, decision='a proxy is checked by GET /v1/models only and never restarted by this '
                                             'role; watch its backends directly')
            return self.finish(item, out, paths, None)
        service = _ranks.combined_service(self.service_of(item, state), ranks)
        out['service'] = service
        process_start = item.get('process_start_time') or _process_start(verdict)
        out['verdict']['process_start_time'] = process_start
        out['verdict']['last_read'] = _last_read(verdict)
        fd = None
        try:
            if not self.check_mode or statedir.exists(paths['lock']):
                fd = statedir.open_lock(paths['lock'])
                waited = statedir.lock(fd, self.p['lock_timeout'])
                if waited is None:
                    out.update(action=FAIL, decision='another watchdog run holds %s for more than %s s'
                               % (paths['lock'], self.p['lock_timeout']))
                    return self.finish(item, out, paths, None)
                out['waited_for_lock'] = round(waited, 3)
            # The pause is read under the lock: a rollout that pauses the watchdog and then waits for
            # this lock knows that no restart is decided after its pause.
            pause_note = _pause_note(paths)
            paused = self.p['paused'] or pause_note is not None
            history, damage = load_history(statedir.read_text(paths['history']))
            if damage:
                out.update(action=FAIL, paused=paused,
                           decision='the restart history %s cannot be trusted (%s): a human must look; the '
                                    'watchdog does not restart without it. Move it away to start a fresh restart '
                                    'budget' % (paths['history'], damage))
                return self.finish(item, out, paths, None)
            failed = _failed_restart(statedir.read_text(paths['failed']))
            proof = kernel = None
            if state in RESTARTABLE:
                # Before any restart: what shows that what it acts on serves the URL the check judged.
                proof = {'given': True} if item.get('given_service') is not None else self.url_proof(item, service)
                out['url_proof'] = proof
                kernel = self.kernel().get('lines')
            decision = decide(state, service, history, self.clock(), self.settings, paused=paused,
                              process_start=process_start, failed_restart=failed, url=item.get('url'),
                              url_proof=proof, kernel=kernel)
            reason = decision['reason']
            if pause_note:
                reason += ' (%s)' % pause_note
            if failed and decision['action'] == FAIL:
                reason += '. When it serves again, or to let the watchdog try again, remove %s' % paths['failed']
            if decision['action'] == RESTART:
                out['commands'] = planned_commands(item['restart_method'], item.get('service'),
                                                   item.get('compose_project_dir'), item.get('restart_command'),
                                                   self.p.get('release_memory'))
                if self.check_mode:
                    reason += '; check mode: it would run %s' % out['commands']
            out['evidence_wanted'] = bool(decision.get('evidence'))
            out.update(action=decision['action'], decision=reason, paused=paused,
                       restarts_in_window=decision['restarts_in_window'], budget_left=decision['budget_left'],
                       cooldown=decision['cooldown'], uptime=decision['uptime'], history=decision['history'])
            hist = decision['history']
            hist['last_reason'] = out['reason'][:500]
            hist['last_action'] = decision['action']
            if decision.get('gpu_errors'):
                out['gpu_errors'] = decision['gpu_errors']
            _count_step(hist, decision['action'])
            if not self.check_mode:
                statedir.write_text(paths['history'], json.dumps(hist, indent=1, sort_keys=True) + '\n')
                if failed and state in SERVING:
                    statedir.remove(paths['failed'])
        finally:
            if fd is not None:
                os.close(fd)  # releases the lock, after the history is on disk
        return self.finish(item, out, paths, verdict)

    def finish(self, item, out, paths, verdict):
        """Append the verdict line, keep the evidence of a restart; nothing in check mode."""
        if self.check_mode:
            out.pop('evidence_wanted', None)
            return out
        record = {'time': _stamp(self.clock()), 'state': out['state'],
                  'reason': out['reason'][:500], 'action': out['action'], 'decision': out['decision'][:500]}
        for key in ('running', 'waiting', 'kv_cache_usage', 'steps_per_second', 'generation_tokens_per_second',
                    'frozen_for'):
            record[key] = out['verdict'].get(key)
        record['probe'] = ((verdict or {}).get('probe') or {}).get('outcome')
        try:
            statedir.append_line(paths['verdicts'], json.dumps(self.redact(record), sort_keys=True),
                                 max_bytes=self.p['history_max_bytes'])
        except (statedir.StateError, OSError) as exc:
            out['decision'] += ' (the verdict history could not be written: %s)' % exc
        asks_human = out['action'] == FAIL and (out.get('gpu_errors') or out.get('evidence_wanted'))
        if out['action'] in (RESTART, REBOOT) or asks_human:
            out['evidence_file'] = self.evidence(item, out, paths, verdict)
        out.pop('evidence_wanted', None)
        return out

    def evidence(self, item, out, paths, verdict):
        """Keep the evidence of the hang of ``item`` in the state directory: the file's path, or None."""
        argv = logs_command(item['restart_method'], item.get('service'), item.get('compose_project_dir'),
                            item.get('logs_command'), self.p['log_lines'])
        logs = []
        if argv:
            # Up to 2 KB per line of the log kept.
            rc, stdout, stderr = self.runner(argv, timeout=self.p['status_timeout'], keep=2048 * self.p['log_lines'])
            logs = (stdout + stderr).splitlines()[-self.p['log_lines']:]
        # The hang itself, before anything is restarted: the stacks of vLLM's processes, the memory, the kernel's
        # lines since vLLM started, nvidia-smi (docs/gb10.md: what to attach to a vLLM bug report).
        if not out['service'] and item.get('restart_method'):
            # Asked now for an instance a human is to look at (unknown runs in a row): what the service manager says.
            out['service'] = self.service_of(item, out['state'], always=True)
        dummy, pids, how = self.processes(item, out['service'] or {})
        started = [t for t in (parse_started_at((out['service'] or {}).get('started_at')),
                               parse_started_at(out['verdict'].get('process_start_time'))) if t is not None]
        found = _evidence.collect(lambda argv, timeout: self.runner(argv, timeout=timeout, keep=_evidence.DUMP_BYTES),
                                  pids, self.p, since=max(started) if started else None, kernel=self.kernel()
                                  if self.p['kernel_log'] else None)
        found['processes_found_by'] = how
        if how.startswith('none: ') and found['stacks'].get('tool') and not found['stacks'].get('processes'):
            # Said where a human reads it: why there is no stack dump.
            found['stacks']['error'] = 'no stack dump: %s' % how[len('none: '):]
        evidence = {
            'host': os.uname()[1], 'instance': out['name'], 'url': item.get('url') or out['verdict'].get('url'),
            'restart_method': item['restart_method'], 'verdict': verdict, 'service': out['service'],
            'decision': dict((k, v) for k, v in out.items() if k not in ('verdict', 'history')),
            'history': out.get('history'),
            'logs': logs,
            'hang': found,
        }
        out['evidence'] = _evidence.summary(found)
        if out.get('evidence_wanted'):
            # A human is asked to look: the line says what the service's log ends with (a restart's line does not).
            out['evidence'] += ', %d line(s) of its log, the last: %s' % (len(logs), _clip(logs[-1], 160)) \
                if logs else ', no log'
        # A line of the history that was cut (a crash, a full disk) is named, never taken for a verdict.
        evidence['recent_verdicts'], damaged = statedir.tail_json(paths['verdicts'], 20)
        if damaged:
            evidence['damaged_verdict_lines'] = damaged
        try:
            statedir.check_dir(paths['evidence'])
            stamp = _stamp(self.clock(), '%Y%m%dT%H%M%SZ')
            path = os.path.join(paths['evidence'], '%s-%s.json' % (out['name'], stamp))
            statedir.write_text(path, json.dumps(self.redact(evidence), indent=1, sort_keys=True, default=str) + '\n')
            return path
        except (statedir.StateError, OSError) as exc:
            out['decision'] += ' (the evidence could not be kept: %s)' % exc
            return None

    def run(self, items, verdicts, missing_why):
        """One result per item, in order. ``verdicts``: by name, for the items that carry none (a results file);
        ``missing_why``: the reason of an instance that has no verdict at all."""
        results = []
        for item in items:
            verdict = item.get('verdict')
            if verdict is None:
                verdict = verdicts.get(item['name']) or {
                    'state': 'unknown', 'reason': missing_why or 'the check gave no verdict for this instance'}
            # Masked on the way in: the history, the evidence and the result are made of it.
            verdict = self.redact(verdict)
            try:
                results.append(self.one(item, verdict))
            except (statedir.StateError, OSError) as exc:
                # One instance's trouble is that instance's failure, never the others'.
                results.append({'name': item['name'], 'state': (verdict or {}).get('state') or 'unknown',
                                'reason': str((verdict or {}).get('reason') or '')[:1000], 'verdict': {},
                                'action': FAIL, 'decision': 'the watchdog cannot use its state: %s' % exc,
                                'service': {}, 'paused': False, 'evidence_file': None, 'waited_for_lock': 0.0})
        return results

    def record_failure(self, name, error):
        """Record that the restart of ``name`` failed (the failed-restart record, and the outcome in its histories):
        the sentence that says so."""
        paths = statedir.paths(self.p['state_dir'], name)
        error = self.redact(error)[:1000]
        if not self.check_mode:
            statedir.write_text(paths['failed'], json.dumps({'at': self.clock(), 'error': error}) + '\n')
            self.record_outcome(name, FAILED, error)
        return ('the restart of %s failed (%s); recorded in %s: the host fails on every run until %s serves again or '
                'a human removes that file. A failed restart gives no start-up grace; it counts against the restart '
                'budget' % (name, error, paths['failed'], name))

    def record_outcome(self, name, outcome, why=''):
        """Record how the restart the gate decided for ``name`` ended, under its lock: ``outcome`` is the verdict after
        it (``idle``, ``busy``, ...) or ``failed`` (its command failed, the same process still answered, it was not
        ready), ``why`` the words. Kept in the restart history (the last step's ``outcome``, ``outcomes``; a failed one
        in ``failed_restarts``, so that it gives no grace) and as a line of the verdict history. The words."""
        p = self.p
        why = self.redact(str(why or ''))[:600]
        paths = statedir.paths(p['state_dir'], name)
        said = 'failed: %s' % why if outcome == FAILED else 'now %s%s' % (outcome, ' (%s)' % why if why else '')
        if self.check_mode:
            return said
        fd = statedir.open_lock(paths['lock'])
        try:
            if statedir.lock(fd, p['lock_timeout']) is None:
                return '%s (not recorded: another watchdog run holds %s)' % (said, paths['lock'])
            history, damage = load_history(statedir.read_text(paths['history']))
            if damage:
                return '%s (not recorded: the restart history %s cannot be trusted: %s)' % (
                    said, paths['history'], damage)
            step = history.get('last_step') if isinstance(history.get('last_step'), dict) else None
            ours = step is None or step.get('step') == RESTART  # a reboot's outcome is the reboot's (reboot.yml)
            at = step.get('at') if step and ours else None
            if at is None and ours and history['restarts']:
                at = history['restarts'][-1]
            if step is not None and ours:
                step.update(outcome=outcome, why=why[:300])
            if outcome == FAILED and at is not None:
                failed = [t for t in history.get('failed_restarts') or [] if isinstance(t, (int, float))]
                history['failed_restarts'] = sorted(set(failed + [at]))
            outcomes = history.get('outcomes') if isinstance(history.get('outcomes'), list) else []
            history['outcomes'] = (outcomes + [{'at': at, 'recorded': self.clock(), 'outcome': outcome,
                                                'why': why[:300]}])[-20:]
            statedir.write_text(paths['history'], json.dumps(history, indent=1, sort_keys=True) + '\n')
        finally:
            os.close(fd)
        record = {'time': _stamp(self.clock()), 'state': outcome if outcome != FAILED else history.get('last_state'),
                  'action': 'restart failed' if outcome == FAILED else 'restarted', 'outcome': said,
                  'reason': why, 'decision': 'the outcome of the restart decided %s' % _stamp(at) if at else '',
                  'step': True}
        try:
            statedir.append_line(paths['verdicts'], json.dumps(self.redact(record), sort_keys=True),
                                 max_bytes=p['history_max_bytes'])
        except (statedir.StateError, OSError):
            pass
        return said

    def escalate(self, name, why):
        """The step after a restart that was stopped because the memory did not come back: decided under the lock,
        recorded (the history, a verdict line, a failed-restart record when a human is next). (action, reason,
        history)."""
        p = self.p
        why = self.redact(why)[:600]
        paths = statedir.paths(p['state_dir'], name)
        fd = statedir.open_lock(paths['lock'])
        try:
            if statedir.lock(fd, p['lock_timeout']) is None:
                return FAIL, 'another watchdog run holds %s for more than %s s' % (paths['lock'], p['lock_timeout']), {}
            history, damage = load_history(statedir.read_text(paths['history']))
            if damage:
                return FAIL, '%s, and the restart history %s cannot be trusted (%s): a human must look' % (
                    why, paths['history'], damage), {}
            step = history.get('last_step') if isinstance(history.get('last_step'), dict) else {}
            stopped_at = step.get('at') if step.get('step') == RESTART else None
            decision = decide_escalation(history, self.clock(), self.settings, why)
            hist = decision['history']
            if decision['action'] == FAIL and stopped_at is not None:
                # The restart stopped vLLM and did not start it: it gives no start-up grace.
                failed = [t for t in hist.get('failed_restarts') or [] if isinstance(t, (int, float))]
                hist['failed_restarts'] = sorted(set(failed + [stopped_at]))
                if isinstance(hist.get('last_step'), dict) and hist['last_step'].get('at') == stopped_at:
                    hist['last_step'] = dict(hist['last_step'], outcome=FAILED, why=why[:300])
            hist['last_action'] = decision['action']
            hist['last_reason'] = decision['reason'][:500]
            _count_step(hist, decision['action'])
            if not self.check_mode:
                statedir.write_text(paths['history'], json.dumps(hist, indent=1, sort_keys=True) + '\n')
                if decision['action'] == FAIL:
                    statedir.write_text(paths['failed'], json.dumps({'at': self.clock(), 'error': why}) + '\n')
        finally:
            os.close(fd)
        if not self.check_mode:
            record = {'time': _stamp(self.clock()), 'state': hist.get('last_state'),
                      'reason': why, 'action': decision['action'], 'decision': decision['reason'][:500], 'step': True}
            try:
                statedir.append_line(paths['verdicts'], json.dumps(self.redact(record), sort_keys=True),
                                     max_bytes=p['history_max_bytes'])
            except (statedir.StateError, OSError):
                pass
        return decision['action'], decision['reason'], hist


def results_from_histories(state_dir, names):
    """The last result of each instance as its history keeps it (for the textfile when one instance took a step)."""
    out = []
    for name in names:
        try:
            history, dummy = load_history(statedir.read_text(statedir.paths(state_dir, name)['history']))
        except (statedir.StateError, OSError):
            history = None
        history = history or {}
        out.append({'name': name, 'state': history.get('last_state') or 'unknown',
                    'action': history.get('last_action') or 'none', 'history': history})
    return out
