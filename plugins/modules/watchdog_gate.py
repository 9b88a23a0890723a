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
version_added: 1.0.0
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
    RV(instances[].action=fail), with the evidence. A V(down) server that is not restarted O(down_limit) runs in a row
    (a crash loop whose start is always inside the grace, a start that never ends) gives RV(instances[].action=fail),
    with the evidence (the service's log). V(paused) (vLLM's own pause API) never restarts; paused on every run for
    O(paused_limit) seconds gives RV(instances[].action=fail). A pause (O(paused), or a pause file) reports only.
  - Before any restart, whatever the verdict and the method, what the restart acts on (the unit, the container) is
    shown to serve the URL the check judged, so that a wrong or misspelt C(service) or C(url) never restarts another
    server. The proof - the service's main process (systemd's C(MainPID), the container's C(.State.Pid)) or a process
    below it listens on the URL's address and port (read from C(/proc/<pid>/net/tcp{,6}) and the sockets in
    C(/proc/<pid>/fd)), or a container with a network of its own publishes that port (C(docker inspect --format
    '{{json .NetworkSettings.Ports}}')). For a V(down) server, a service that does not run while nothing listens on the
    URL's port (starting it stops no server), or one that runs and was seen serving at this URL before (its history),
    is proof too. The V(command) method names no process, so there the instance must say so,
    O(instances[].assume_url_is_service). What contradicts the URL is never outweighed - the service listens on other
    ports, another process holds the URL's port, the service manager has no such unit (C(LoadState=not-found)), a
    unit that does not run while the URL answers. Unproven, RV(instances[].action=fail), a human must look, and the
    decision names the URL, the unit and what each holds; nothing is restarted.
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
    C(<state_dir>/<name>.restart-failed); it changed nothing, so it gives no start-up grace and no cooldown, and it
    counts against O(max_restarts), as every restart attempted does.
notes:
  - What to do for each verdict and each RV(instances[].action=fail) (what the watchdog did, what to check next, the
    command that shows it) is in the collection's C(docs/runbook.md); C(ansible-galaxy collection list modelops.vllm)
    shows where the collection is installed. M(modelops.vllm.watchdog_history) reads back what this module keeps.
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
      assume_url_is_service:
        description:
          - What a restart of this instance acts on serves its URL, on the inventory's word, where it cannot be shown
            (the V(command) method names no process; a service behind NAT). Never outweighs what contradicts it.
        type: bool
        default: false
      restart_command:
        description:
          - For O(instances[].restart_method=command), the restart command (argv), as a decision names what it acts on
            and, in check mode, what it would run.
        type: list
        elements: str
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
  check_results:
    description:
      - The RV(modelops.vllm.health#module:servers) of one check of the whole play on the controller (the
        modelops.vllm.watchdog role's C(vllm_watchdog_check_on_controller)), each named C(<host>/<instance>); the
        verdicts of O(host)'s instances are taken from it by that name, and an instance it has no verdict for is
        V(unknown).
      - Needs O(host). Not with O(results_file) or O(check_error).
    type: list
    elements: dict
  check_error:
    description:
      - Why the check of O(instances) gave no verdicts at all (a check in the background that could not start, for
        one). Every instance without a verdict of its own is V(unknown) with this reason.
      - Not with O(results_file) or O(check_results).
    type: str
  ranks:
    description:
      - What the hosts of the other ranks of the O(instances) that span hosts said this run (docs/multinode.md), as the
        C(results) of a loop of M(modelops.vllm.service_info) over those ranks, each with its C(item) (C(instance),
        C(rank), C(host), C(service)), as the modelops.vllm.watchdog role registers it; a host that did not answer is
        an C(unreachable) result.
      - An instance with ranks is judged from its head's verdict, changed only by its ranks; a verdict that proves a
        step (V(idle), V(busy), V(up), V(restarted)) stands, any other is V(down) when a rank's service does not run
        or its host did not answer, and the service the decision reads runs only when every rank runs, since the
        latest start of them all.
    type: list
    elements: dict
    default: []
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
    choices: [idle, busy, frozen, stuck, restarted, starting, down, sleeping, paused, up, unknown]
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
  record_outcome:
    description:
      - Record how the restart the gate decided for an instance ended (the verdict after it), in its restart history (the
        last step's C(outcome), C(outcomes)) and as a line of its verdict history, and decide nothing else. A failed one
        is O(record_failure).
    type: dict
    suboptions:
      name:
        description: The instance.
        type: str
        required: true
      outcome:
        description: The verdict after the restart (V(idle), V(busy), ...).
        type: str
        required: true
      reason:
        description: The verdict's reason.
        type: str
        default: ''
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
  textfile_required:
    description:
      - The caller fails the host, with RV(textfile_error), when O(textfile) cannot be written (the
        P(modelops.vllm.watchdog#role) role's C(vllm_watchdog_textfile_required)). Returned as given, so that the
        role's report says the mistake once, by that failure or else by one summary line.
    type: bool
    default: false
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
  down_limit:
    description:
      - After this many V(down) verdicts in a row without a restart, RV(instances[].action=fail) (a human should look,
        at the service's log in the evidence). A start seen again within O(startup_grace) is one load going on and is
        not counted again; a restart starts the count over.
    type: int
    default: 3
  release_memory:
    description:
      - Whether the restart (M(modelops.vllm.restart)) stops, waits for the memory, then starts; only for the commands a
        decision names (RV(instances[].commands)).
    type: bool
    default: false
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
  setting_prefix:
    description:
      - What the reasons put before a setting's name when they name one (V(reboot), V(rehang_window),
        V(assume_url_is_service), V(py_spy), ...). The P(modelops.vllm.watchdog#role) role passes V(vllm_watchdog_), so
        that its reasons name its variables.
    type: str
    default: ''
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
        - For a V(stuck) or V(down) server, what shows (or not) that what a restart acts on serves the URL (C(unit),
          C(exists), C(listens), C(listening_on), C(published), C(process), C(endpoint), C(held_by), C(can_prove),
          C(assumed), C(why), C(default_url)).
      type: dict
    commands:
      description: With RV(instances[].action=restart), the commands the restart runs, in words.
      type: str
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
textfile_required:
  description: O(textfile_required), as given.
  returned: with O(instances)
  type: bool
  sample: true
textfile_error:
  description:
    - Why O(textfile) could not be written (null when it was, or was not asked for), in the same words on every host
      (a missing directory is named, never a temporary file). The module also warns with it unless O(host) is given;
      each result of C(ansible_facts.vllm_watchdog_results) carries it (C(textfile_error)), and the P(modelops.vllm.watchdog#role) role says
      it once in its report and fails the host unless C(vllm_watchdog_textfile_required) is false.
  returned: with O(instances)
  type: str
  sample: null
action:
  description:
    - With O(name) (one instance), its RV(instances[].action); with O(record_failure), V(fail); with O(escalate),
      V(reboot) or V(fail); with O(record_outcome), V(none).
  returned: with O(name), O(record_failure), O(record_outcome) or O(escalate)
  type: str
  sample: none
reason:
  description: With O(name), its RV(instances[].decision); with O(escalate), why that step; with O(record_outcome), the
    outcome as recorded.
  returned: with O(name), O(record_failure), O(record_outcome) or O(escalate)
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

import time

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.modelops.vllm.plugins.module_utils import _statedir as statedir
from ansible_collections.modelops.vllm.plugins.module_utils import _textfile
from ansible_collections.modelops.vllm.plugins.module_utils._decide import DEFAULTS, invalid_settings
from ansible_collections.modelops.vllm.plugins.module_utils._gate import Gate, results_from_histories
from ansible_collections.modelops.vllm.plugins.module_utils._jobs import read_results, verdicts_from
from ansible_collections.modelops.vllm.plugins.module_utils._results import watchdog_results
from ansible_collections.modelops.vllm.plugins.module_utils._service import METHODS
from ansible_collections.modelops.vllm.plugins.module_utils._settings import GATE_LIMITS, GATE_SETTINGS, GUARD_RAILS, option_specs
from ansible_collections.modelops.vllm.plugins.module_utils._types import FAIL, REBOOT, STATES as VERDICTS, in_range, range_words

STATES = list(VERDICTS)  # every verdict a check can give, from the one list (_types)


def invalid(p):
    """What is wrong with the settings (the decision's, then the gate's own bounds)."""
    errors = invalid_settings(dict((key, p[key]) for key in DEFAULTS))
    for key, limits in sorted(GATE_LIMITS.items()):
        if in_range(p[key], limits) is None:
            errors.append('%s must be a number %s, got %r' % (key, range_words(limits, at_least='from'), p[key]))
    return errors


def items_of(p):
    """The instances this run is about, in the gate's form, whatever the mode."""
    if p['name'] is not None:
        return [{'name': p['name'], 'kind': 'backend', 'restart_method': 'systemd', 'given_service': p['service'],
                 'process_start_time': p['process_start_time'],
                 'verdict': {'state': p['state'], 'reason': p['reason']}}]
    if p['instances'] is not None:
        return p['instances']
    if p['escalate'] is not None:
        return [{'name': p['escalate']['name']}]
    if p['record_outcome'] is not None:
        return [{'name': p['record_outcome']['name']}]
    return [{'name': p['record_failure']['name']}]


def given_verdicts(p):
    """({name: verdict}, why an instance has none) for the instances that carry no verdict of their own: from a
    background check's results file, from a check of the whole play on the controller (named <host>/<instance>), or
    the reason the check gave none."""
    if p['results_file']:
        # First, so that the background job's file is removed whatever happens next.
        result, why = read_results(p['results_file'], p['results_timeout'])
        return verdicts_from(result, why)
    if p['check_results'] is not None:
        prefix = '%s/' % (p['host'] or '')
        return dict((server['name'][len(prefix):], server) for server in p['check_results']
                    if isinstance(server.get('name'), str) and server['name'].startswith(prefix)), None
    return {}, p['check_error'] or None


def record_outcome(module, gate, dummy_items, dummy_given):
    """record_outcome: how a restart ended; recorded, nothing else decided."""
    p = module.params['record_outcome']
    try:
        said = gate.record_outcome(p['name'], p['outcome'], p['reason'])
    except (statedir.StateError, OSError) as exc:
        module.fail_json(msg='cannot record the outcome of the restart: %s' % exc)
    module.exit_json(changed=not module.check_mode, action='none', reason=said)


def record_failure(module, gate, dummy_items, dummy_given):
    """record_failure: the restart of one instance failed; recorded, nothing else decided."""
    p = module.params
    try:
        reason = gate.record_failure(p['record_failure']['name'], p['record_failure']['error'])
    except (statedir.StateError, OSError) as exc:
        module.fail_json(msg='cannot record the failed restart: %s' % exc)
    module.exit_json(changed=not module.check_mode, action=FAIL, reason=reason)


def escalate(module, gate, dummy_items, dummy_given):
    """escalate: the step after a restart stopped half-way, then the textfile of the host's instances."""
    p = module.params
    try:
        action, reason, hist = gate.escalate(p['escalate']['name'], p['escalate']['why'])
    except (statedir.StateError, OSError) as exc:
        action, reason, hist = FAIL, 'the watchdog cannot use its state: %s' % exc, {}
    names = p['textfile_names'] or [p['escalate']['name']]
    textfile_error = write_textfile(module, results_from_histories(p['state_dir'], names))
    module.exit_json(changed=action == REBOOT and not module.check_mode, action=action,
                     reason=gate.redact(reason), history=gate.redact(hist), textfile_error=textfile_error)


def decide_one(module, gate, items, dummy_given):
    """name and state: one instance, its service state given; its decision at the top of the result too."""
    results = gate.redact(gate.run(items, {}, None))
    one = dict(results[0])
    one['reason'] = one.pop('decision')
    one.setdefault('history', {})
    module.exit_json(changed=False, instances=results, **dict((k, v) for k, v in one.items()
                                                              if k not in ('name', 'state', 'verdict')))


def decide_instances(module, gate, items, given):
    """instances: every instance of the host, then the textfile and the host's fact."""
    p = module.params
    verdicts, missing_why = given
    results = gate.redact(gate.run(items, verdicts, missing_why))
    # The check's own warnings (a freeze_limit not well above this server's longest step), one line each.
    for item in items:
        verdict = item.get('verdict') or (verdicts or {}).get(item['name'])
        for warning in ((verdict.get('config_warnings') if isinstance(verdict, dict) else None) or [])[:5]:
            module.warn('%s/%s: %s' % (p['host'] or '?', item['name'], gate.redact(str(warning))[:500]))
    textfile_error = write_textfile(module, results)
    facts = {}
    if p['host']:
        facts['vllm_watchdog_results'] = watchdog_results({'instances': results, 'textfile_error': textfile_error},
                                                          p['host'], items, check_mode=module.check_mode)
    module.exit_json(changed=False, instances=results, textfile_error=textfile_error,
                     textfile_required=p['textfile_required'], ansible_facts=facts)


def write_textfile(module, results):
    """Rewrite the textfile (when asked, not in check mode); the error, or None."""
    p = module.params
    if not p['textfile'] or module.check_mode:
        return None
    error = _textfile.write(p['textfile'], results, time.time())
    if error and not p['host']:
        # Never silent: a metric that never exists cannot alert on its absence. With host, the results carry it and
        # the role says it once in its report (a warning too would say it again, on every host).
        module.warn(error)
    return error


def _plain_name(name):
    return bool(name) and '/' not in name and not name.startswith('.') and '\0' not in name and len(name) <= 200


def argument_spec():
    return dict(
        state_dir=dict(type='path', required=True),
        instances=dict(type='list', elements='dict', options=dict(
            name=dict(type='str', required=True),
            kind=dict(type='str', default='backend', choices=['backend', 'proxy']),
            verdict=dict(type='dict'),
            restart_method=dict(type='str', default='systemd', choices=list(METHODS)),
            service=dict(type='str'),
            compose_project_dir=dict(type='str'),
            status_command=dict(type='list', elements='str'),
            logs_command=dict(type='list', elements='str'),
            url=dict(type='str'),
            url_is_default=dict(type='bool', default=False),
            assume_url_is_service=dict(type='bool', default=False),
            restart_command=dict(type='list', elements='str'),
            api_key=dict(type='str', no_log=True),
        )),
        results_file=dict(type='path'),
        check_results=dict(type='list', elements='dict'),
        check_error=dict(type='str'),
        ranks=dict(type='list', elements='dict', default=[]),
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
        record_outcome=dict(type='dict', options=dict(
            name=dict(type='str', required=True),
            outcome=dict(type='str', required=True),
            reason=dict(type='str', default=''),
        )),
        textfile_names=dict(type='list', elements='str'),
        textfile_required=dict(type='bool', default=False),
        release_memory=dict(type='bool', default=False),
        paused=dict(type='bool', default=False),
        textfile=dict(type='path'),
        host=dict(type='str'),
        py_spy=dict(type='str', default='py-spy'),
        meminfo=dict(type='path', default='/proc/meminfo'),
        kernel_log=dict(type='path', default='/dev/kmsg'),
        nvidia_smi=dict(type='str', default='nvidia-smi'),
        setting_prefix=dict(type='str', default=''),
        # The guard rails and the gate's own bounds: types and defaults from the one catalogue.
        **dict(option_specs(GUARD_RAILS), **option_specs(GATE_SETTINGS))
    )


# What a run does, by the option that asks for it (mutually exclusive, one of them required); without any of the
# first four, it decides every instance given in `instances`.
MODES = (('record_failure', record_failure), ('escalate', escalate), ('record_outcome', record_outcome),
         ('name', decide_one))


def main():
    """One run of the gate: the options checked, the state directory made sure of, then what its mode asks."""
    module = AnsibleModule(
        argument_spec=argument_spec(),
        mutually_exclusive=[('instances', 'name', 'record_failure', 'escalate', 'record_outcome'),
                            ('results_file', 'check_results', 'check_error')],
        required_one_of=[('instances', 'name', 'record_failure', 'escalate', 'record_outcome')],
        required_together=[('name', 'state')],
        required_by={'check_results': 'host'},
        supports_check_mode=True,
    )
    p = module.params
    errors = invalid(p)
    if errors:
        module.fail_json(msg='watchdog_gate: invalid settings: %s' % '; '.join(errors))
    items = items_of(p)
    names = [item['name'] for item in items]
    if any(not _plain_name(name) for name in names) or len(set(names)) != len(names):
        module.fail_json(msg='instance names must be plain, unique file names (no /, not starting with a dot), got %s'
                         % ', '.join(repr(n) for n in names))
    # Before the state directory is used: a background check's results file is removed whatever follows.
    given = given_verdicts(p)
    try:
        # In check mode a state_dir that does not exist yet is not created: every history reads as fresh.
        statedir.check_dir(p['state_dir'], create=not module.check_mode)
    except statedir.StateError as exc:
        module.fail_json(msg=str(exc))
    gate = Gate(p, check_mode=module.check_mode)
    for option, mode in MODES:
        if p[option] is not None:
            return mode(module, gate, items, given)
    return decide_instances(module, gate, items, given)


if __name__ == '__main__':
    main()
