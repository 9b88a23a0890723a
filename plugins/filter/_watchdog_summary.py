# -*- coding: utf-8 -*-
# Copyright (c) modelops.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r'''
name: _watchdog_summary
short_description: Internal - Summarize the results of the modelops.vllm.watchdog role over a fleet
version_added: 1.0.0
author: modelops.vllm maintainers (@modelops)
description:
  - Internal to the P(modelops.vllm.watchdog#role) role, not an interface of the collection; it may change or go in any
    release.
  - Takes the C(vllm_watchdog_results) of every host (flattened into one list) and returns the counts per verdict,
    the restarted, failed and unreachable host/instance pairs, one line per host and instance, and a headline.
  - A host that did not answer is counted as V(unreachable), never as healthy.
  - A host whose node_exporter textfile could not be written (a result's C(textfile_error)) gets a line of its own,
    and the headline names it. Without the file Prometheus has no C(vllm_watchdog_*) metric of that host, and no
    alert on the watchdog can fire for it.
  - With O(hostvars), the input is the host names of the play (C(ansible_play_hosts_all)) and the filter gathers the
    results itself, each host's fact C(vllm_watchdog_results), read through C(ansible_facts), only from the hosts where
    the role's gate was registered in this run (C(_vllm_watchdog_gate)), so that a fact left in a persistent fact cache
    by an earlier run is not taken for this run's verdict. A host of the play without a result (it did not answer, or
    failed before a verdict) is one V(unreachable) line of its own, never dropped and never healthy.
options:
  _input:
    description:
      - The results, each a dict with at least C(host), C(instance), C(state), C(restarted), C(failed), C(line).
      - With O(hostvars), the host names of the play instead.
    type: list
    elements: raw
    required: true
  hostvars:
    description: The C(hostvars) of the play, to gather the results of the hosts given as the input.
    type: dict
  textfile_required:
    description:
      - Whether a host whose textfile could not be written fails for it with its own line
        (C(vllm_watchdog_textfile_required)), so that the summary says it only in the headline; the hosts that do not
        fail for it get one summary line for all that share the same reason. One mistake is said once.
      - With O(hostvars), what each host's gate returned (C(_vllm_watchdog_gate.textfile_required), the role's
        C(vllm_watchdog_textfile_required) on that host) wins over this.
    type: bool
    default: false
'''

EXAMPLES = r'''
- name: Summarize (each host's fact, read through ansible_facts)
  ansible.builtin.debug:
    msg: "{{ ansible_play_hosts_all | map('extract', hostvars, ['ansible_facts', 'vllm_watchdog_results']) | select('defined')
             | flatten | modelops.vllm._watchdog_summary }}"

- name: Summarize the play, the hosts without a result included
  ansible.builtin.debug:
    msg: "{{ ansible_play_hosts_all | modelops.vllm._watchdog_summary(hostvars) }}"
'''

RETURN = r'''
_value:
  description: The summary.
  type: dict
  contains:
    counts:
      description: Instances per verdict.
      type: dict
    restarted:
      description: C(host/instance) of every restarted instance.
      type: list
      elements: str
    rebooted:
      description: C(host/instance) of every instance whose host the watchdog rebooted (the ladder's second step).
      type: list
      elements: str
    failed:
      description: C(host/instance) of every instance that needs a human.
      type: list
      elements: str
    unreachable:
      description: The hosts that did not answer (or failed before a verdict).
      type: list
      elements: str
    reasons:
      description:
        - Why, for every instance that was restarted, rebooted, needs a human or did not answer, by C(host/instance)
          (the keys of RV(_value.restarted), RV(_value.rebooted), RV(_value.failed) and each unreachable host's
          instances). One line each, at most about 1000 characters, for a notification to say why. The verdict
          and its reason, what the watchdog did and why, the verdict after a restart, and the evidence file.
      type: dict
    textfile_errors:
      description: For every host whose textfile could not be written, C(<host>) and why, as one string.
      type: list
      elements: str
    lines:
      description:
        - One line per host and instance, then one per reason a textfile could not be written, naming the hosts that do
          not fail for it (O(textfile_required) false).
      type: list
      elements: str
    headline:
      description: One line for the whole fleet.
      type: str
'''

from ansible.errors import AnsibleFilterError

from ansible_collections.modelops.vllm.plugins.plugin_utils._counts import count_states, said_counts
from ansible_collections.modelops.vllm.plugins.plugin_utils._hostvars import each_host


def _truthy(value):
    if isinstance(value, str):
        return value.strip().lower() in ('true', 'yes', '1')
    return bool(value)


GATE = '_vllm_watchdog_gate'

LOST = ('%s/*: unreachable - watchdog: host UNREACHABLE or failed before a verdict, not restarted '
        '(see the task that failed for this host above)')


def lost_result(host):
    """The result of a host of the play that has none: it did not answer, or failed before a verdict."""
    return {'host': host, 'instance': '*', 'state': 'unreachable', 'action': 'unreachable',
            'failed': True, 'unreachable': True, 'restarted': False, 'line': LOST % host}


def play_results(hosts, hostvars):
    """Every result of the play's hosts, then one lost result per host that has none.

    A host's results are its fact vllm_watchdog_results, read through ansible_facts (top-level facts are
    deprecated and go with INJECT_FACTS_AS_VARS=False), and only where the gate is registered in this run
    (_vllm_watchdog_gate is registered, never cached): a fact left in a persistent fact cache by an earlier
    run is not this run's verdict."""
    if not isinstance(hosts, (list, tuple)):
        raise AnsibleFilterError('watchdog_summary expects the host names of the play, got %s' % type(hosts).__name__)
    results = []
    for host, variables in each_host(hosts, hostvars, 'watchdog_summary'):
        if GATE not in variables:
            continue
        mine = (variables.get('ansible_facts') or {}).get('vllm_watchdog_results') or []
        if not isinstance(mine, (list, tuple)):
            raise AnsibleFilterError('watchdog_summary: the vllm_watchdog_results of %s is not a list' % host)
        results.extend(mine)
    reported = set(str(item.get('host')) for item in results if isinstance(item, dict))
    results.extend(lost_result(host) for host in hosts if str(host) not in reported)
    return results


# What a result says, in the words of the one-line report.
ACTED = {'restarted': 'restarted', 'restart failed': 'restart FAILED', 'restart stopped': 'restart STOPPED',
         'rebooted': 'rebooted the host', 'reboot failed': 'reboot FAILED', 'fail': 'NEEDS A HUMAN',
         'unreachable': 'host UNREACHABLE'}


def _clip(value, limit):
    text = ' '.join(str(value or '').split())
    return text if len(text) <= limit else text[:limit] + '...'


def reason(item):
    """Why, in one line, for a result the watchdog acted on or asks a human about: the verdict and its reason, what
    it did and why, the verdict after it, the evidence."""
    action = str(item.get('action') or 'none')
    if not item.get('reason') and not item.get('decision'):
        # A host that failed before a verdict: its line is all there is.
        return _clip(item.get('line') or '%s: watchdog: %s' % (item.get('state') or 'unknown', ACTED.get(action, action)),
                     1000)
    text = '%s: %s - watchdog: %s (%s)' % (
        item.get('state') or 'unknown', _clip(item.get('reason'), 400) or '?', ACTED.get(action, action),
        _clip(item.get('decision'), 400) or '?')
    if item.get('after'):
        text += ' -> now %s' % _clip(item['after'], 40)
    if item.get('evidence_file'):
        text += ' [evidence %s]' % _clip(item['evidence_file'], 200)
    return text


def hosts_text(hosts, limit=5):
    """'gb10-01', 'gb10-01, gb10-02', or 'gb10-01, ... and 95 more (100 hosts)'."""
    if len(hosts) <= limit:
        return ', '.join(hosts)
    return '%s and %d more (%d hosts)' % (', '.join(hosts[:limit]), len(hosts) - limit, len(hosts))


def watchdog_summary(results, hostvars=None, textfile_required=False):
    required = {}
    if hostvars is not None:
        hosts, results = results, play_results(results, hostvars)
        for host, variables in each_host(hosts, hostvars, 'watchdog_summary'):
            gate = variables.get(GATE) if isinstance(variables.get(GATE), dict) else {}
            required[str(host)] = _truthy(gate.get('textfile_required', textfile_required))
    if not isinstance(results, list):
        raise AnsibleFilterError('watchdog_summary expects a list of results, got %s' % type(results).__name__)
    counts = count_states(results, 'watchdog_summary')
    restarted = []
    rebooted = []
    failed = []
    unreachable = []
    lines = []
    textfile = {}
    reasons = {}
    for item in results:
        if not isinstance(item, dict):
            raise AnsibleFilterError('watchdog_summary expects dicts, got %s' % type(item).__name__)
        who = '%s/%s' % (item.get('host'), item.get('instance'))
        if _truthy(item.get('restarted')):
            restarted.append(who)
        if _truthy(item.get('rebooted')):
            rebooted.append(who)
        if _truthy(item.get('failed')):
            failed.append(who)
        if _truthy(item.get('unreachable')) and item.get('host') not in unreachable:
            unreachable.append(item.get('host'))
        if any(_truthy(item.get(key)) for key in ('restarted', 'rebooted', 'failed', 'unreachable')):
            reasons[who] = reason(item)
        lines.append(' '.join(str(item.get('line') or who).split()))
        if item.get('textfile_error'):
            textfile.setdefault(str(item.get('host')), ' '.join(str(item['textfile_error']).split()))
    textfile_errors = ['%s: %s' % (host, why) for host, why in textfile.items()]
    by_why = {}
    for host, why in textfile.items():
        if not required.get(host, _truthy(textfile_required)):  # else its own failure says it
            by_why.setdefault(why, []).append(host)
    lines.extend('%s: watchdog: TEXTFILE NOT WRITTEN - %s' % (hosts_text(hosts), why) for why, hosts in by_why.items())
    ordered = said_counts(counts, sorted(counts, key=lambda k: (-counts[k], k)))
    headline = 'vLLM watchdog: %d instance(s): %s; restarted: %s; needs a human: %s; unreachable hosts: %s' % (
        len(results), ordered or 'none', ', '.join(restarted) or 'none', ', '.join(failed) or 'none',
        ', '.join(str(h) for h in unreachable) or 'none')
    if rebooted:
        headline += '; rebooted: %s' % ', '.join(rebooted)
    if textfile:
        headline += '; textfile not written: %s' % ', '.join(textfile)
    return {'counts': counts, 'restarted': restarted, 'rebooted': rebooted, 'failed': failed, 'unreachable': unreachable,
            'reasons': reasons, 'lines': lines,
            'textfile_errors': textfile_errors, 'headline': headline}


class FilterModule(object):
    def filters(self):
        return {'_watchdog_summary': watchdog_summary}
