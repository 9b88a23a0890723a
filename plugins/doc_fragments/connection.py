# -*- coding: utf-8 -*-
# Copyright (c) modelops.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type


class ModuleDocFragment(object):

    # How to reach one vLLM server (or a proxy in front of several).
    DOCUMENTATION = r'''
options:
  url:
    description:
      - Base URL of the vLLM OpenAI-compatible server, for example V(http://127.0.0.1:8000).
      - The module adds the paths itself (C(/metrics), C(/health), C(/version), C(/v1/models), C(/v1/completions)).
      - Redirects are followed only when they stay on the same scheme, host and port.
      - Exactly one of O(url), O(servers) and O(results_file) is required.
    type: str
  api_key:
    description:
      - The key of a server started with C(--api-key), sent as a bearer token to C(/v1/) endpoints only
        (the probe and C(/v1/models)). C(/metrics), C(/health) and C(/version) are read without it, as vLLM serves them.
      - Never logged.
    type: str
  validate_certs:
    description:
      - Verify the server's TLS certificate for C(https://) URLs.
      - Set O(ca_path) rather than turning this off for a server with a private CA.
    type: bool
    default: true
  ca_path:
    description:
      - A PEM file of CA certificates to verify the server's certificate with.
    type: path
  metrics_timeout:
    description:
      - Seconds allowed for one whole answer of C(/metrics), C(/health), C(/version) or C(/v1/models),
        body included. A server that answers slower, or trickles its answer, is cut off.
      - A C(/metrics) read that runs out of time gives the verdict V(unknown), never V(stuck).
    type: float
    default: 10
requirements:
  - requests (on the host that runs the module)
'''
