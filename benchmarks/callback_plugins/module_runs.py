# -*- coding: utf-8 -*-
"""Count, per host, the tasks that ran a module on that host (not delegated, not controller-only actions).

Benchmark instrumentation (benchmarks/fleet.py), not part of the collection. Enabled with
ANSIBLE_CALLBACK_PLUGINS=benchmarks/callback_plugins ANSIBLE_CALLBACKS_ENABLED=module_runs; writes
``{host: count}`` as JSON to $MODELOPS_MODULE_RUNS at the end of the play run.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os

from ansible.plugins.callback import CallbackBase

DOCUMENTATION = '''
name: module_runs
type: aggregate
short_description: count the module runs on each host
description: Counts, per host, the task results that ran a module on that host.
'''

# Actions that run on the controller only, whatever the host.
CONTROLLER_ONLY = frozenset((
    'set_fact', 'debug', 'assert', 'fail', 'set_stats', 'meta', 'include_tasks', 'import_tasks', 'include_role',
    'import_role', 'add_host', 'group_by', 'include_vars', 'validate_argument_spec', 'pause', 'validate_variables',
))


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = 'aggregate'
    CALLBACK_NAME = 'module_runs'
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self):
        super(CallbackModule, self).__init__()
        self.counts = {}

    def _count(self, result):
        task = result._task  # pylint: disable=protected-access
        action = task.action.split('.')[-1]
        if action in CONTROLLER_ONLY or task.delegate_to:
            return
        host = result._host.get_name()  # pylint: disable=protected-access
        self.counts[host] = self.counts.get(host, 0) + 1

    def v2_runner_on_ok(self, result):
        self._count(result)

    def v2_runner_on_failed(self, result, ignore_errors=False):
        self._count(result)

    def v2_runner_on_unreachable(self, result):
        self._count(result)

    def v2_playbook_on_stats(self, stats):
        path = os.environ.get('MODELOPS_MODULE_RUNS')
        if path:
            with open(path, 'w') as handle:
                json.dump(self.counts, handle)
