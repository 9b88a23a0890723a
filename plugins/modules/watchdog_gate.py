#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) modelops.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r'''
---
module: watchdog_gate
short_description: Decide, under a host lock, whether the vLLM watchdog may restart each server of a host
version_added: 0.1.0
description:
  - The one place that decides a restart for the P(modelops.vllm.watchdog#role) role. Given the verdicts of
    M(modelops.vllm.health) for the vLLM instances of one host, it asks the service manager about the ones that are
    V(stuck) or V(down), applies the guard rails and, when the answer is to restart, records the restart in the
    instance's history before it returns. It does not restart anything itself; M(modelops.vllm.restart) does.
  - One run decides every instance of the host, so a healthy host costs the watchdog one module run. It also appends
    one line per instance to the verdict history on the host, and, before a restart, keeps the evidence there.
  - Each decision and its record happen under an exclusive lock per instance (C(flock) on C(<state_dir>/<name>.lock)),
    so two watchdog runs at the same time (a schedule and an ad-hoc run) restart a stuck server at most once.
  - Guard rails. Restart only on V(stuck), or on V(down) when the service is not running, or has been running longer
    than O(startup_grace) without answering. Never within O(startup_grace) of the latest start anyone can see (the
    service manager's, vLLM's own C(process_start_time_seconds), the last restart). A cooldown after each restart that
    doubles with every restart in O(restart_window). Past O(max_restarts) in the window, no restart and
    RV(instances[].action=fail). V(unknown) never restarts; O(unknown_limit) of them in a row give
    RV(instances[].action=fail). V(paused) (vLLM's own pause API) never restarts; paused on every run for
    O(paused_limit) seconds gives RV(instances[].action=fail). A pause (O(paused), or a pause file) reports only.
  - A V(down) server whose service runs (past the grace) is restarted only with proof that its URL is that service
    (a misspelt C(vllm_url) must never restart a busy server). The service's main process (systemd's C(MainPID), the
    container's C(.State.Pid)) or a process below it listens on the URL's address and port (read from
    C(/proc/<pid>/net/tcp{,6}) and the sockets in C(/proc/<pid>/fd)), or the instance was seen serving at this URL
    before (its history). Without it RV(instances[].action=fail) - the URL may be wrong, a human must look. A process
    that listens on other ports only is no proof, even with an old sighting (the service moved).
  - The ladder. When the same hang comes back within O(rehang_window) of a restart, or the kernel's log
    (O(kernel_log)) shows an NVIDIA Xid or C(NV_ERR_NO_MEMORY) since vLLM was last seen healthy (after its start-up,
    where C(NV_ERR_NO_MEMORY) also appears on healthy starts, vllm#56824), a vLLM restart cannot help, and the next step is
    a host reboot (RV(instances[].action=reboot), with O(reboot), under the budget and O(reboot_cooldown)), else a
    human. O(escalate) takes the same step for a restart whose memory did not come back. Every step counts against
    O(max_restarts).
  - The evidence of a hang, taken before a restart or a reboot (and before asking a human because of the GPU), bounded
    by O(evidence_timeout) and redacted like everything it keeps. C(py-spy dump) of each Python process of the service
    (O(py_spy); a process that cannot be paused, a stopped or wedged one, is read with C(--nonblocking)), the host's
    C(/proc/meminfo) (O(meminfo)), the kernel's lines since vLLM started that name an Xid, C(NV_ERR_NO_MEMORY) or the
    out-of-memory killer (O(kernel_log)), and C(nvidia-smi) (O(nvidia_smi)). Each piece is optional; a tool that is
    missing, fails or hangs is named with why.
  - It fails closed. Settings that are not finite numbers in range fail the task. The state directory must not be
    writable by group or others. Files in it are never followed through symbolic links, must be regular files, and
    are read up to 1 MiB. A history that cannot be read gives RV(instances[].action=fail) (a human must look), never a
    fresh restart budget. Restart and start times in the future are ignored, and the reason says so. A restart that
    failed (O(record_failure)) keeps the instance failing until it is healthy again or a human removes
    C(<state_dir>/<name>.restart-failed).
author:
  - modelops.vllm maintainers (@modelops)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: full
    details:
      - In check mode it asks the service manager and decides, and records nothing (no history, no verdict line, no
        lock file, no evidence).
  diff_mode:
    support: none
  platform:
    platforms: posix
options:
  state_dir:
    description:
      - Directory on the host for the history (C(<name>.json)), the lock (C(<name>.lock)), the verdict history
        (C(<name>.verdicts.jsonl), rotated), the pause files, a failed restart (C(<name>.restart-failed)) and the
        evidence (C(evidence/)). Created C(0750) if missing; refused if group or others can write it.
    type: path
    required: true
  instances:
    description:
      - The vLLM instances of this host, each with its verdict (or the verdicts come from O(results_file)).
      - Either this or O(name) and O(state).
    type: list
    elements: dict
    suboptions:
      name:
        description: Instance name (unique on the host); the history is kept per name.
        type: str
        required: true
      kind:
        description: V(backend), or V(proxy), which is reported and never restarted.
        type: str
        choices: [backend, proxy]
        default: backend
      verdict:
        description: The result of M(modelops.vllm.health) for this instance (at least C(state) and C(reason)).
        type: dict
      restart_method:
        description: How the service manager is asked (V(systemd), V(docker), V(compose) or V(command)).
        type: str
        choices: [systemd, docker, compose, command]
        default: systemd
      service:
        description: The systemd unit, the container name, or the compose service.
        type: str
      compose_project_dir:
        description: The compose project directory, for O(instances[].restart_method=compose).
        type: str
      status_command:
        description: For O(instances[].restart_method=command), an argv that exits 0 when the service runs.
        type: list
        elements: str
      logs_command:
        description: For O(instances[].restart_method=command), an argv whose output is kept as evidence.
        type: list
        elements: str
      url:
        description:
          - The instance's URL, as shown in the evidence (a password in it is masked). Where it was seen serving is kept
            in the history, and its address and port are what the service's process must listen on for a V(down)
            restart.
        type: str
      url_is_default:
        description:
          - The URL is only the role's fallback (no C(vllm_url), C(vllm_watchdog_url) or instance C(url) was given); a
            V(down) verdict says so.
        type: bool
        default: false
      api_key:
        description:
          - The instance's API key (C(--api-key)), never used to send anything here and never logged. The gate masks
            it, in every spelling, in everything it keeps or returns (the verdict history, the evidence with the
            service's log, its result), as it masks vLLM's own spellings of any key (the C(api_key) of vLLM's start-up
            line C(non-default args), C(--api-key ...), an C(Authorization) header).
        type: str
  results_file:
    description:
      - The results file of an asynchronous M(modelops.vllm.health) run with O(modelops.vllm.health#module:servers)
        (its C(results_file)); the verdicts are taken from it by instance name. The module waits for the job to finish
        (up to O(results_timeout)) and removes the file, so the job needs no C(async_status).
    type: path
  results_timeout:
    description: Seconds to wait for O(results_file) to hold a finished result.
    type: float
    default: 300
  name:
    description:
      - One instance, as a shorthand for O(instances) with one item whose service state is given by O(service).
    type: str
  state:
    description:
      - With O(name), the verdict of M(modelops.vllm.health) (RV(modelops.vllm.health#module:state)).
    type: str
    choices: [idle, busy, stuck, restarted, starting, down, sleeping, paused, up, unknown]
  reason:
    description:
      - With O(name), the verdict's reason, kept in the history.
    type: str
    default: ''
  service:
    description:
      - With O(name), what the service manager says about the vLLM service (it is not asked).
    type: dict
    default: {}
    suboptions:
      running:
        description:
          - Whether the service (unit, container) is running. Leave out when it cannot be known.
        type: bool
      started_at:
        description:
          - When it last started, in seconds since the epoch, as systemd's V(@1796004614), or as Docker's
            RFC 3339 V(2026-11-30T02:10:52.123456789Z).
        type: raw
      status:
        description:
          - The service manager's own word for its state (for example V(active/running), V(exited), V(failed)).
        type: str
  process_start_time:
    description:
      - With O(name), vLLM's own C(process_start_time_seconds) as the check saw it; the start-up grace counts from it
        too.
    type: float
  record_failure:
    description:
      - Record that the restart of an instance failed, and decide nothing else. The instance then fails on every run
        (it is not restarted again) until its verdict is healthy again or a human removes
        C(<state_dir>/<name>.restart-failed).
    type: dict
    suboptions:
      name:
        description: The instance.
        type: str
        required: true
      error:
        description: What failed.
        type: str
        required: true
  escalate:
    description:
      - Take the step after a vLLM restart that was stopped half-way (the memory did not come back after vLLM stopped,
        so it was not started), and decide nothing else. RV(action=reboot) when O(reboot) is on and the guard rails
        allow; else RV(action=fail), recorded as a failed restart (the instance fails on every run until it serves).
    type: dict
    suboptions:
      name:
        description: The instance.
        type: str
        required: true
      why:
        description: What happened (kept in the history).
        type: str
        required: true
  textfile_names:
    description: With O(escalate), the instances of the host, whose last results O(textfile) is rewritten with.
    type: list
    elements: str
  startup_grace:
    description:
      - Seconds after a start (or a restart) during which the server is never restarted (weights load for minutes).
    type: float
    default: 900
  cooldown:
    description:
      - Seconds after a restart before the next one may happen; doubles for every further restart in the window.
    type: float
    default: 600
  max_restarts:
    description:
      - Restarts allowed in O(restart_window). Past it, no restart and RV(instances[].action=fail).
    type: int
    default: 3
  restart_window:
    description:
      - The window, in seconds, of the restart budget and the cooldown. Greater than 0.
    type: float
    default: 86400
  unknown_limit:
    description:
      - After this many V(unknown) verdicts in a row, RV(instances[].action=fail) (a human should look). Never a restart.
    type: int
    default: 3
  paused_limit:
    description:
      - Seconds a server may be seen V(paused) (vLLM's pause API, an RL weight transfer) on every run before the gate
        asks a human (RV(instances[].action=fail)). It is never restarted while paused; this is for a trainer that held
        the pause and died.
    type: float
    default: 3600
  reboot:
    description:
      - Whether the ladder may reboot the host (RV(instances[].action=reboot)) when a vLLM restart cannot help. Off, a
        human is asked instead.
    type: bool
    default: false
  reboot_cooldown:
    description: Seconds after a reboot before another may be decided for the instance.
    type: float
    default: 21600
  rehang_window:
    description:
      - Seconds after a restart (or a reboot) within which a V(stuck) verdict is the same hang come back. After a
        restart the next step is a reboot (or a human); after a reboot, a human. V(0) turns it off (the hang is then
        restarted again under the cooldown and the budget).
    type: float
    default: 3600
  py_spy:
    description:
      - The C(py-spy) executable (a name on PATH, or a path) for the stack dumps in the evidence. Empty turns them off.
    type: str
    default: py-spy
  meminfo:
    description: The host's meminfo, kept in the evidence.
    type: path
    default: /proc/meminfo
  kernel_log:
    description:
      - Where the kernel's log is read, for the evidence and the GPU rule. V(/dev/kmsg) (the kernel's own records, root
        only), or a file with the kernel's lines as C(dmesg), C(dmesg --time-format iso), C(journalctl -k -o short-iso)
        or C(journalctl -k -o short-unix) write them (its last 16 MiB are read). Empty turns both off.
    type: path
    default: /dev/kmsg
  nvidia_smi:
    description: The C(nvidia-smi) executable for the evidence. Empty turns it off.
    type: str
    default: nvidia-smi
  evidence_timeout:
    description:
      - Seconds for all the evidence of one instance (each tool gets at most 20 of them; one that does not finish is
        stopped, with what it started).
    type: float
    default: 60
  paused:
    description:
      - Report only. The file C(<state_dir>/paused) or C(<state_dir>/<name>.paused) on the host pauses the watchdog too.
    type: bool
    default: false
  lock_timeout:
    description:
      - Seconds to wait for the host lock held by another watchdog run.
    type: float
    default: 60
  status_timeout:
    description:
      - Seconds allowed to a service manager command (C(systemctl show), C(docker inspect), the status and logs
        commands). One that does not answer in time means the state cannot be known (a V(down) server is then not
        restarted).
    type: float
    default: 30
  log_lines:
    description: Lines of the service's log kept with the evidence of a restart.
    type: int
    default: 200
  history_max_bytes:
    description: Size at which the verdict history C(<name>.verdicts.jsonl) is rotated (two older files are kept).
    type: int
    default: 1048576
  host:
    description:
      - The inventory name of the host. With it, the gate also returns the host's fact C(vllm_watchdog_results), one
        result per instance in the form the P(modelops.vllm.watchdog#role) role documents, so a host where nothing
        is restarted needs no other task.
    type: str
  textfile:
    description:
      - A file for node_exporter's textfile collector (C(--collector.textfile.directory)), for example
        C(/var/lib/prometheus/node-exporter/vllm_watchdog.prom), rewritten atomically on every run with the watchdog's
        verdicts as metrics; see docs/prometheus.md. Not written when unset, in check mode, or with O(name).
      - C(vllm_watchdog_verdict{vllm_instance, state}) is 1 for the instance's verdict and 0 for the others;
        C(vllm_watchdog_action{vllm_instance, action}) likewise for what the watchdog decided;
        C(vllm_watchdog_needs_human{vllm_instance}), C(vllm_watchdog_restarts_total{vllm_instance}) (every restart
        this watchdog ever decided) and C(vllm_watchdog_last_run_timestamp_seconds{vllm_instance}).
      - C(vllm_watchdog_reboots_total{vllm_instance}) counts the host reboots decided (with V(reboot) in the action).
      - The label is C(vllm_instance), not C(instance), which Prometheus sets to the scraped target (node_exporter).
    type: path
'''

EXAMPLES = r'''
- name: Check the instances of this host
  modelops.vllm.health:
    servers:
      - {name: chat, url: "http://127.0.0.1:8000"}
      - {name: embed, url: "http://127.0.0.1:8001"}
  register: vllm

- name: Decide for each of them, under the host's locks
  modelops.vllm.watchdog_gate:
    state_dir: /var/lib/vllm-watchdog
    instances:
      - {name: chat, verdict: "{{ vllm.servers[0] }}", restart_method: systemd, service: vllm-chat}
      - {name: embed, verdict: "{{ vllm.servers[1] }}", restart_method: systemd, service: vllm-embed}
  register: gate

- name: Restart only what the gate says
  modelops.vllm.restart:
    method: systemd
    service: "vllm-{{ item.name }}"
  loop: "{{ gate.instances | selectattr('action', '==', 'restart') }}"

- name: One instance, its service state given
  modelops.vllm.watchdog_gate:
    name: vllm
    state_dir: /var/lib/vllm-watchdog
    state: stuck
    reason: nothing moved
    service: {running: true, started_at: 1796004614, status: active/running}
'''

RETURN = r'''
instances:
  description: One decision per instance, in the order given.
  returned: unless O(record_failure) is given
  type: list
  elements: dict
  contains:
    name:
      description: The instance.
      type: str
    state:
      description: Its verdict (V(unknown) when the check gave none).
      type: str
    reason:
      description: The verdict's reason.
      type: str
    verdict:
      description:
        - The verdict's key numbers (C(line), C(running), C(waiting), C(kv_cache_usage), C(probe), C(url), ...), the
          process's C(process_start_time), and C(last_read), the check's last read (its start time and every
          engine's C(counters)), which O(modelops.vllm.restart#module:old_reading) takes.
      type: dict
    action:
      description:
        - V(none), V(restart) (recorded; the caller restarts), V(reboot) (recorded; the caller reboots the host) or
          V(fail) (a human is needed).
      type: str
    decision:
      description: One plain sentence saying why.
      type: str
    service:
      description: What the service manager said (C(running), C(started_at), C(status)), when it was asked.
      type: dict
    paused:
      description: Whether the watchdog was paused for it.
      type: bool
    restarts_in_window:
      description: Restarts in the window, this one included when RV(instances[].action=restart).
      type: int
    budget_left:
      description: Restarts left in the window.
      type: int
    cooldown:
      description: The cooldown in force after the last restart, in seconds.
      type: float
    uptime:
      description: Seconds since the latest known start, when known.
      type: float
    evidence_file:
      description:
        - The evidence kept on the host before a restart or a reboot, or before asking a human because of the GPU (none
          otherwise). Its C(hang) holds C(stacks), C(meminfo), C(kernel) and C(nvidia_smi).
      type: str
    evidence:
      description: A few words on what the evidence holds (stacks, memory, kernel lines, nvidia-smi), for the report.
      type: str
    url_proof:
      description:
        - For a V(down) server whose service runs, what shows (or not) that the URL is the service (C(listens),
          C(listening_on), C(process), C(endpoint), C(why), C(default_url)).
      type: dict
    gpu_errors:
      description: The kernel's lines that made the GPU rule take the next step.
      type: list
      elements: dict
    history_file:
      description: The instance's restart history on the host.
      type: str
    waited_for_lock:
      description: Seconds spent waiting for another run's lock.
      type: float
ansible_facts:
  description: With O(host), the fact C(vllm_watchdog_results).
  returned: with O(host) and O(instances)
  type: dict
textfile_error:
  description:
    - Why O(textfile) could not be written (null when it was, or was not asked for). The module also warns with it, and
      each result of RV(ansible_facts) carries it (C(textfile_error)); the P(modelops.vllm.watchdog#role) role puts it
      in its summary and fails the host unless C(vllm_watchdog_textfile_required) is false.
  returned: with O(instances)
  type: str
  sample: null
action:
  description:
    - With O(name) (one instance), its RV(instances[].action); with O(record_failure), V(fail); with O(escalate),
      V(reboot) or V(fail).
  returned: with O(name), O(record_failure) or O(escalate)
  type: str
  sample: none
reason:
  description: With O(name), its RV(instances[].decision); with O(escalate), why that step.
  returned: with O(name), O(record_failure) or O(escalate)
  type: str
  sample: stuck, but in cooldown - the last restart was 12m00s ago and the cooldown is now 20m00s
paused:
  description: With O(name), whether the watchdog was paused (by O(paused) or a pause file).
  returned: with O(name)
  type: bool
  sample: false
restarts_in_window:
  description: With O(name), restarts in the window.
  returned: with O(name)
  type: int
  sample: 1
budget_left:
  description: With O(name), restarts left in the window.
  returned: with O(name)
  type: int
  sample: 2
cooldown:
  description: With O(name), the cooldown in force, in seconds.
  returned: with O(name)
  type: float
  sample: 600.0
uptime:
  description: With O(name), seconds since the latest known start, when known.
  returned: with O(name)
  type: float
  sample: 3600.5
history:
  description: With O(name) or O(escalate), the history as kept on the host after this decision.
  returned: with O(name) or O(escalate)
  type: dict
  sample: {"restarts": [1796004614.0], "unknown_streak": 0, "last_state": "stuck", "last_check": 1796004614.0}
waited_for_lock:
  description: With O(name), seconds spent waiting for another run's lock.
  returned: with O(name)
  type: float
  sample: 0.0
'''

import json
import math
import os
import time

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.modelops.vllm.plugins.module_utils import _evidence
from ansible_collections.modelops.vllm.plugins.module_utils import _host
from ansible_collections.modelops.vllm.plugins.module_utils import _statedir as statedir
from ansible_collections.modelops.vllm.plugins.module_utils import _textfile
from ansible_collections.modelops.vllm.plugins.module_utils._redact import forms, redact
from ansible_collections.modelops.vllm.plugins.module_utils._jobs import read_results, verdicts_from
from ansible_collections.modelops.vllm.plugins.module_utils._results import watchdog_results
from ansible_collections.modelops.vllm.plugins.module_utils._types import STATES as VERDICTS
from ansible_collections.modelops.vllm.plugins.module_utils._decide import (
    DEFAULTS,
    FAIL,
    HEALTHY,
    NONE,
    REBOOT,
    RESTART,
    decide,
    decide_escalation,
    invalid_settings,
    load_history,
    parse_started_at,
)
from ansible_collections.modelops.vllm.plugins.module_utils._service import (
    logs_command,
    run_argv,
    service_status,
)

STATES = list(VERDICTS)  # every verdict a check can give, from the one list (_types)
# The verdict's numbers kept in the verdict history and returned to the role.
VERDICT_KEYS = ('state', 'reason', 'line', 'url', 'running', 'waiting', 'kv_cache_usage', 'steps_per_second',
                'generation_tokens_per_second', 'restarted', 'version', 'model', 'stuck_engines', 'error', 'checked_at')


def _paths(state_dir, name):
    join = os.path.join
    return {
        'lock': join(state_dir, '%s.lock' % name),
        'history': join(state_dir, '%s.json' % name),
        'failed': join(state_dir, '%s.restart-failed' % name),
        'verdicts': join(state_dir, '%s.verdicts.jsonl' % name),
        'pauses': (join(state_dir, '%s.paused' % name), join(state_dir, 'paused')),
        'evidence': join(state_dir, 'evidence'),
    }


def _pause_note(paths):
    """'pause file PATH: first line' when a pause file (of any kind) exists, else None."""
    for path in paths['pauses']:
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


class Gate(object):
    """One run of the gate on one host."""

    def __init__(self, module):
        self.module = module
        self.p = module.params
        self.settings = dict((key, self.p[key]) for key in DEFAULTS)
        self.check_mode = module.check_mode
        # Every spelling of the configured secrets: masked (with vLLM's own spellings of a key) in all that is
        # kept or returned.
        self.spellings = forms([item.get('api_key') for item in self.p['instances'] or []])
        self._kernel = None

    def redact(self, value):
        return redact(value, self.spellings)

    def run_cmd(self, argv):
        return run_argv(argv, timeout=self.p['status_timeout'])

    def service_of(self, item, state):
        if item.get('given_service') is not None:
            return item['given_service']
        if state not in ('stuck', 'down'):
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
        """(main pid, the service's processes, how they were found): from the service manager's main process, else
        (a command method) the processes that listen on the URL's port on this host."""
        pid = service.get('main_pid')
        if pid:
            how = {'systemd': 'systemd MainPID', 'docker': 'the container\'s process, docker inspect .State.Pid',
                   'compose': 'the container\'s process, docker inspect .State.Pid'}.get(item['restart_method'], '?')
            return pid, _host.tree(pid), how
        host, port = _host.url_endpoint(item.get('url'))
        if not port:
            return None, [], 'the URL names no port'
        listening = _host.listener_pids(port, _host.addresses_of(host))
        roots = [p for p in listening if (_host.proc_stat(p) or (0, ''))[0] not in listening]
        pids = []
        for root in roots[:4]:
            pids.extend(p for p in _host.tree(root) if p not in pids)
        return None, pids, 'the processes that listen on the URL\'s port %s' % port

    def url_proof(self, item, service):
        """What shows (or not) that the URL is the service that runs (see _decide.url_evidence)."""
        host, port = _host.url_endpoint(item.get('url'))
        proof = {'default_url': bool(item.get('url_is_default')), 'listens': None}
        if not port:
            proof['why'] = 'the URL names no port'
            return proof
        addresses = _host.addresses_of(host)
        proof['endpoint'] = _host.endpoint(addresses[0] if addresses else host, port)
        pid = service.get('main_pid')
        if not pid:
            proof['why'] = 'the service manager names no main process of the service (%s)' % (
                'the command method has none' if item['restart_method'] == 'command' else 'MainPID is 0')
            return proof
        pids = _host.tree(pid)
        if not pids:
            proof['why'] = 'its main process %d is not there' % pid
            return proof
        found, same = _host.listeners(pids)
        proof['process'] = 'its main process %d (%s)' % (pid, self.processes(item, service)[2])
        proof['listening_on'] = sorted(set(_host.endpoint(f['address'], f['port']) for f in found))[:5]
        if same is not True:
            proof['why'] = ('%s runs in a network namespace of its own (a container): its ports are not the URL\'s'
                            % proof['process']) if same is False else 'its network namespace cannot be read'
            proof['listening_on'] = []
            return proof
        proof['listens'] = any(f['port'] == port and _host.matches(f['address'], addresses) for f in found)
        return proof

    def one(self, item, verdict):
        name = item['name']
        paths = _paths(self.p['state_dir'], name)
        verdict = verdict if isinstance(verdict, dict) else {}
        state = verdict.get('state') if verdict.get('state') in STATES else 'unknown'
        out = {'name': name, 'state': state, 'reason': str(verdict.get('reason') or '')[:1000],
               'verdict': dict((k, verdict.get(k)) for k in VERDICT_KEYS if k in verdict), 'service': {},
               'paused': False, 'evidence_file': None, 'history_file': paths['history'], 'waited_for_lock': 0.0,
               'restarts_in_window': 0, 'budget_left': None, 'cooldown': 0.0, 'uptime': None}
        if verdict.get('error'):
            out.update(action=FAIL, decision='the check cannot run as configured: %s' % str(verdict['error'])[:500])
            return self.finish(out, paths, None)
        if item.get('kind') == 'proxy':
            out.update(action=NONE, decision='a proxy is checked by GET /v1/models only and never restarted by this '
                                             'role; watch its backends directly')
            return self.finish(out, paths, None)
        service = self.service_of(item, state)
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
                    return self.finish(out, paths, None)
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
                return self.finish(out, paths, None)
            failed = _failed_restart(statedir.read_text(paths['failed']))
            proof = kernel = None
            if state == 'down' and service.get('running'):
                proof = self.url_proof(item, service)
                out['url_proof'] = proof
            elif state == 'down':
                proof = {'default_url': bool(item.get('url_is_default'))}
            if state in ('stuck', 'down'):
                kernel = self.kernel().get('lines')
            decision = decide(state, service, history, time.time(), self.settings, paused=paused,
                              process_start=process_start, failed_restart=failed, url=item.get('url'),
                              url_proof=proof, kernel=kernel)
            reason = decision['reason']
            if pause_note:
                reason += ' (%s)' % pause_note
            if failed and decision['action'] == FAIL:
                reason += '. When it serves again, or to let the watchdog try again, remove %s' % paths['failed']
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
                if failed and state in HEALTHY:
                    statedir.remove(paths['failed'])
        finally:
            if fd is not None:
                os.close(fd)  # releases the lock, after the history is on disk
        return self.finish(out, paths, verdict)

    def finish(self, out, paths, verdict):
        """Append the verdict line, keep the evidence of a restart; nothing in check mode."""
        if self.check_mode:
            return out
        record = {'time': time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime()), 'state': out['state'],
                  'reason': out['reason'][:500], 'action': out['action'], 'decision': out['decision'][:500]}
        for key in ('running', 'waiting', 'kv_cache_usage', 'steps_per_second', 'generation_tokens_per_second'):
            record[key] = out['verdict'].get(key)
        record['probe'] = ((verdict or {}).get('probe') or {}).get('outcome')
        try:
            statedir.append_line(paths['verdicts'], json.dumps(self.redact(record), sort_keys=True),
                                 max_bytes=self.p['history_max_bytes'])
        except (statedir.StateError, OSError) as exc:
            out['decision'] += ' (the verdict history could not be written: %s)' % exc
        if out['action'] in (RESTART, REBOOT) or (out['action'] == FAIL and out.get('gpu_errors')):
            out['evidence_file'] = self.evidence(out, paths, verdict)
        return out

    def evidence(self, out, paths, verdict):
        item = self.current
        argv = logs_command(item['restart_method'], item.get('service'), item.get('compose_project_dir'),
                            item.get('logs_command'), self.p['log_lines'])
        logs = []
        if argv:
            # Up to 2 KB per line of the log kept.
            rc, stdout, stderr = run_argv(argv, timeout=self.p['status_timeout'], keep=2048 * self.p['log_lines'])
            logs = (stdout + stderr).splitlines()[-self.p['log_lines']:]
        # The hang itself, before anything is restarted: the stacks of vLLM's processes, the memory, the kernel's
        # lines since vLLM started, nvidia-smi (docs/gb10.md: what to attach to a vLLM bug report).
        dummy, pids, how = self.processes(item, out['service'] or {})
        started = [t for t in (parse_started_at((out['service'] or {}).get('started_at')),
                               parse_started_at(out['verdict'].get('process_start_time'))) if t is not None]
        found = _evidence.collect(lambda argv, timeout: run_argv(argv, timeout=timeout, keep=_evidence.DUMP_BYTES),
                                  pids, self.p, since=max(started) if started else None, kernel=self.kernel()
                                  if self.p['kernel_log'] else None)
        found['processes_found_by'] = how
        evidence = {
            'host': os.uname()[1], 'instance': out['name'], 'url': item.get('url') or out['verdict'].get('url'),
            'restart_method': item['restart_method'], 'verdict': verdict, 'service': out['service'],
            'decision': dict((k, v) for k, v in out.items() if k not in ('verdict', 'history')),
            'history': out.get('history'),
            'logs': logs,
            'hang': found,
        }
        out['evidence'] = _evidence.summary(found)
        # A line of the history that was cut (a crash, a full disk) is named, never taken for a verdict.
        evidence['recent_verdicts'], damaged = statedir.tail_json(paths['verdicts'], 20)
        if damaged:
            evidence['damaged_verdict_lines'] = damaged
        try:
            statedir.check_dir(paths['evidence'])
            stamp = time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())
            path = os.path.join(paths['evidence'], '%s-%s.json' % (out['name'], stamp))
            statedir.write_text(path, json.dumps(self.redact(evidence), indent=1, sort_keys=True, default=str) + '\n')
            return path
        except (statedir.StateError, OSError) as exc:
            out['decision'] += ' (the evidence could not be kept: %s)' % exc
            return None

    def run(self, items, verdicts, missing_why):
        results = []
        for item in items:
            self.current = item
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

    def record_failure(self):
        name = self.p['record_failure']['name']
        paths = _paths(self.p['state_dir'], name)
        error = self.redact(self.p['record_failure']['error'])[:1000]
        if not self.check_mode:
            statedir.write_text(paths['failed'], json.dumps({'at': time.time(), 'error': error}) + '\n')
        return ('the restart of %s failed (%s); recorded in %s: the host fails on every run until %s serves again or '
                'a human removes that file' % (name, error, paths['failed'], name))


def escalate(gate):
    """The step after a restart that was stopped because the memory did not come back: decided under the lock,
    recorded (the history, a verdict line, a failed-restart record when a human is next), and the textfile."""
    p = gate.p
    name, why = p['escalate']['name'], gate.redact(p['escalate']['why'])[:600]
    paths = _paths(p['state_dir'], name)
    fd = statedir.open_lock(paths['lock'])
    try:
        if statedir.lock(fd, p['lock_timeout']) is None:
            return FAIL, 'another watchdog run holds %s for more than %s s' % (paths['lock'], p['lock_timeout']), {}
        history, damage = load_history(statedir.read_text(paths['history']))
        if damage:
            return FAIL, '%s, and the restart history %s cannot be trusted (%s): a human must look' % (
                why, paths['history'], damage), {}
        decision = decide_escalation(history, time.time(), gate.settings, why)
        hist = decision['history']
        hist['last_action'] = decision['action']
        hist['last_reason'] = decision['reason'][:500]
        _count_step(hist, decision['action'])
        if not gate.check_mode:
            statedir.write_text(paths['history'], json.dumps(hist, indent=1, sort_keys=True) + '\n')
            if decision['action'] == FAIL:
                statedir.write_text(paths['failed'], json.dumps({'at': time.time(), 'error': why}) + '\n')
    finally:
        os.close(fd)
    if not gate.check_mode:
        record = {'time': time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime()), 'state': hist.get('last_state'),
                  'reason': why, 'action': decision['action'], 'decision': decision['reason'][:500], 'step': True}
        try:
            statedir.append_line(paths['verdicts'], json.dumps(gate.redact(record), sort_keys=True),
                                 max_bytes=p['history_max_bytes'])
        except (statedir.StateError, OSError):
            pass
    return decision['action'], decision['reason'], hist


def results_from_histories(state_dir, names):
    """The last result of each instance as its history keeps it (for the textfile when one instance took a step)."""
    out = []
    for name in names:
        try:
            history, dummy = load_history(statedir.read_text(_paths(state_dir, name)['history']))
        except (statedir.StateError, OSError):
            history = None
        history = history or {}
        out.append({'name': name, 'state': history.get('last_state') or 'unknown',
                    'action': history.get('last_action') or 'none', 'history': history})
    return out


def write_textfile(module, results):
    """Rewrite the textfile (when asked, not in check mode); the error, or None."""
    p = module.params
    if not p['textfile'] or module.check_mode:
        return None
    error = _textfile.write(p['textfile'], results, time.time())
    if error:
        # Never silent: a metric that never exists cannot alert on its absence.
        module.warn(error)
    return error


def _plain_name(name):
    return bool(name) and '/' not in name and not name.startswith('.') and '\0' not in name and len(name) <= 200


def main():
    module = AnsibleModule(
        argument_spec=dict(
            state_dir=dict(type='path', required=True),
            instances=dict(type='list', elements='dict', options=dict(
                name=dict(type='str', required=True),
                kind=dict(type='str', default='backend', choices=['backend', 'proxy']),
                verdict=dict(type='dict'),
                restart_method=dict(type='str', default='systemd', choices=['systemd', 'docker', 'compose', 'command']),
                service=dict(type='str'),
                compose_project_dir=dict(type='str'),
                status_command=dict(type='list', elements='str'),
                logs_command=dict(type='list', elements='str'),
                url=dict(type='str'),
                url_is_default=dict(type='bool', default=False),
                api_key=dict(type='str', no_log=True),
            )),
            results_file=dict(type='path'),
            results_timeout=dict(type='float', default=300),
            name=dict(type='str'),
            state=dict(type='str', choices=STATES),
            reason=dict(type='str', default=''),
            service=dict(type='dict', default={}, options=dict(
                running=dict(type='bool'),
                started_at=dict(type='raw'),
                status=dict(type='str'),
            )),
            process_start_time=dict(type='float'),
            record_failure=dict(type='dict', options=dict(
                name=dict(type='str', required=True),
                error=dict(type='str', required=True),
            )),
            escalate=dict(type='dict', options=dict(
                name=dict(type='str', required=True),
                why=dict(type='str', required=True),
            )),
            textfile_names=dict(type='list', elements='str'),
            startup_grace=dict(type='float', default=900),
            cooldown=dict(type='float', default=600),
            max_restarts=dict(type='int', default=3),
            restart_window=dict(type='float', default=86400),
            unknown_limit=dict(type='int', default=3),
            paused_limit=dict(type='float', default=3600),
            reboot=dict(type='bool', default=False),
            reboot_cooldown=dict(type='float', default=21600),
            rehang_window=dict(type='float', default=3600),
            paused=dict(type='bool', default=False),
            lock_timeout=dict(type='float', default=60),
            status_timeout=dict(type='float', default=30),
            log_lines=dict(type='int', default=200),
            history_max_bytes=dict(type='int', default=1024 * 1024),
            textfile=dict(type='path'),
            host=dict(type='str'),
            py_spy=dict(type='str', default='py-spy'),
            meminfo=dict(type='path', default='/proc/meminfo'),
            kernel_log=dict(type='path', default='/dev/kmsg'),
            nvidia_smi=dict(type='str', default='nvidia-smi'),
            evidence_timeout=dict(type='float', default=60),
        ),
        mutually_exclusive=[('instances', 'name'), ('record_failure', 'name'), ('record_failure', 'instances'),
                            ('escalate', 'name'), ('escalate', 'instances'), ('escalate', 'record_failure')],
        required_one_of=[('instances', 'name', 'record_failure', 'escalate')],
        required_together=[('name', 'state')],
        supports_check_mode=True,
    )
    p = module.params
    errors = invalid_settings(dict((key, p[key]) for key in DEFAULTS))
    for key, low in (('lock_timeout', 0), ('status_timeout', 0), ('results_timeout', 0), ('log_lines', 0),
                     ('history_max_bytes', 4096), ('evidence_timeout', 0)):
        value = p[key]
        if math.isnan(value) or not low <= value <= 10 ** 9:
            errors.append('%s must be a number from %s to 1e9, got %r' % (key, low, value))
    if errors:
        module.fail_json(msg='watchdog_gate: invalid settings: %s' % '; '.join(errors))

    if p['name'] is not None:
        items = [{'name': p['name'], 'kind': 'backend', 'restart_method': 'systemd', 'given_service': p['service'],
                  'process_start_time': p['process_start_time'],
                  'verdict': {'state': p['state'], 'reason': p['reason']}}]
    elif p['instances'] is not None:
        items = p['instances']
    elif p['escalate'] is not None:
        items = [{'name': p['escalate']['name']}]
    else:
        items = [{'name': p['record_failure']['name']}]
    names = [item['name'] for item in items]
    bad = [name for name in names if not _plain_name(name)]
    if bad or len(set(names)) != len(names):
        module.fail_json(msg='instance names must be plain, unique file names (no /, not starting with a dot), got %s'
                         % ', '.join(repr(n) for n in names))
    verdicts, missing_why = {}, None
    if p['results_file']:
        # First, so that the background job's file is removed whatever happens next.
        result, why = read_results(p['results_file'], p['results_timeout'])
        verdicts, missing_why = verdicts_from(result, why)
    try:
        # In check mode a state_dir that does not exist yet is not created: every history reads as fresh.
        statedir.check_dir(p['state_dir'], create=not module.check_mode)
    except statedir.StateError as exc:
        module.fail_json(msg=str(exc))
    gate = Gate(module)
    if p['record_failure'] is not None:
        try:
            reason = gate.record_failure()
        except (statedir.StateError, OSError) as exc:
            module.fail_json(msg='cannot record the failed restart: %s' % exc)
        module.exit_json(changed=not module.check_mode, action=FAIL, reason=reason)
    if p['escalate'] is not None:
        try:
            action, reason, hist = escalate(gate)
        except (statedir.StateError, OSError) as exc:
            action, reason, hist = FAIL, 'the watchdog cannot use its state: %s' % exc, {}
        names = p['textfile_names'] or [p['escalate']['name']]
        textfile_error = write_textfile(module, results_from_histories(p['state_dir'], names))
        module.exit_json(changed=action == REBOOT and not module.check_mode, action=action,
                         reason=gate.redact(reason), history=gate.redact(hist), textfile_error=textfile_error)

    results = gate.redact(gate.run(items, verdicts, missing_why))
    if p['name'] is not None:
        one = dict(results[0])
        one['reason'] = one.pop('decision')
        one.setdefault('history', {})
        module.exit_json(changed=False, instances=results, **dict((k, v) for k, v in one.items()
                                                                  if k not in ('name', 'state', 'verdict')))
    textfile_error = write_textfile(module, results)
    facts = {}
    if p['host']:
        facts['vllm_watchdog_results'] = watchdog_results({'instances': results, 'textfile_error': textfile_error},
                                                          p['host'], items, check_mode=module.check_mode)
    module.exit_json(changed=False, instances=results, textfile_error=textfile_error, ansible_facts=facts)


if __name__ == '__main__':
    main()
