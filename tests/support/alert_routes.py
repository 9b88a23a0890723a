"""The Alertmanager routes docs/prometheus.md shows, the alerts the rulebook reacts to, and the labels
the shipped rules give each alert: what tests/unit/test_docs_alert_routes.py evaluates and
tests/integration/test_prometheus.py gives to the real amtool."""

import os
import re

import yaml

from tests.support.paths import REPO

DOC = os.path.join(REPO, 'docs', 'prometheus.md')
RULEBOOK = os.path.join(REPO, 'extensions', 'eda', 'rulebooks', 'vllm_stuck.yml')
RULES = os.path.join(REPO, 'extensions', 'prometheus', 'vllm.rules.yml')
WATCHDOG = 'vllm-watchdog'   # the receiver of the rulebook's webhook in the docs
SILENT = 'null'              # the receiver that sends nothing


def doc_routes():
    """Every top-level ``route`` of the YAML blocks of docs/prometheus.md."""
    with open(DOC) as handle:
        blocks = re.findall(r'```yaml\n(.*?)\n```', handle.read(), re.S)
    configs = [yaml.safe_load(block) for block in blocks if re.search(r'^route:', block, re.M)]
    return [config['route'] for config in configs]


def rulebook_alerts():
    """The alert names whose firing alerts run the watchdog."""
    with open(RULEBOOK) as handle:
        rulebook = yaml.safe_load(handle)
    names = set()
    for rule in rulebook[0]['rules']:
        if 'run_playbook' in rule['action']:
            for group in re.findall(r'alertname in \[(.*?)\]', rule['condition']):
                names.update(re.findall(r'"(\w+)"', group))
    return names


def labels_of(alert_name):
    """The labels the shipped rules give an alert (with ``alertname``)."""
    with open(RULES) as handle:
        rules = yaml.safe_load(handle)
    for group in rules['groups']:
        for rule in group['rules']:
            if rule.get('alert') == alert_name:
                return dict(rule.get('labels', {}), alertname=alert_name)
    raise AssertionError('%s is not an alert of %s' % (alert_name, RULES))


def config_with_receivers(route):
    """An alertmanager.yml of a route, with an empty receiver for every name it uses."""
    names = set()

    def walk(node):
        names.add(node['receiver'])
        for child in node.get('routes', []):
            walk(child)
    walk(route)
    return {'route': route, 'receivers': [{'name': name} for name in sorted(names)]}
