"""The fake API server itself, driven by the real kubernetes_asyncio client: it enforces what its
docstring promises, so tests that pass against it rely on real API behaviour, not on a lenient fake."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from xpuwatch.remediation.kube import KubeError, ObjectRef, Taint


async def test_field_selector_on_pods(fake, kube) -> None:  # type: ignore[no-untyped-def]
    fake.add_pod("a", "p1", "n1")
    fake.add_pod("b", "p2", "n2")
    assert [p.name for p in await kube.pods_on_node("n2")] == ["p2"]
    with pytest.raises(KubeError) as err:
        await kube._call(kube.core.list_pod_for_all_namespaces, field_selector="status.hostIP=1.2.3.4")
    assert err.value.status == 400 and "field label not supported" in err.value.message


async def test_stale_resource_version_is_409(fake, kube) -> None:  # type: ignore[no-untyped-def]
    fake.add_node("n1")
    node = await kube.get_node("n1")
    await kube.annotate_node("n1", {"x": "1"})  # someone else writes
    with pytest.raises(KubeError) as err:
        await kube.patch_node(
            "n1", {"metadata": {"resourceVersion": node.resource_version}, "spec": {"taints": []}}
        )
    assert (err.value.status, err.value.reason) == (409, "Conflict")
    # update_taints re-reads and succeeds
    assert (await kube.update_taints("n1", lambda ts: (*ts, Taint("k", "v", "NoSchedule")))).taints == (
        Taint("k", "v", "NoSchedule"),
    )


async def test_strategic_merge_patch_replaces_taints_and_null_deletes(fake, kube) -> None:  # type: ignore[no-untyped-def]
    fake.add_node("n1", {"a": "1", "b": "2"})
    await kube.update_taints("n1", lambda ts: (Taint("k1", "", "NoSchedule"), Taint("k2", "", "NoSchedule")))
    await kube.update_taints("n1", lambda ts: ts[1:])
    await kube.patch_node("n1", {"metadata": {"labels": {"a": None}}})
    node = await kube.get_node("n1")
    assert node.taints == (Taint("k2", "", "NoSchedule"),) and node.labels == {"b": "2"}
    assert ("PATCH", "/api/v1/nodes/n1") in fake.requests


async def test_custom_resources_reject_strategic_merge(fake, kube) -> None:  # type: ignore[no-untyped-def]
    fake.add_notebook("ns", "nb")
    with pytest.raises(KubeError) as err:
        await kube._call(
            kube.custom.patch_namespaced_custom_object,
            "kubeflow.org",
            "v1",
            "ns",
            "notebooks",
            "nb",
            {"metadata": {}},
        )
    assert err.value.status == 415
    await kube.patch_notebook_meta("ns", "nb", {"kubeflow-resource-stopped": "now"})
    assert (await kube.get_notebook("ns", "nb"))["metadata"]["annotations"] == {
        "kubeflow-resource-stopped": "now"
    }  # type: ignore[index]


async def test_eviction_answers(fake, kube) -> None:  # type: ignore[no-untyped-def]
    fake.add_pod("a", "p1", "n1")
    fake.eviction_plan[("a", "p1")] = [429, 500]
    assert [await kube.evict("a", "p1") for _ in range(4)] == ["blocked", "error", "evicted", "gone"]
    assert fake.evictions == [("a", "p1")]


async def test_event_validation(fake, kube) -> None:  # type: ignore[no-untyped-def]
    now = datetime(2026, 1, 1, tzinfo=UTC)
    await kube.emit_event(ObjectRef("Node", "n1"), "R", "m", now)
    await kube.emit_event(ObjectRef("Pod", "p", "team"), "R", "m" * 5000, now)
    events = sorted(fake.list("events"), key=lambda e: e["metadata"]["namespace"])
    assert [e["metadata"]["namespace"] for e in events] == ["default", "team"]
    assert len(events[1]["message"]) == 1024
    body = {
        "involvedObject": {"kind": "Node", "name": "n1"},
        "reason": "R",
        "eventTime": "2026-01-01T00:00:00.000000Z",
        "reportingComponent": "c",
        "reportingInstance": "i",
        "action": "A",
        "metadata": {"name": "e1"},
    }
    with pytest.raises(KubeError) as err:
        await kube._call(kube.core.create_namespaced_event, "xpuwatch", body)
    assert err.value.status == 422 and "does not match event.namespace" in err.value.message


async def test_lease_create_conflict(fake, kube) -> None:  # type: ignore[no-untyped-def]
    await kube.write_lease("ns", "l", {"holderIdentity": "a"}, None)
    with pytest.raises(KubeError) as err:
        await kube.write_lease("ns", "l", {"holderIdentity": "b"}, None)
    assert (err.value.status, err.value.reason) == (409, "AlreadyExists")
    lease = await kube.get_lease("ns", "l")
    assert lease is not None and lease.holder == "a"
    await kube.write_lease("ns", "l", {"holderIdentity": "b"}, lease.resource_version)
    with pytest.raises(KubeError):
        await kube.write_lease("ns", "l", {"holderIdentity": "c"}, lease.resource_version)


async def test_unreachable_apiserver_is_a_kube_error(kube, fake) -> None:  # type: ignore[no-untyped-def]
    await fake.stop()
    with pytest.raises(KubeError) as err:
        await kube.get_node("n1")
    assert err.value.status == 0
