# -*- coding: utf-8 -*-
# Copyright (c) modelops.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""modelops.vllm.validate_variables: name the vllm_* variables nobody reads, and the values that are wrong,
in one line each (the documentation is plugins/modules/validate_variables.py). Runs on the controller."""

from __future__ import annotations

from ansible.errors import AnsibleError
from ansible.module_utils.common.arg_spec import ArgumentSpecValidator
from ansible.module_utils.parsing.convert_bool import boolean
from ansible.plugins.action import ActionBase

from ansible_collections.modelops.vllm.plugins.plugin_utils import _variables
from ansible_collections.modelops.vllm.plugins.plugin_utils._printable import escape, name as shown_name

ARGS = {
    'hosts': {'type': 'list', 'elements': 'str'},
    'validate': {'type': 'list', 'elements': 'str', 'default': ['inventory', 'check']},
    'strict': {'type': 'bool'},
    'restarts': {'type': 'bool'},
}


def _unique(items):
    out = []
    for item in items:
        if item not in out:
            out.append(item)
    return out


def _validate(spec, values):
    result = ArgumentSpecValidator(spec).validate(values)
    return result.error_messages


class ActionModule(ActionBase):

    TRANSFERS_FILES = False
    _requires_connection = False

    def run(self, tmp=None, task_vars=None):
        task_vars = task_vars or {}
        result = super(ActionModule, self).run(tmp, task_vars)
        del tmp
        dummy, args = self.validate_argument_spec(argument_spec=ARGS)
        groups = args['validate']
        bad = [g for g in groups if g not in _variables.GROUPS]
        if bad:
            raise AnsibleError('validate: %s is not one of %s' % (', '.join(bad), ', '.join(_variables.GROUPS)))
        me = task_vars.get('inventory_hostname')
        hostvars = task_vars.get('hostvars') or {}
        if args['hosts'] is not None:  # run once for these hosts: their names and their values
            checked = list(args['hosts'])
            named = checked
        else:  # on each host: its own values; the names of the play's hosts, said once by the first of them
            checked = [me]
            active = list(task_vars.get('ansible_play_hosts') or [me])
            named = list(task_vars.get('ansible_play_hosts_all') or [me]) if active[:1] == [me] else []

        strict = args['strict']
        if strict is None:
            strict = boolean(self._templar.template(task_vars.get('vllm_strict_variables', False)), strict=False)

        restarts = args['restarts']
        if restarts is None:
            restarts = bool(set(groups) & set(('watchdog', 'rollout')))

        known = _variables.known_specs()
        specs = _variables.specs_of(groups)
        names_by_host, values_by_host, typed = [], [], {}
        for host in _unique(named + checked):
            try:
                mine = hostvars[host]
            except (KeyError, TypeError):
                continue
            names = set(mine)
            if host == me:  # what only this task sees: play vars, role parameters
                names.update(name for name in task_vars if isinstance(name, str))
            own = self._value(mine, 'vllm_own_variables') or []
            own = [own] if isinstance(own, str) else list(own) if isinstance(own, (list, tuple)) else []
            names_by_host.append((host, sorted(name for name in names if name not in own)))
            if host not in checked:
                continue
            values = {}
            for name in sorted(set(mine) & set(specs)):
                value = self._value(mine, name, _variables.NOT_SET)
                if value is not _variables.NOT_SET:
                    values[name] = value
            values_by_host.append((host, values))
            # What the names that say what a restart acts on hold on this host, set or misspelled (for the message).
            typed[host] = dict((name, self._value(mine, name)) for name in names
                               if name in _variables.TARGETS or (_variables.looks_ours(name) and name not in known))
            typed[host] = dict((k, v) for k, v in typed[host].items() if v is not None)

        everyone = _variables.unknown_names(names_by_host, known)
        said = [entry for entry in everyone if set(entry['hosts']) & set(named)]
        mine = [dict(entry, hosts=[h for h in entry['hosts'] if h in checked]) for entry in everyone
                if set(entry['hosts']) & set(checked)]
        # Every line as a terminal may show it: a name, a host or a value set in an inventory may hold escapes.
        problems = _variables.value_problems(values_by_host, specs, _validate, name_hosts=args['hosts'] is not None)
        invalid = [escape(line, keep='') for line in problems]
        # Where a run restarts, a misspelled name that says what it acts on is an error on its host, never a warning.
        wrong_target = _variables.targets(mine) if restarts else []
        defaults = dict((name, spec.get('default')) for name, spec in known.items()
                        if isinstance(spec, dict) and 'default' in spec)
        # (each host's own run says it, as an error: never a warning first)
        warnings = [escape(_variables.unknown_message(entry), keep='') for entry in said
                    if not (restarts and _variables.targets([entry]))]
        result.update(changed=False, unknown=mine, invalid=invalid)
        if warnings and not strict:
            result['warnings'] = warnings
        errors = invalid + [_variables.target_message(entry, typed, defaults) for entry in wrong_target] + (
            [_variables.unknown_message(entry) for entry in mine if entry not in wrong_target] if strict else [])
        if errors:
            result['failed'] = True
            result['msg'] = escape('; '.join(errors), keep='') + (
                ' (vllm_strict_variables is true: an unknown variable is an error)'
                if strict and [entry for entry in mine if entry not in wrong_target] else '')
        elif mine:
            result['msg'] = '%d variable(s) that modelops.vllm does not know: %s' % (
                len(mine), ', '.join(shown_name(entry['name']) for entry in mine))
        else:
            result['msg'] = 'every vllm_* variable is known, and every value checked is valid'
        return result

    @staticmethod
    def _value(hostvars_of_host, name, missing=None):
        """A host's variable, templated in that host's context; ``missing`` when it is not set or cannot be
        templated here (a template that reads a play or role variable: the role's own validation sees it)."""
        if name not in hostvars_of_host:
            return missing
        try:
            return hostvars_of_host[name]
        except Exception:  # pylint: disable=broad-except
            return missing
