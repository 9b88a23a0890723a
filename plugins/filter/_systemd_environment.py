# -*- coding: utf-8 -*-
# Copyright (c) modelops.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r'''
name: _systemd_environment
short_description: Internal - The C(Environment=) lines of a systemd unit or drop-in, from a dict
version_added: 1.0.0
author: modelops.vllm maintainers (@modelops)
description:
  - Internal to the P(modelops.vllm.rollout#role) role, not an interface of the collection; it may change or go in any
    release.
  - Returns one line C(Environment="KEY=value") per item of the dict, in its order, joined by newlines (no newline
    after the last one). The C(KEY=value) assignment is a JSON string, quoted and escaped as systemd reads it (C(\"),
    C(\\), C(\n)), non-ASCII characters kept; C(%) is doubled (a systemd specifier otherwise).
  - The role P(modelops.vllm.rollout#role) writes the new environment of an upgrade in its drop-in with it.
options:
  _input:
    description: The environment, variable names and their values (a value that is not a string is written as its text).
    type: dict
    required: true
'''

EXAMPLES = r'''
- name: A drop-in with the new environment of the service
  ansible.builtin.copy:
    dest: /etc/systemd/system/vllm.service.d/rollout.conf
    content: |
      [Service]
      {{ {'VLLM_IMAGE': 'vllm/vllm-openai:v0.11.0'} | modelops.vllm._systemd_environment }}
    mode: "0644"
'''

RETURN = r'''
_value:
  description: The lines, for example C(Environment="VLLM_IMAGE=vllm/vllm-openai:v0.11.0").
  type: str
'''

import json

from ansible.errors import AnsibleFilterError


def systemd_environment(environment):
    if not isinstance(environment, dict):
        raise AnsibleFilterError('systemd_environment expects a dict, got %s' % type(environment).__name__)
    return u'\n'.join(u'Environment=%s' % json.dumps(u'%s=%s' % (key, value), ensure_ascii=False).replace(u'%', u'%%')
                      for key, value in environment.items())


class FilterModule(object):
    def filters(self):
        return {'_systemd_environment': systemd_environment}
