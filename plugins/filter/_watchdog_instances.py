# -*- coding: utf-8 -*-
# Copyright (c) modelops.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r'''
name: _watchdog_instances
short_description: Internal - The instances of the modelops.vllm.watchdog role, each with its settings filled in
version_added: 1.0.0
author: modelops.vllm maintainers (@modelops)
description:
  - Internal to the P(modelops.vllm.watchdog#role) and P(modelops.vllm.rollout#role) roles, not an interface of the
    collection; it may change or go in any release.
  - Takes C(vllm_watchdog_instances) and the single-instance settings, and returns one dict per instance, the
    settings overridden by the instance's own keys. An empty list gives one instance made of the settings.
  - With O(keys), only those keys are kept (for example the ones M(modelops.vllm.health) takes in O(modelops.vllm.health#module:servers)).
options:
  _input:
    description: The instances.
    type: list
    elements: dict
    required: true
  base:
    description: The settings every instance starts from.
    type: dict
    required: true
  keys:
    description: Keep only these keys.
    type: list
    elements: str
  host:
    description:
      - Name each instance C(<host>/<name>), as one check of every instance of the play names its servers (the role's
        check from the controller).
    type: str
  problems:
    description:
      - With O(settings), return what is wrong (a list of sentences, empty when nothing is) instead of the instances,
        so that a task that must not show the instances (they may carry API keys) can fail with the sentences.
      - What is wrong is then returned, never raised (instance names that are not unique, an instance that is not a dict).
    type: bool
    default: false
  head:
    description:
      - The inventory name of the host the instances run on. With O(settings), the other ranks of an instance that
        spans hosts (its C(ranks)) must be other hosts.
      - Without O(settings), each instance gets C(steps), the order a restart of it runs in across hosts (the head is
        rank 0 on this host), C(stop) and C(start), lists of C(host), C(rank), C(restart_method), C(service) and
        C(compose_project_dir). The head stops first, then every other rank, the last first; the head starts first,
        then every other rank in order. An instance without ranks has the head alone in each.
    type: str
  inventory:
    description:
      - With O(settings), the inventory's hosts (C(groups.all)), of which every rank's C(host) must be one.
    type: list
    elements: str
  settings:
    description:
      - The role's check and guard-rail settings (C(interval), C(probe_timeout), C(metrics_timeout), C(startup_grace),
        C(cooldown), C(max_restarts), C(restart_window), C(unknown_limit), C(paused_limit), C(stall_window),
        C(command_timeout), C(ready_timeout), C(ready_delay), C(reboot_cooldown), C(rehang_window), C(memory_threshold),
        C(memory_fraction), C(memory_timeout), C(reboot_timeout), C(evidence_timeout)). When
        given, they and every instance are checked (the role's preflight), and an error names what is wrong.
    type: dict
'''

EXAMPLES = r'''
- name: Merge
  ansible.builtin.debug:
    msg: "{{ [{'name': 'embed', 'url': 'http://127.0.0.1:8001'}] | modelops.vllm._watchdog_instances({'service': 'vllm'}) }}"
'''

RETURN = r'''
_value:
  description: One dict per instance.
  type: list
  elements: dict
'''


from ansible.errors import AnsibleFilterError

from ansible_collections.modelops.vllm.plugins.module_utils import _ranks
from ansible_collections.modelops.vllm.plugins.module_utils._service import problems as method_problems
from ansible_collections.modelops.vllm.plugins.module_utils._settings import WATCHDOG_LIMITS
from ansible_collections.modelops.vllm.plugins.module_utils._types import range_problems
from ansible_collections.modelops.vllm.plugins.module_utils._urls import url_mistake


def invalid(settings, instances, head=None, inventory=None):
    """What is wrong with the settings and the merged instances, as messages."""
    errors = range_problems(settings, WATCHDOG_LIMITS, name='vllm_watchdog_%s')
    for one in instances:
        name = one.get('name')
        errors.extend('%s: %s' % (name, problem) for problem in _ranks.problems(one, head, inventory))
        errors.extend('%s: %s' % (name, problem) for problem in method_problems(
            one.get('restart_method'), one.get('service'), one.get('compose_project_dir'), one.get('restart_command')))
        if one.get('kind', 'backend') not in ('backend', 'proxy'):
            errors.append('%s: kind must be backend or proxy, got %r' % (name, one.get('kind')))
        mistake = url_mistake(one.get('url'))
        if mistake:
            errors.append('%s: %s' % (name, mistake))
    return errors


def watchdog_instances(instances, base, keys=None, settings=None, problems=False, host=None, head=None,
                       inventory=None):
    if not isinstance(instances, (list, tuple)) or not isinstance(base, dict):
        return _refuse(problems, 'watchdog_instances expects a list of dicts and a dict of settings')
    merged = []
    for item in instances or [{}]:
        if not isinstance(item, dict):
            return _refuse(problems, 'every instance must be a dict, got %s' % type(item).__name__)
        one = dict(base)
        one.update(item)
        if 'url' in item:
            one['url_is_default'] = False
        if head is not None and settings is None:
            one['steps'] = _ranks.restart_steps(one, head)  # the order of a restart across hosts, on its head
        if one.get('ranks') and settings is None:
            one['ranks'] = _ranks.ranks_of(one)
        if keys:
            one = dict((k, one[k]) for k in keys if k in one)
        merged.append(one)
    names = [m.get('name') for m in merged]
    if 'name' in (keys or ['name']) and len(set(names)) != len(names):
        return _refuse(problems, 'instance names must be unique on a host: %s' % ', '.join(str(n) for n in names))
    if host is not None:
        merged = [dict(one, name='%s/%s' % (host, one.get('name'))) for one in merged]
    if settings is not None:
        errors = invalid(settings, merged, head, inventory)
        if problems:
            return errors
        if errors:
            raise AnsibleFilterError('modelops.vllm.watchdog: invalid settings (see ansible-doc -t role '
                                     'modelops.vllm.watchdog): %s' % '; '.join(errors))
    return merged


def _refuse(problems, message):
    """With ``problems``, what is wrong is returned, never raised: the role works the instances out in a task that
    hides its result (they may carry API keys), and says the problems in the next one."""
    if problems:
        return [message]
    raise AnsibleFilterError(message)


class FilterModule(object):
    def filters(self):
        return {'_watchdog_instances': watchdog_instances}
