"""Run the collection through ``ansible-playbook``, exactly as users do, and read what it returned.

Used by the integration tests and the benchmarks. The checkout is made importable as
``ansible_collections.modelops.vllm`` by ``tests.support.paths.collections_root()``.
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

from tests.support.paths import collections_root

COLLECTIONS = collections_root()


def _bin(name):
    """The venv's ansible tools, next to the running interpreter."""
    candidate = os.path.join(os.path.dirname(sys.executable), name)
    return candidate if os.path.exists(candidate) else name


def env(extra=None):
    out = dict(os.environ)
    out.update({
        'ANSIBLE_COLLECTIONS_PATH': COLLECTIONS,
        'ANSIBLE_HOST_KEY_CHECKING': 'False',
        'ANSIBLE_RETRY_FILES_ENABLED': 'False',
        'ANSIBLE_NOCOLOR': '1',
        'ANSIBLE_FORCE_COLOR': '0',
        'ANSIBLE_LOCALHOST_WARNING': 'False',
        'ANSIBLE_INVENTORY_UNPARSED_WARNING': 'False',
        'ANSIBLE_PYTHON_INTERPRETER': sys.executable,
    })
    out.update(extra or {})
    return out


class Run(object):
    def __init__(self, proc, seconds, outputs):
        self.rc = proc.returncode
        self.stdout = proc.stdout
        self.stderr = proc.stderr
        self.seconds = seconds
        self.outputs = outputs

    def __repr__(self):
        return '<Run rc=%s %.1fs>\n%s\n%s' % (self.rc, self.seconds, self.stdout[-4000:], self.stderr[-2000:])


def run_playbook(playbook_text, args=(), extra_env=None, timeout=900, inventory=None, workdir=None):
    """Write a playbook and run it. Files the playbook writes into ``{{ out_dir }}`` are returned
    (parsed as JSON) in ``Run.outputs`` by name. A work directory made here is removed afterwards."""
    if workdir is None:
        made = tempfile.mkdtemp(prefix='modelops-vllm-play-')
        try:
            return run_playbook(playbook_text, args=args, extra_env=extra_env, timeout=timeout,
                                inventory=inventory, workdir=made)
        finally:
            shutil.rmtree(made, ignore_errors=True)
    out_dir = os.path.join(workdir, 'out')
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(workdir, 'play.yml')
    with open(path, 'w') as handle:
        handle.write(playbook_text)
    if inventory is None:
        inventory = os.path.join(workdir, 'inventory.ini')
        with open(inventory, 'w') as handle:
            handle.write('localhost ansible_connection=local\n')
    cmd = [_bin('ansible-playbook'), '-i', inventory, path, '-e', 'out_dir=%s' % out_dir] + list(args)
    started = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env(extra_env), timeout=timeout,
                          cwd=workdir, stdin=subprocess.DEVNULL, check=False)
    seconds = time.monotonic() - started
    outputs = {}
    for name in os.listdir(out_dir):
        with open(os.path.join(out_dir, name)) as handle:
            text = handle.read()
        try:
            outputs[name] = json.loads(text)
        except ValueError:
            outputs[name] = text
    return Run(proc, seconds, outputs)


WATCHDOG_ROLE_PLAY = """
- name: Watch vLLM servers, as playbooks/watchdog.yml does
  hosts: vllm
  gather_facts: false
  become: true
%s  tasks:
    - name: The watchdog, then save its results whatever they are
      block:
        - name: The role
          ansible.builtin.include_role:
            name: modelops.vllm.watchdog
      always:
        - name: Save vllm_watchdog_results
          ansible.builtin.copy:
            content: "{{ vllm_watchdog_results | default(none) | to_json }}"
            dest: "{{ out_dir }}/{{ inventory_hostname }}.json"
            mode: "0600"
          delegate_to: localhost
          check_mode: false
"""


def watchdog_role_play(environment=None):
    """The role as playbooks/watchdog.yml runs it (become, the group vllm), and what it found and did saved in
    ``out_dir``/<host>.json even for a host that fails for a human (a play whose every host failed ends the
    playbook: no later play would save it). ``environment``: the play's environment (the stand-ins' PATH)."""
    return WATCHDOG_ROLE_PLAY % ('  environment: %s\n' % json.dumps(environment) if environment else '')


def health_playbook(options, register_to='result.json'):
    """A playbook that runs modelops.vllm.health once with ``options`` and saves its result."""
    lines = ['- hosts: localhost', '  gather_facts: false', '  tasks:',
             '    - name: Check', '      modelops.vllm.health:']
    for key, value in options.items():
        lines.append('        %s: %s' % (key, json.dumps(value)))
    lines += ['      register: r', '      ignore_errors: true',
              '    - name: Save', '      ansible.builtin.copy:',
              '        content: "{{ r | to_json }}"',
              '        dest: "{{ out_dir }}/%s"' % register_to,
              '        mode: "0600"',
              '      check_mode: false']
    return '\n'.join(lines) + '\n'


def health(options, args=(), **kwargs):
    """Run modelops.vllm.health through ansible-playbook; returns (result dict, Run)."""
    run = run_playbook(health_playbook(options), args=args, **kwargs)
    result = run.outputs.get('result.json')
    if not isinstance(result, dict):
        raise AssertionError('the playbook saved no result: %r' % run)
    return result, run
