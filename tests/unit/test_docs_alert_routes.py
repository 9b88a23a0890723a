"""The Alertmanager routes docs/prometheus.md shows send every alert the rulebook reacts to to the
rulebook's webhook, keep the watchdog's trigger (severity none) from paging anyone, and still page on
the stuck alert. Evaluated here by Alertmanager's routing rule (first matching child, ``continue`` goes
on, the parent's receiver only when no child matched); tests/integration/test_prometheus.py asks the
real amtool the same."""

import re

from tests.support.alert_routes import SILENT, WATCHDOG, doc_routes, labels_of, rulebook_alerts


def matches(matcher, labels):
    name, op, value = re.match(r'^(\w+)\s*(=~|!~|!=|=)\s*"(.*)"$', matcher).groups()
    have = str(labels.get(name, ''))
    if op == '=':
        return have == value
    if op == '!=':
        return have != value
    found = re.fullmatch(value, have) is not None
    return found if op == '=~' else not found


def receivers_of(route, labels):
    out = []
    for child in route.get('routes', []):
        if all(matches(m, labels) for m in child.get('matchers', [])):
            out.extend(receivers_of(child, labels))
            if not child.get('continue'):
                return out
    return out or [route['receiver']]


def test_the_rulebook_reacts_to_alerts_the_rules_have():
    names = rulebook_alerts()
    assert names == {'VllmWatchdogCheck', 'VllmEngineStuck', 'VllmEngineLivelocked'}
    assert all(labels_of(name) for name in names)  # every trigger is an alert of the shipped rules
    assert labels_of('VllmWatchdogCheck')['severity'] == 'none'


def test_the_routing_rule_here_is_alertmanagers():
    route = {'receiver': 'default', 'routes': [
        {'matchers': ['alertname="A"'], 'receiver': 'a', 'continue': True},
        {'matchers': ['severity="none"'], 'receiver': 'b'}]}
    assert receivers_of(route, {'alertname': 'A', 'severity': 'critical'}) == ['a']  # no fallback after a match
    assert receivers_of(route, {'alertname': 'A', 'severity': 'none'}) == ['a', 'b']
    assert receivers_of(route, {'alertname': 'B'}) == ['default']


def test_every_route_in_the_docs_wakes_the_watchdog_and_pages_only_on_the_stuck_alert():
    routes = doc_routes()
    assert len(routes) >= 2, 'the docs show fewer Alertmanager routes than expected: %d' % len(routes)
    for route in routes:
        for name in rulebook_alerts():
            labels = labels_of(name)
            receivers = set(receivers_of(route, labels))
            assert WATCHDOG in receivers, (name, route)
            if labels['severity'] == 'none':
                assert receivers <= {WATCHDOG, SILENT}, (name, receivers)
            else:
                assert receivers - {WATCHDOG, SILENT}, ('%s pages nobody' % name, receivers)
