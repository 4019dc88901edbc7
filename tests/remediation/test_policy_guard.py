"""The pure core: policy.decide and guard.check as decision tables (no sockets)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from tests.remediation.kit import T0, alerts_of, am_alert, drain_labels, make_settings
from xpuwatch.remediation import guard, policy
from xpuwatch.remediation.guard import FleetView
from xpuwatch.remediation.policy import HistoryEntry, TargetState
from xpuwatch.remediation.progress import Progress, decode
from xpuwatch.remediation.settings import GuardSettings, ResizeSettings, Rule

S = make_settings()
G = GuardSettings(dry_run=False, max_disrupted_nodes=2, max_disrupted_ratio=0.5, cooldown_seconds=600)


def one(**kw):  # type: ignore[no-untyped-def]
    return alerts_of(am_alert(**kw))[0]


def test_no_rule_and_action_none_are_ignored() -> None:
    assert policy.decide(one(action="none", alertname="X"), TargetState(), (), T0, S).step == "ignore"
    d = policy.decide(one(action="reboot", alertname="X"), TargetState(), (), T0, S)
    assert (d.action, d.step, d.reason) == ("none", "ignore", "no rule for action=reboot alertname=X")


def test_rules_match_by_action_and_alertname() -> None:
    rules = (Rule("drain", alertnames=("XidCritical",), params={"cooldown_seconds": 0}), Rule("drain"))
    assert policy.match_rule(one(action="drain", alertname="XidCritical"), rules) is rules[0]
    assert policy.match_rule(one(action="drain", alertname="Other"), rules) is rules[1]
    assert policy.match_rule(one(action="resize", alertname="Other"), rules) is None


def test_drain_steps_follow_progress() -> None:
    a = one(**drain_labels("n1", "GPU-A", namespace="ml", pod="p"))
    d = policy.decide(a, TargetState(), (), T0, S)
    assert (d.step, d.initiates, d.disrupts_node, d.params["holders"]) == ("start", True, True, ["ml/p"])
    running = Progress("drain", a.key, "draining", T0, {"uuids": ["GPU-A"]})
    assert policy.decide(a, TargetState(running), (), T0, S).step == "wait"
    b = one(**drain_labels("n1", "GPU-B"))
    assert policy.decide(b, TargetState(running), (), T0, S).step == "extend"
    resolved = alerts_of(am_alert(status="resolved", **drain_labels("n1", "GPU-A")))[0]
    assert policy.decide(resolved, TargetState(running), (), T0, S).step == "healthy"
    assert policy.decide(resolved, TargetState(), (), T0, S).step == "ignore"


def test_reclaim_steps_and_jupyterhub_names() -> None:
    labels = {
        "action": "reclaim",
        "alertname": "Idle",
        "namespace": "jhub",
        "pod": "jupyter-alice--big",
        "owner": "alice",
    }
    a = one(**labels)
    d = policy.decide(a, TargetState(), (), T0, S)
    assert d.target is not None
    assert (d.step, d.params["user"], d.params["server"], d.target.key) == (
        "notify",
        "alice",
        "big",
        "pod/jhub/jupyter-alice--big",
    )
    p = Progress("reclaim", a.key, "notified", T0)
    assert policy.decide(a, TargetState(p), (), T0 + timedelta(seconds=1799), S).step == "wait"
    assert policy.decide(a, TargetState(p), (), T0 + timedelta(seconds=1800), S).step == "stop"
    assert policy.jupyterhub_server("jupyter-bob", "") == ("bob", "")


def test_resize_apply_needs_config_and_rule() -> None:
    labels = {
        "action": "resize",
        "alertname": "SliceMemoryBound",
        "node": "n1",
        "uuid": "G",
        "model": "NVIDIA A100-SXM4-80GB",
        "profile": "1g.10gb",
    }
    assert policy.decide(one(**labels), TargetState(), (), T0, S).step == "recommend"  # config says recommend
    both = make_settings(resize=ResizeSettings(mode="apply"))
    d = policy.decide(one(**labels), TargetState(), (), T0, both)
    assert (d.step, d.params["direction"], d.disrupts_node) == ("start", "memory", True)


def check(d, a, state=None, view=None, history=(), now=T0, g=G):  # type: ignore[no-untyped-def]
    return guard.check(d, a, state or TargetState(), view or FleetView(10, frozenset(), now), history, now, g)


def test_guard_reasons_in_order() -> None:
    a = one(**drain_labels("n1", "GPU-A"))
    d = policy.decide(a, TargetState(), (), T0, S)
    assert check(d, a).allowed
    missing = one(action="drain", alertname="X", node="n1")
    assert check(policy.decide(missing, TargetState(), (), T0, S), missing).reason == "absent_data"
    assert check(d, a, state=TargetState(exists=False)).reason == "absent_data"
    future = alerts_of(am_alert(starts=T0 + timedelta(hours=1), **drain_labels("n1", "GPU-A")))[0]
    assert check(d, future).reason == "future_alert"
    assert check(d, a, view=FleetView(10, frozenset(), T0 - timedelta(seconds=301))).reason == "stale_view"
    assert check(d, a, view=FleetView(10, frozenset(), None)).reason == "stale_view"
    assert check(d, a, view=FleetView(10, frozenset({"x", "y"}), T0)).reason == "cap"
    assert check(d, a, view=FleetView(3, frozenset({"x"}), T0)).reason == "cap"  # floor(0.5 * 3) = 1
    assert check(d, a, view=FleetView(10, frozenset({"n1", "y"}), T0)).allowed  # n1 already counted


def test_guard_duplicate_and_cooldown() -> None:
    a = one(**drain_labels("n1", "GPU-A"))
    d = policy.decide(a, TargetState(), (), T0, S)
    h = (HistoryEntry(a.key, "drain", "start", "node/n1", T0, "apply"),)
    assert check(d, a, history=h).reason == "duplicate"
    b = alerts_of(am_alert(fingerprint="other", **drain_labels("n1", "GPU-A")))[0]
    db = policy.decide(b, TargetState(), (), T0, S)
    assert check(db, b, history=h, now=T0 + timedelta(seconds=599)).reason == "cooldown"
    assert check(db, b, history=h, now=T0 + timedelta(seconds=600)).allowed
    assert (
        check(db, b, state=TargetState(last_finished=T0), now=T0 + timedelta(seconds=10)).reason == "cooldown"
    )


def test_guard_protected_namespace_and_dry_run() -> None:
    a = one(action="reclaim", alertname="Idle", namespace="kube-system", pod="p", owner="o")
    d = policy.decide(a, TargetState(), (), T0, S)
    assert check(d, a).reason == "protected_namespace"
    b = one(**drain_labels("n1", "GPU-A"))
    v = check(policy.decide(b, TargetState(), (), T0, S), b, g=GuardSettings())
    assert (v.allowed, v.mode) == (True, "dry-run")


@pytest.mark.parametrize(("total", "cap"), [(0, 0), (1, 0), (4, 2), (10, 2), (100, 2)])
def test_cap(total: int, cap: int) -> None:
    assert guard.cap(G, total) == cap


def test_progress_roundtrip_and_garbage() -> None:
    p = Progress("drain", "fp@t", "draining", T0, {"uuids": ["A"]})
    assert decode("drain", p.encode()) == p
    for bad in ("", "{", "[]", '{"alert": "x"}', '{"alert":"x","phase":"p","started":"yesterday"}'):
        assert decode("drain", bad) is None
