# -*- coding: utf-8 -*-
"""Where a play's time goes, task by task: wall time of each task and the time each host's result took.

Benchmark instrumentation (benchmarks/fleet.py --profile), not part of the collection. Enabled with
ANSIBLE_CALLBACK_PLUGINS=benchmarks/callback_plugins ANSIBLE_CALLBACKS_ENABLED=task_profile; writes a JSON list,
one entry per task in the order they ran, to $MODELOPS_TASK_PROFILE at the end of the run:
``{"task": name, "action": action, "wall": seconds from its start to the next task's, "results": host results,
"skipped": skipped hosts, "host_seconds": the sum of each host's time from its start to its result,
"host_max": the slowest host's}``. (Ansible's own profile_tasks, in ansible.posix, gives the wall time only.)
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import time

from ansible.plugins.callback import CallbackBase

DOCUMENTATION = '''
name: task_profile
type: aggregate
short_description: the time of each task and of each host's result
description: Records each task's wall time and the time of each host's result, as JSON.
'''


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = 'aggregate'
    CALLBACK_NAME = 'task_profile'
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self):
        super(CallbackModule, self).__init__()
        self.tasks = []
        self.current = None
        self.starts = {}

    def _close(self):
        if self.current is not None:
            self.current['wall'] = round(time.monotonic() - self.current.pop('_started'), 3)
            self.tasks.append(self.current)
            self.current = None

    def _task_start(self, task):
        self._close()
        self.current = {'task': task.get_name(), 'action': task.action, '_started': time.monotonic(),
                        'results': 0, 'skipped': 0, 'host_seconds': 0.0, 'host_max': 0.0}
        self.starts = {}

    def v2_playbook_on_task_start(self, task, is_conditional):
        self._task_start(task)

    def v2_playbook_on_handler_task_start(self, task):
        self._task_start(task)

    def v2_runner_on_start(self, host, task):
        self.starts[host.get_name()] = time.monotonic()

    def _result(self, result, skipped=False):
        if self.current is None:
            return
        host = result._host.get_name()  # pylint: disable=protected-access
        started = self.starts.pop(host, None)
        if skipped:
            self.current['skipped'] += 1
            return
        self.current['results'] += 1
        if started is not None:
            took = time.monotonic() - started
            self.current['host_seconds'] = round(self.current['host_seconds'] + took, 3)
            self.current['host_max'] = round(max(self.current['host_max'], took), 3)

    def v2_runner_on_ok(self, result):
        self._result(result)

    def v2_runner_on_failed(self, result, ignore_errors=False):
        self._result(result)

    def v2_runner_on_unreachable(self, result):
        self._result(result)

    def v2_runner_on_skipped(self, result):
        self._result(result, skipped=True)

    def v2_playbook_on_stats(self, stats):
        self._close()
        path = os.environ.get('MODELOPS_TASK_PROFILE')
        if path:
            with open(path, 'w') as handle:
                json.dump(self.tasks, handle, indent=1)
