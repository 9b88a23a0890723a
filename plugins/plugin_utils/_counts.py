# -*- coding: utf-8 -*-
# Copyright (c) modelops.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""How many results are in each state, and how a line says it: the watchdog's summary and the fleet check's counts.

Private to this collection; controller side (filters). A filter imports it, never another filter.
"""

from __future__ import annotations

from ansible.errors import AnsibleFilterError


def count_states(results, name):
    """Results per state (a result without one is unknown), in the order the states first appear; ``name`` (the
    filter's) leads every error."""
    if not isinstance(results, (list, tuple)):
        raise AnsibleFilterError('%s expects a list of results, got %s' % (name, type(results).__name__))
    counts = {}
    for item in results:
        if not isinstance(item, dict):
            raise AnsibleFilterError('%s expects dicts, got %s' % (name, type(item).__name__))
        state = item.get('state') or 'unknown'
        counts[state] = counts.get(state, 0) + 1
    return counts


def said_counts(counts, states=None):
    """'<n> <state>, ...', in the order of states (default: the order of counts)."""
    return ', '.join('%d %s' % (counts[state], state) for state in (counts if states is None else states))
