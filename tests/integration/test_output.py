"""What a run prints and when it is red, through ``ansible-playbook`` and ``ansible`` as users run them.

* The stdout callback ``modelops.vllm.oneline``: the playbook's own lines (its ``debug`` messages), one line
  per failure that nothing handles (never a result dump, never the role's argument specification), the
  warnings, a total; nothing for a rescued or ignored failure, a skipped task, a retry; ``-v`` prints what
  the default callback prints; ad hoc, the verdict's ``line`` or the minimal callback's output.
* A shipped playbook whose host pattern matches nothing fails, naming the pattern and the inventory: an
  inventory that does not exist, one that does not parse, one without the group.
* ``modelops.vllm.validate_variables`` in the shipped playbooks: a misspelled variable is a warning naming
  the closest known one, once for the play; ``vllm_strict_variables`` makes it an error; a bad value fails
  its host only (the watchdog goes on for the others), in one line.

No server is needed: the servers here are closed ports (a ``down`` verdict), and the watchdog runs in check
mode. Each run takes a few seconds.
"""

import json
import os
import re
import socket
import subprocess
import sys

import pytest
import yaml

from tests.support import ansible_run

pytestmark = pytest.mark.timeout(600)

ONELINE = {'ANSIBLE_STDOUT_CALLBACK': 'modelops.vllm.oneline', 'ANSIBLE_LOAD_CALLBACK_PLUGINS': 'true'}
DEFAULT = {'ANSIBLE_STDOUT_CALLBACK': 'default'}
PLAYBOOKS = {'watchdog': ('vllm', 'vllm_watchdog_hosts', 'No host to watch'),
             'check': ('vllm:vllm_proxies', 'vllm_check_hosts', 'No server to check'),
             'fleet_check': ('vllm:vllm_proxies', 'vllm_check_hosts', 'No server to check'),
             'rollout': ('vllm', 'vllm_rollout_hosts', 'No host to roll out')}


def closed_port():
    """A loopback port nothing listens on (a server that is down)."""
    with socket.socket() as sock:
        sock.bind(('127.0.0.1', 0))
        return sock.getsockname()[1]


def ansible(args, extra_env=None, cwd=None):
    env = ansible_run.env(dict({'ANSIBLE_DEPRECATION_WARNINGS': 'False'}, **(extra_env or {})))
    return subprocess.run([ansible_run._bin(args[0])] + list(args[1:]), capture_output=True, text=True,  # pylint: disable=protected-access
                          env=env, cwd=cwd, timeout=300, stdin=subprocess.DEVNULL, check=False)


def inventory(path, hosts, group='vllm', group_vars=None):
    local = {'ansible_connection': 'local', 'ansible_python_interpreter': sys.executable}
    data = {'all': {'children': {group: {'hosts': dict((name, dict(local, **hv)) for name, hv in hosts.items()),
                                         'vars': group_vars or {}}}}}
    path.write_text(yaml.safe_dump(data))
    return str(path)


CALLBACK_PLAY = """
- name: Output
  hosts: vllm
  gather_facts: false
  tasks:
    - name: A line from each host
      ansible.builtin.debug:
        msg: "{{ inventory_hostname }}: hello"
    - name: A line without the host's name
      ansible.builtin.debug:
        msg: no name here
    - name: The run's lines, once
      ansible.builtin.debug:
        msg: ["first line", "second line"]
      run_once: true
    - name: A failure its block rescues
      block:
        - name: Fails
          ansible.builtin.fail:
            msg: RESCUED-FAILURE
      rescue:
        - name: Rescued
          ansible.builtin.set_fact:
            rescued: true
    - name: A failure that is ignored
      ansible.builtin.fail:
        msg: IGNORED-FAILURE
      ignore_errors: true
    - name: A task that is skipped
      ansible.builtin.debug:
        msg: SKIPPED-TASK
      when: false
    - name: A change
      ansible.builtin.command: "true"
      changed_when: inventory_hostname == 'a'
    - name: A failure of one host, in two lines
      ansible.builtin.fail:
        msg: "{{ inventory_hostname }}: first\\nsecond"
      when: inventory_hostname == 'b'
    - name: A module failure in a loop
      ansible.builtin.command: "{{ item }}"
      loop: ["true", "false"]
      when: inventory_hostname == 'c'
"""


def test_the_callback_prints_the_playbooks_lines_each_failure_in_one_line_and_a_total(tmp_path):
    inv = inventory(tmp_path / 'inventory.yml', {'a': {}, 'b': {}, 'c': {}})
    play = tmp_path / 'play.yml'
    play.write_text(CALLBACK_PLAY)
    proc = ansible(['ansible-playbook', '-i', inv, str(play)], ONELINE)
    assert proc.returncode == 2, proc
    lines = proc.stdout.strip().splitlines()
    assert sorted(lines[:3]) == ['a: hello', 'b: hello', 'c: hello'], lines
    assert sorted(lines[3:6]) == ['a: no name here', 'b: no name here', 'c: no name here'], lines
    assert lines[6:8] == ['first line', 'second line'], lines
    assert lines[8] == 'b: FAILED: first second', lines  # the host's name not twice, the message on one line
    assert lines[9] == 'c: FAILED (A module failure in a loop, item=false): non-zero return code', lines
    assert lines[10] == '3 host(s): 0 ok, 1 changed, 2 failed, 0 unreachable; failed: b, c', lines
    assert len(lines) == 11, lines
    for hidden in ('RESCUED-FAILURE', 'IGNORED-FAILURE', 'SKIPPED-TASK', 'TASK [', 'PLAY [', 'PLAY RECAP', '=> {'):
        assert hidden not in proc.stdout + proc.stderr, hidden

    # -v: what the default callback prints, the handled failures included.
    verbose = ansible(['ansible-playbook', '-i', inv, str(play), '-v'], ONELINE)
    default = ansible(['ansible-playbook', '-i', inv, str(play), '-v'], DEFAULT)
    assert verbose.returncode == default.returncode == 2
    for text in ('TASK [A line from each host]', 'RESCUED-FAILURE', 'IGNORED-FAILURE', 'PLAY RECAP', '...ignoring'):
        assert text in verbose.stdout and text in default.stdout, text
    assert len(verbose.stdout.splitlines()) == len(default.stdout.splitlines())


SAME_MISTAKE_PLAY = """
- name: One mistake on many hosts
  hosts: vllm
  gather_facts: false
  tasks:
    - name: The same mistake everywhere but on a
      ansible.builtin.fail:
        msg: "{{ inventory_hostname }}: the directory /nope does not exist"
      when: inventory_hostname != 'a'
    - name: Another way to fail, on a
      ansible.builtin.fail:
        msg: something else
"""


def test_the_hosts_that_fail_a_task_the_same_way_share_one_line(tmp_path):
    inv = inventory(tmp_path / 'inventory.yml', dict([('a', {})] + [('h%d' % n, {}) for n in range(7)]))
    play = tmp_path / 'play.yml'
    play.write_text(SAME_MISTAKE_PLAY)
    proc = ansible(['ansible-playbook', '-i', inv, str(play)], ONELINE)
    assert proc.returncode == 2, proc
    assert proc.stdout.strip().splitlines() == [
        'h0, h1, h2, h3, h4 and 2 more (7 hosts): FAILED: the directory /nope does not exist',
        'a: FAILED: something else',
        '8 host(s): 0 ok, 0 changed, 8 failed, 0 unreachable; failed: a, h0, h1, h2, h3, h4, h5, h6'], proc.stdout


def test_a_role_argument_failure_is_one_line_not_the_specification(tmp_path):
    """The role's own argument validation (own playbook, default callback: the whole specification in the
    result) is one line with the callback; the shipped playbook says it in one line with any callback."""
    inv = inventory(tmp_path / 'inventory.yml', {'a': {'vllm_url': 'http://127.0.0.1:%d' % closed_port()}},
                    group_vars={'vllm_watchdog_become': False, 'vllm_watchdog_state_dir': str(tmp_path / 'state')})
    play = tmp_path / 'play.yml'
    play.write_text('- hosts: vllm\n  gather_facts: false\n  roles:\n    - role: modelops.vllm.watchdog\n')
    args = ['ansible-playbook', '-i', inv, str(play), '--check', '-e', 'vllm_watchdog_restart_method=dokcer']
    dump = ansible(args, DEFAULT)
    assert dump.returncode == 2 and 'argument_spec_data' in dump.stdout, dump  # Ansible's own: the whole spec
    proc = ansible(args, ONELINE)
    assert proc.returncode == 2, proc
    assert proc.stdout.strip().splitlines() == [
        "a: FAILED (modelops.vllm.watchdog : Validating arguments against arg spec 'main' - Restart vLLM only when "
        "it is stuck, and never start a cascade): Validation of arguments failed: value of "
        "vllm_watchdog_restart_method must be one of: systemd, docker, compose, command, got: dokcer",
        '1 host(s): 0 ok, 0 changed, 1 failed, 0 unreachable; failed: a (check mode: nothing was changed)']
    # The shipped playbook: one line before the role's validation, with the default callback too.
    shipped = ansible(['ansible-playbook', '-i', inv, 'modelops.vllm.watchdog', '--check',
                       '-e', 'vllm_watchdog_restart_method=dokcer'], DEFAULT)
    assert shipped.returncode == 2 and 'argument_spec_data' not in shipped.stdout, shipped
    fatal = [line for line in shipped.stdout.splitlines() if line.startswith('fatal: [a]: FAILED! => ')]
    assert len(fatal) == 1, shipped.stdout
    assert json.loads(fatal[0].split(' => ', 1)[1])['msg'] == (
        'value of vllm_watchdog_restart_method must be one of: systemd, docker, compose, command, got: dokcer')


def test_ad_hoc_the_callback_prints_the_verdicts_line_and_any_other_result_as_minimal(tmp_path):
    inv = inventory(tmp_path / 'inventory.yml', {'a': {'vllm_url': 'http://127.0.0.1:%d' % closed_port()}})
    health = ['ansible', 'a', '-i', inv, '-m', 'modelops.vllm.health', '-a', 'url={{ vllm_url }} name=a interval=0.2']
    proc = ansible(health, ONELINE)
    assert proc.returncode == 0, proc
    assert proc.stdout.splitlines() == ['a: down - nothing answers (connection refused); a server still loading its '
                                        'weights does not listen either'], proc.stdout
    verbose = ansible(health + ['-v'], ONELINE)
    assert '\na | SUCCESS => {' in verbose.stdout and '"evidence": {' in verbose.stdout, verbose.stdout[:500]
    assert 'PLAY [' not in verbose.stdout and 'TASK [' not in verbose.stdout, verbose.stdout[:500]  # as minimal
    # Without bin_ansible_callbacks the ansible command does not use a configured stdout callback (minimal).
    plain = ansible(health, {'ANSIBLE_STDOUT_CALLBACK': 'modelops.vllm.oneline'})
    assert plain.stdout.startswith('a | SUCCESS => {'), plain.stdout[:500]
    command = ansible(['ansible', 'a', '-i', inv, '-m', 'ansible.builtin.command', '-a', 'echo hi'], ONELINE)
    assert command.stdout.splitlines() == ['a | CHANGED | rc=0 >>', 'hi'], command.stdout


@pytest.mark.parametrize('playbook', sorted(PLAYBOOKS))
def test_a_playbook_whose_host_pattern_matches_nothing_is_red(playbook, tmp_path):
    pattern, var, says = PLAYBOOKS[playbook]
    broken = tmp_path / 'broken.yml'
    broken.write_text('all: [this is not\n')
    no_group = inventory(tmp_path / 'no-group.yml', {'web-01': {}, 'web-02': {}}, group='web')
    cases = [
        ('inventory', '%s does not exist (a relative -i is read from the directory ansible-playbook runs in)'
         % (tmp_path / 'inventory')),
        (str(broken), 'which has no host at all: it did not parse (see the warnings above)'),
        (no_group, 'whose groups are web (2 host(s))'),
    ]
    for inv, why in cases:
        proc = ansible(['ansible-playbook', '-i', inv, 'modelops.vllm.%s' % playbook], ONELINE, cwd=str(tmp_path))
        assert proc.returncode == 2, (inv, proc)
        line = proc.stdout.strip().splitlines()[0]
        source = inv if os.path.isabs(inv) else os.path.join(str(tmp_path), inv)
        assert line.startswith('localhost: FAILED: %s: the host pattern "%s" (%s) matches no host of the inventory '
                               '%s, ' % (says, pattern, var, source)), (line, proc.stderr)
        assert why in line, line
        assert 'server(s)' not in proc.stdout and 'instance(s)' not in proc.stdout  # nothing else ran
    # A pattern given with -e is named as given.
    proc = ansible(['ansible-playbook', '-i', no_group, 'modelops.vllm.%s' % playbook, '-e', '%s=gb10-*' % var], ONELINE)
    assert proc.returncode == 2 and ('the host pattern "gb10-*" (%s)' % var) in proc.stdout, proc


def watchdog_inventory(tmp_path, hosts):
    down = 'http://127.0.0.1:%d' % closed_port()
    return inventory(tmp_path / 'inventory.yml', dict((name, dict({'vllm_url': down}, **hv)) for name, hv in hosts.items()),
                     group_vars={'vllm_watchdog_become': False, 'vllm_check_interval': 0.2,
                                 'vllm_watchdog_state_dir': str(tmp_path / 'state') + '/{{ inventory_hostname }}'})


def test_a_misspelled_variable_is_named_once_and_strict_makes_it_an_error(tmp_path):
    mine = {'vllm_mine': 1, 'vllm_own_variables': ['vllm_mine']}
    inv = watchdog_inventory(tmp_path, {'a': {'vllm_ulr': 'http://10.0.0.1:8000'}, 'b': {}, 'c': mine})
    args = ['ansible-playbook', '-i', inv, 'modelops.vllm.watchdog', '--check', '-e', 'vllm_watchdog_cooldwn=60']
    proc = ansible(args, ONELINE)
    assert proc.returncode == 0, proc
    warnings = [line for line in proc.stderr.splitlines() if line.startswith('[WARNING]: ')]
    assert warnings == [
        '[WARNING]: vllm_ulr (set on a) is not a variable of modelops.vllm, so nothing reads it: did you mean vllm_url?',
        '[WARNING]: vllm_watchdog_cooldwn (set on a, b, c) is not a variable of modelops.vllm, so nothing reads '
        'it: did you mean vllm_watchdog_cooldown?'], proc.stderr
    lines = proc.stdout.strip().splitlines()
    assert [line.split(': ')[0] for line in lines[:3]] == ['a/vllm', 'b/vllm', 'c/vllm'], lines  # every host watched
    assert lines[-1] == '3 host(s): 3 ok, 0 changed, 0 failed, 0 unreachable (check mode: nothing was changed)', lines
    assert not os.path.exists(str(tmp_path / 'state')), 'check mode created state'

    # The same with the default callback: the same warnings, once each.
    default = ansible(args, DEFAULT)
    assert [line for line in default.stderr.splitlines() if line.startswith('[WARNING]: ')] == warnings, default.stderr

    # vllm_strict_variables: the hosts with an unknown variable fail, in one line; c has only its own.
    strict = ansible(args + ['-e', 'vllm_strict_variables=true'], ONELINE)
    assert strict.returncode == 2, strict
    failed = sorted(line for line in strict.stdout.splitlines() if ': FAILED: ' in line)
    assert failed[0].startswith('a: FAILED: vllm_ulr (set on a) is not a variable of modelops.vllm'), failed
    assert 'vllm_watchdog_cooldwn' in failed[0] and '(vllm_strict_variables is true' in failed[0], failed
    assert failed[1].startswith('b: FAILED: vllm_watchdog_cooldwn (set on b) '), failed
    assert failed[2].startswith('c: FAILED: vllm_watchdog_cooldwn (set on c) ') and 'vllm_mine' not in failed[2]

    # A misspelled name that says what a restart acts on is an error on every host that has it, strict or not: the
    # default (systemd) would restart another thing than the docker container meant.
    target = ansible(args[:-1] + ['vllm_watchdog_restart_methd=docker'], ONELINE)
    assert target.returncode == 2, target
    failed = [line for line in target.stdout.splitlines() if ': FAILED: ' in line]
    assert len(failed) == 3 and all(line.split(': FAILED: ')[1].startswith(
        'vllm_watchdog_restart_methd = "docker" (set on ') for line in failed), failed
    assert 'did you mean vllm_watchdog_restart_method? That one says what a restart acts on: the run would act on what ' \
           'vllm_watchdog_restart_method says now (its default "systemd")' in failed[0], failed
    assert 'vllm_watchdog_restart_methd' not in target.stderr  # an error, never a warning first


def test_a_bad_value_fails_its_host_in_one_line_and_the_watchdog_goes_on_for_the_others(tmp_path):
    bad = {'vllm_watchdog_restart_method': 'dokcer', 'vllm_kind': 'prxy', 'vllm_api_key': ['sk-NOT-SHOWN']}
    inv = watchdog_inventory(tmp_path, {'a': {}, 'b': bad, 'c': {}})
    proc = ansible(['ansible-playbook', '-i', inv, 'modelops.vllm.watchdog', '--check'], ONELINE)
    assert proc.returncode == 2, proc
    lines = proc.stdout.strip().splitlines()
    assert ('b: FAILED: value of vllm_kind must be one of: backend, proxy, got: prxy; value of '
            'vllm_watchdog_restart_method must be one of: systemd, docker, compose, command, got: dokcer') in lines, lines
    assert 'NOT-SHOWN' not in proc.stdout + proc.stderr
    # a and c were watched; b is in the summary as failed before a verdict.
    assert [line for line in lines if re.match(r'^(a|c)/vllm: down - ', line)], lines
    assert [line for line in lines if line.startswith('b/*: unreachable - watchdog: host UNREACHABLE or failed')], lines
    assert lines[-1].startswith('3 host(s): 2 ok, 0 changed, 1 failed, 0 unreachable; failed: b'), lines

    # The check and the rollout fail the run on a bad value (a rollout stops before any host is touched).
    check = ansible(['ansible-playbook', '-i', inv, 'modelops.vllm.check', '-e', 'vllm_check_from=hots'], ONELINE)
    assert check.returncode == 2, check
    assert ('value of vllm_check_from must be one of: controller, host, got: hots (on a, b, c)' in check.stdout
            and 'server(s)' not in check.stdout), check
    rollout = ansible(['ansible-playbook', '-i', inv, 'modelops.vllm.rollout', '--check',
                       '-e', 'vllm_rollout_when_busy=wait'], ONELINE)
    assert rollout.returncode == 2 and 'value of vllm_rollout_when_busy must be one of: stop, proceed, got: wait' in \
        rollout.stdout, rollout
    assert 'would restart' not in rollout.stdout, rollout
