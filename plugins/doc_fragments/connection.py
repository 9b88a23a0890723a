# -*- coding: utf-8 -*-
# Copyright (c) modelops.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type


class ModuleDocFragment(object):

    # How a module reaches a vLLM server (or a proxy in front of several): the options of
    # module_utils/_http.CONNECTION_ARGS, shared by modelops.vllm.health and modelops.vllm.restart. The modules that
    # take them are the action group vllm of meta/runtime.yml, so that module_defaults sets them once per play.
    DOCUMENTATION = r'''
attributes:
  action_group:
    description: Use C(group/modelops.vllm.vllm) in C(module_defaults) to set defaults for this module.
    support: full
    membership:
      - modelops.vllm.vllm
options:
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
  use_proxy:
    description:
      - Send the requests through the proxies named by the environment of the host that runs the module
        (C(HTTP_PROXY), C(HTTPS_PROXY), C(ALL_PROXY), C(NO_PROXY)).
      - By default they are ignored. A health check of a server must not depend on, or hand the API key to, a
        proxy that the host's environment names for other purposes (a proxy that answers 502 would turn a
        healthy server into V(down)).
      - Even when true, a loopback URL (C(localhost), C(127.0.0.0/8), C(::1)) never goes through a proxy.
      - With a proxy and an C(http://) URL the bearer key travels in clear text to the proxy; prefer C(https://).
    type: bool
    default: false
requirements:
  - requests (on the host that runs the module)
'''
