# -*- coding: utf-8 -*-
# Copyright (c) modelops.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type


class ModuleDocFragment(object):

    # Which service a module asks its service manager about, on the host it runs on: the options of
    # module_utils/_service.service_args(), shared by modelops.vllm.service_info and modelops.vllm.evidence (the
    # methods that can stop and start a service on their own: the ranks of an instance across hosts).
    DOCUMENTATION = r'''
options:
  method:
    description: The service manager that runs the service.
    type: str
    choices: [systemd, docker, compose]
    default: systemd
  service:
    description: The systemd unit, the container, or the compose service.
    type: str
    required: true
  compose_project_dir:
    description: The compose project directory (V(compose) only).
    type: path
'''
