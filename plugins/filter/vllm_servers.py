# -*- coding: utf-8 -*-
# Copyright (c) modelops.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r'''
name: vllm_servers
short_description: Build the O(modelops.vllm.health#module:servers) list of a fleet from the inventory
version_added: 1.0.0
author: modelops.vllm maintainers (@modelops)
description:
  - Takes host names and returns one server per host and instance for M(modelops.vllm.health)'s O(modelops.vllm.health#module:servers),
    following the collection's inventory conventions.
  - Per host, C(vllm_url), C(vllm_kind) (V(backend) or V(proxy)), C(vllm_api_key), C(vllm_model); or
    C(vllm_instances), a list of dicts with C(name), C(url) and the same optional keys, for several instances on one
    host.
  - The default C(vllm_url) is V(http://<ansible_host>:8000) when the check runs on the controller, and
    V(http://127.0.0.1:8000) when it runs on the host itself (O(on_host)), as the P(modelops.vllm.watchdog#role)
    role does.
  - The name of each server is the host name, or C(<host>/<instance>) for instances.
options:
  _input:
    description: Host names, for example C(groups['vllm']).
    type: list
    elements: str
    required: true
  hostvars:
    description: The C(hostvars) of the play.
    type: dict
    required: true
  on_host:
    description: The check runs on the host itself (the default URL is then V(http://127.0.0.1:8000)).
    type: bool
    default: false
'''

EXAMPLES = r'''
- name: Check every backend and proxy at once, from the controller
  modelops.vllm.health:
    servers: "{{ groups['vllm'] | modelops.vllm.vllm_servers(hostvars) }}"
  run_once: true
  delegate_to: localhost
'''

RETURN = r'''
_value:
  description: One dict per server, with C(name), C(url), C(kind) and, when set, C(api_key) and C(model).
  type: list
  elements: dict
'''

from ansible.errors import AnsibleFilterError

from ansible_collections.modelops.vllm.plugins.plugin_utils._hostvars import each_host


def _server(name, source, prefix, default_url):
    server = {'name': name, 'url': source.get(prefix + 'url') or default_url,
              'kind': source.get(prefix + 'kind') or 'backend'}
    for var, key in ((prefix + 'api_key', 'api_key'), (prefix + 'model', 'model')):
        if source.get(var):
            server[key] = source[var]
    if not server['url']:
        raise AnsibleFilterError('%s has no url' % name)
    return server


def vllm_servers(hosts, hostvars, on_host=False):
    servers = []
    for host, variables in each_host(hosts, hostvars, 'vllm_servers'):
        instances = variables.get('vllm_instances') or []
        if instances:
            for instance in instances:
                if not isinstance(instance, dict) or not instance.get('name'):
                    raise AnsibleFilterError('vllm_instances of %s: every item needs a name' % host)
                servers.append(_server('%s/%s' % (host, instance['name']), instance, '', None))
            continue
        address = '127.0.0.1' if on_host else (variables.get('ansible_host') or host)
        servers.append(_server(host, variables, 'vllm_', 'http://%s:8000' % address))
    return servers


class FilterModule(object):
    def filters(self):
        return {'vllm_servers': vllm_servers}
