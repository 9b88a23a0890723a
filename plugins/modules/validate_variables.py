# -*- coding: utf-8 -*-
# Copyright (c) modelops.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r'''
module: validate_variables
short_description: Name the vllm_* variables nobody reads, and the values that are wrong, one line each
version_added: 1.0.0
author: modelops.vllm maintainers (@modelops)
description:
  - A misspelled variable is silently ignored by Ansible, and a role falls back to its default (C(vllm_ulr) instead of
    C(vllm_url) leaves the check on C(http://127.0.0.1:8000)). This action looks at the variables of every host of
    O(hosts) (their inventory host and group variables, facts and the extra variables; for the host it runs for, the
    play's variables too) and warns, once per name, about every variable that looks meant for this collection
    (C(vllm_*), and C(vlm_*) or C(VLLM_*)) that it does not know, with the closest name it knows
    (C(did you mean vllm_url?)). With O(strict) such a variable fails the task instead.
  - A name is shown with every character that is not printable ASCII escaped, and what it holds is said
    (C(vllm_watchdog_reboot\u200b) has an invisible character, C(\u200b ZERO WIDTH SPACE)); the closest name is looked
    up as the eye reads the name (without invisible characters and combining marks, a Cyrillic or Greek letter that
    looks Latin read as that letter), so a look-alike is never suggested as itself, and one with such a character in
    front of C(vllm_) is warned about too. Host names and values in its lines are escaped too (C(\x1b), C(\r)), so a
    terminal never acts on what an inventory holds, whatever the stdout callback.
  - The names it knows are the options of the roles P(modelops.vllm.watchdog#role) and P(modelops.vllm.rollout#role)
    (their C(meta/argument_specs.yml)), the inventory conventions of docs/fleet.md (C(vllm_url), C(vllm_kind),
    C(vllm_api_key), C(vllm_model), C(vllm_instances), C(vllm_validate_certs), C(vllm_ca_path)), the settings of the
    shipped playbooks (C(vllm_check_*), C(vllm_watchdog_hosts), C(vllm_watchdog_become), C(vllm_watchdog_one_host),
    C(vllm_history_*)),
    the variables of the Prometheus rules template (C(vllm_prometheus_*)) and of the rulebook (C(vllm_eda_*)), and the
    facts the collection sets (C(vllm_health), C(vllm_health_servers), C(vllm_check), C(vllm_checks),
    C(vllm_watchdog_results)). C(vllm_own_variables), a list set on a host, names variables of your own that start
    with C(vllm_); they are not warned about.
  - It also validates the values set on each host (in the inventory or with C(-e)) of the parts named in O(validate),
    by their argument spec, and fails with one line per problem that names the variable, the value, what is allowed
    and the hosts, for example C(value of vllm_watchdog_restart_method must be one of systemd, docker, compose,
    command, got dokcer), before the role's own argument validation would print its whole specification. A number
    with a range (C(vllm_check_*), C(vllm_watchdog_*) and C(vllm_rollout_*) settings) is checked against the range the
    modules check it against, from the collection's one catalogue of settings (C(vllm_check_interval must be a number
    greater than 0 and at most 3600, got 0)). Values of secrets (C(no_log) options) are never validated here, so never
    printed.
  - A URL (C(vllm_url), C(vllm_watchdog_url), C(vllm_rollout_url), the C(url) of an item of C(vllm_instances) or
    C(vllm_watchdog_instances)) must be the server's own base URL. One that names an endpoint (C(http://host:8000/v1),
    the base URL of an OpenAI client, or C(.../metrics)) or has no scheme is one line that names the URL meant, before
    any check runs.
  - The shipped playbooks run it first, before the roles (whose own argument validation would print the whole
    specification on a bad value); the roles run it for the names only, unless the playbook already did (a
    registered C(_vllm_variables)).
options:
  hosts:
    description:
      - With C(run_once), the hosts whose names and values this one run looks at (for example
        C(ansible_play_hosts_all)); a bad value on any of them fails the task, which fails every host of the play.
      - Without it, the task looks at the values of the host it runs for (a bad value fails that host only, and
        the others go on), and the first host of the play also warns, once, about the names of every host of the
        play (C(ansible_play_hosts_all)). This is how the watchdog's playbook runs it, so that one host's mistake
        never stops the watchdog of the others.
    type: list
    elements: str
  validate:
    description:
      - Whose values are validated. V(inventory) the conventions of docs/fleet.md (C(vllm_kind), ...); V(check) the
        C(vllm_check_*) settings; V(watchdog) the options of the watchdog role and its playbook's settings; V(rollout)
        the options of the rollout role; V(history) the settings of the history playbook (C(vllm_history_*)). The
        names of every part are known whatever this says.
    type: list
    elements: str
    default: [inventory, check]
  restarts:
    description:
      - The run restarts services (the watchdog, the rollout). Then a misspelled variable whose closest known name says
        what a restart acts on (C(vllm_watchdog_service), C(vllm_watchdog_restart_method),
        C(vllm_watchdog_restart_command), C(vllm_watchdog_compose_project_dir), C(vllm_instances),
        C(vllm_watchdog_instances), the rollout's C(vllm_rollout_service), C(vllm_rollout_method),
        C(vllm_rollout_command), C(vllm_rollout_compose_project_dir)) fails its host, whatever O(strict) says, in one
        line that names what would have been restarted instead; it would leave the default in effect, and on a host
        with two servers the default unit is the other one.
      - Default true when O(validate) names V(watchdog) or V(rollout).
    type: bool
  strict:
    description:
      - Fail on a variable it does not know, instead of warning. Default the host's C(vllm_strict_variables)
        (false).
    type: bool
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - ansible.builtin.action_common_attributes.conn
  - ansible.builtin.action_common_attributes.flow
attributes:
  action:
    support: full
  async:
    support: none
  become:
    support: none
  bypass_host_loop:
    support: none
  connection:
    support: none
  check_mode:
    support: full
  delegation:
    support: none
  diff_mode:
    support: none
  platform:
    platforms: all
'''

EXAMPLES = r'''
- name: Every vllm_* variable of the play's hosts is one the collection knows, with a valid value
  modelops.vllm.validate_variables:
    hosts: "{{ ansible_play_hosts_all }}"
    validate: [inventory, check, watchdog]
  run_once: true
  register: _vllm_variables
'''

RETURN = r'''
unknown:
  description: The variables it does not know, by name, with the hosts that set them and the closest known name.
  returned: always
  type: list
  elements: dict
  contains:
    name:
      description: The variable.
      type: str
      sample: vllm_ulr
    hosts:
      description: The hosts that have it.
      type: list
      elements: str
      sample: [gb10-busy]
    suggestion:
      description: The closest name it knows, or null.
      type: str
      sample: vllm_url
  sample: [{name: vllm_ulr, hosts: [gb10-busy], suggestion: vllm_url}]
invalid:
  description: One line per value that does not match its spec, naming the variable, the value, what is allowed and the hosts.
  returned: always
  type: list
  elements: str
  sample: ["value of vllm_watchdog_restart_method must be one of: systemd, docker, compose, command, got: dokcer (on gb10-01)"]
msg:
  description: What it found, in one line; the failure's reason when it failed.
  returned: always
  type: str
'''
