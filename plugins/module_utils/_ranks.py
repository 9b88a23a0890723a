# -*- coding: utf-8 -*-
# Copyright (c) modelops.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""One vLLM instance across hosts (docs/multinode.md): its other ranks, and what they change in its verdict.

A model too large for one GB10 runs across two (or more): the head (node rank 0) runs the API server, ``/metrics``
and the one engine; every other node runs only workers (``vllm serve --headless --node-rank N``, or a Ray worker
node) and serves no HTTP at all. So the instance is judged once, from the head's ``/metrics``; what is asked of
each other rank is whether its host answers and whether its service runs. Pure functions, standard library only.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.modelops.vllm.plugins.module_utils._service import STOP_START_METHODS as RANK_METHODS
from ansible_collections.modelops.vllm.plugins.module_utils._types import SERVING, parse_started_at

# How the ranks are launched: vLLM's multiprocessing across nodes (--nnodes/--node-rank, --headless on the others)
# or Ray (ray start on each node, vllm serve --distributed-executor-backend ray on the head). Both start the head
# first and stop it first (docs/multinode.md says why).
LAUNCHES = ('nnodes', 'ray')
RANK_KEYS = ('host', 'service', 'restart_method', 'compose_project_dir')
# Sentences said at most of one instance's ranks (an inventory of a thousand wrong ranks is not a thousand lines).
MAX_PROBLEMS = 10


def _said(value):
    """A value as a sentence shows it: its repr, cut (it comes from the inventory, any size)."""
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + '...'


def ranks_of(instance):
    """The instance's other ranks, numbered from 1 in the order given, each with the instance's method, service and
    compose project directory unless it names its own. An instance without ranks gives []."""
    ranks = instance.get('ranks') or []
    out = []
    for index, rank in enumerate(ranks if isinstance(ranks, (list, tuple)) else []):
        rank = rank if isinstance(rank, dict) else {}
        one = {'rank': index + 1, 'instance': instance.get('name'), 'host': rank.get('host')}
        for key in ('service', 'restart_method', 'compose_project_dir'):
            one[key] = rank.get(key) if rank.get(key) not in (None, '') else instance.get(key)
        out.append(one)
    return out


STEP_KEYS = ('host', 'rank', 'restart_method', 'service', 'compose_project_dir')


def restart_steps(instance, head):
    """The order a restart of an instance across hosts runs in, each step {host, rank, restart_method, service,
    compose_project_dir} (the head is rank 0 on ``head``): ``stop``, the head first (its API server takes no more
    requests, and its exit ends the engine that drives every rank), then every other rank, the last first; ``start``,
    the head first (it hosts the rendezvous of the ranks, and a Ray head must run before its workers join), then every
    other rank in order. An instance without ranks: the head alone in each. The watchdog and the rollout both loop
    over these (their restart.yml and main.yml), so the order is written here only."""
    first = {'host': head, 'rank': 0, 'restart_method': instance.get('restart_method'),
             'service': instance.get('service') or '', 'compose_project_dir': instance.get('compose_project_dir') or ''}
    others = [dict((key, rank.get(key)) for key in STEP_KEYS) for rank in ranks_of(instance)]
    return {'stop': [first] + others[::-1], 'start': [first] + others}


def problems(instance, head=None, inventory=None):
    """What is wrong with an instance's ranks and launch, one sentence each (none for an instance without ranks)."""
    ranks, launch = instance.get('ranks'), instance.get('launch')
    if ranks in (None, '', []):
        if launch not in (None, ''):
            return ['launch %s is given without ranks: it says how the other ranks of an instance across hosts are '
                    'started, and there are none' % _said(launch)]
        return []
    if not isinstance(ranks, (list, tuple)):
        return ['ranks must be a list of the other nodes ({host, service}), got %s' % type(ranks).__name__]
    errors = []
    if launch not in LAUNCHES:
        errors.append('launch must be %s for an instance with ranks, got %s' % (' or '.join(LAUNCHES), _said(launch)))
    if instance.get('restart_method') not in RANK_METHODS:
        errors.append('an instance with ranks is stopped and started rank by rank: its restart_method must be %s, '
                      'got %s' % (', '.join(RANK_METHODS), _said(instance.get('restart_method'))))
    seen = []
    for index, rank in enumerate(ranks):
        where = 'rank %d' % (index + 1)
        if not isinstance(rank, dict):
            errors.append('%s must be a dict ({host, service}), got %s' % (where, type(rank).__name__))
            continue
        unknown = sorted(_said(k) for k in rank if k not in RANK_KEYS)
        if unknown:
            errors.append('%s: unknown key(s) %s (a rank takes %s)' % (where, ', '.join(unknown[:5]), ', '.join(RANK_KEYS)))
        wrong = sorted(k for k in ('service', 'restart_method', 'compose_project_dir')
                       if rank.get(k) is not None and not isinstance(rank.get(k), str))
        if wrong:
            errors.append('%s: %s must be a string' % (where, ', '.join(wrong)))
        host = rank.get('host')
        if not isinstance(host, str) or not host:
            errors.append('%s: host must be the inventory name of its host, got %s' % (where, _said(host)))
            continue
        if host == head:
            errors.append('%s: host %s is the head itself: a rank is another host' % (where, _said(host)[1:-1]))
        elif inventory is not None and host not in inventory:
            errors.append('%s: host %s is not a host of the inventory (the watchdog reaches it as one)'
                          % (where, _said(host)[1:-1]))
        if host in seen:
            errors.append('%s: host %s is listed twice' % (where, _said(host)[1:-1]))
        seen.append(host)
    for one in ranks_of(instance):
        if not one['service'] and one['restart_method'] in RANK_METHODS:
            errors.append('rank %d: service is needed (the unit, container or compose service of the rank)'
                          % one['rank'])
        if one['restart_method'] not in RANK_METHODS:
            errors.append('rank %d: restart_method must be %s, got %s'
                          % (one['rank'], ', '.join(RANK_METHODS), _said(one['restart_method'])))
        if one['restart_method'] == 'compose' and not one['compose_project_dir']:
            errors.append('rank %d: compose_project_dir is needed with the compose method' % one['rank'])
    if len(errors) > MAX_PROBLEMS:
        errors = errors[:MAX_PROBLEMS] + ['and %d more of its ranks\' problems' % (len(errors) - MAX_PROBLEMS)]
    return errors


def reports(results):
    """What each rank's host said this run, from the role's loop over the ranks (its registered ``results``): a list
    of {instance, rank, host, service, answered, running, started_at, status}. ``answered`` is False for a host that
    did not answer; ``running`` is True, False or None (the service manager could not say)."""
    out = []
    for result in results if isinstance(results, (list, tuple)) else []:
        if not isinstance(result, dict) or not isinstance(result.get('item'), dict):
            continue
        item = result['item']
        one = {'instance': item.get('instance'), 'rank': item.get('rank'), 'host': item.get('host'),
               'service': item.get('service'), 'answered': not result.get('unreachable'), 'running': None,
               'started_at': None, 'status': ''}
        if result.get('unreachable'):
            one['status'] = 'the host did not answer: %s' % str(result.get('msg') or '?')[:200]
        elif result.get('failed') or result.get('skipped'):
            one['status'] = 'its state could not be read: %s' % str(result.get('msg') or '?')[:200]
        else:
            running = result.get('running')
            one['running'] = running if isinstance(running, bool) else None
            one['started_at'] = result.get('started_at')
            one['status'] = str(result.get('status') or '')[:200]
        out.append(one)
    return out


def _who(rank):
    return 'rank %s (%s, %s)' % (rank.get('rank'), rank.get('host'), rank.get('service') or '?')


def instance_verdict(state, reason, ranks):
    """(state, reason) of the instance: the head's verdict, changed only by what its ranks show.

    A verdict that serves (the verdict table's column: a probe answered or counters moved, so a step went through every
    rank; or the head paused or asleep on purpose) stands, and a rank that is said not to run is only named (the
    inventory may name another service than the one that serves). Any other verdict of the head is ``down`` when a
    rank's service does not run or its host did not answer: the instance cannot serve without it."""
    if not ranks:
        return state, reason
    missing = [r for r in ranks if not r.get('answered') or r.get('running') is False]
    if not missing:
        return state, reason
    words = '; '.join('%s: %s' % (_who(r), 'not running (%s)' % (r.get('status') or 'stopped')
                                  if r.get('answered') else r.get('status')) for r in missing)
    if state in SERVING:
        return state, '%s (yet %s)' % (reason, words)
    return 'down', '%s, so the instance cannot serve (the head: %s)' % (words, reason or state)


def combined_service(head, ranks):
    """The instance's service as the decision reads it: running only when the head and every rank run (None when any
    cannot be told and none is known to be stopped), started at the latest start of them all (the start-up grace
    counts from it), the head's main process. A head whose service was not asked (a verdict that restarts nothing)
    stays unasked; the ranks are listed either way."""
    combined = dict(head or {})
    if not ranks:
        return combined
    listed = [dict((k, r.get(k)) for k in ('rank', 'host', 'service', 'answered', 'running', 'started_at', 'status'))
              for r in ranks]
    if not combined:
        return {'ranks': listed}
    runs = [combined.get('running')] + [r.get('running') if r.get('answered') else None for r in ranks]
    combined['running'] = False if False in runs else (None if None in runs else True)
    starts = [parse_started_at(s) for s in [combined.get('started_at')] + [r.get('started_at') for r in ranks]]
    if combined['running']:
        # The latest start of them all; one that cannot be told makes the instance's unknown (a down instance is then
        # not restarted: it may still be starting).
        combined['started_at'] = max(starts) if None not in starts else None
    not_running = [r for r in ranks if not r.get('answered') or r.get('running') is not True]
    if not_running:
        combined['status'] = '; '.join('%s: %s' % (_who(r), r.get('status') or 'not running') for r in not_running)
    combined['ranks'] = listed
    return combined
