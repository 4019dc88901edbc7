"""Enrichment core (pure): what kind of workload a pod is, and who owns it, from its metadata.

Recognised (sources in brackets):
- notebook: Kubeflow Notebook pods carry label ``notebook-name`` [kubeflow/kubeflow notebook-controller];
  JupyterHub single-user pods carry ``component=singleuser-server`` and ``hub.jupyter.org/username``
  (the unescaped name is in the annotation of the same key) [jupyterhub/zero-to-jupyterhub-k8s, kubespawner].
- job: owned by a Job (ownerReferences kind ``Job``) or labelled ``job-name``/``batch.kubernetes.io/job-name``,
  ``training.kubeflow.org/job-name`` (Kubeflow Training Operator), ``volcano.sh/job-name``.
- service: owned by a ReplicaSet, StatefulSet, DaemonSet or Deployment.
- unknown: anything else.
The owner is the notebook user, else the first allowlisted owner label present, else "".
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

NOTEBOOK, JOB, SERVICE, UNKNOWN = "notebook", "job", "service", "unknown"

DEFAULT_OWNER_LABELS: tuple[str, ...] = ("owner", "user", "app.kubernetes.io/owner")
_JOB_LABELS = (
    "job-name",
    "batch.kubernetes.io/job-name",
    "training.kubeflow.org/job-name",
    "volcano.sh/job-name",
)
_SERVICE_KINDS = {"ReplicaSet", "StatefulSet", "DaemonSet", "Deployment"}


@dataclass(frozen=True)
class PodMeta:
    """The parts of a pod's metadata classification reads."""

    namespace: str
    name: str
    labels: Mapping[str, str]
    annotations: Mapping[str, str]
    owner_kinds: tuple[str, ...] = ()
    containers: tuple[str, ...] = ()  # container names in spec order (HAMi annotations index them)
    uid: str = ""  # metadata.uid: the pod UID in the node's cgroup paths (kubepods/pod<uid>)
    container_ids: Mapping[str, str] = field(default_factory=dict)
    """Runtime container ID (64 hex, ``containerd://``/``cri-o://``/``docker://`` prefix removed) -> container
    name, from ``status.containerStatuses`` and ``initContainerStatuses``."""


@dataclass(frozen=True)
class Workload:
    kind: str  # notebook | job | service | unknown
    owner: str


def classify(pod: PodMeta, owner_labels: Sequence[str] = DEFAULT_OWNER_LABELS) -> Workload:
    """Classify one pod. Never raises."""
    labels, ann = pod.labels, pod.annotations
    if "notebook-name" in labels:
        owner = ann.get("notebooks.kubeflow.org/creator") or _first(labels, owner_labels) or pod.namespace
        return Workload(NOTEBOOK, owner)
    if labels.get("component") == "singleuser-server" or "hub.jupyter.org/username" in labels:
        owner = ann.get("hub.jupyter.org/username") or labels.get("hub.jupyter.org/username", "")
        return Workload(NOTEBOOK, owner)
    owner = _first(labels, owner_labels)
    if "Job" in pod.owner_kinds or any(k in labels for k in _JOB_LABELS):
        return Workload(JOB, owner)
    if _SERVICE_KINDS & set(pod.owner_kinds):
        return Workload(SERVICE, owner)
    return Workload(UNKNOWN, owner)


def _first(labels: Mapping[str, str], keys: Sequence[str]) -> str:
    for k in keys:
        if labels.get(k):
            return labels[k]
    return ""


MAX_PROMOTED = 8
"""Most pod labels and annotations the allow-lists may promote to series labels, together: each adds a
label to every ``accelerator_allocated`` series and a new series each time its value changes (dcgm-exporter
#585: 30+ labels broke Mimir's per-series limit; Mimir's default is 30 labels per series)."""
MAX_PROMOTED_VALUE = 128
"""Characters of a promoted value kept; longer ones (annotations can be 256 KiB) are cut to this many,
the last replaced by ``~`` so that a cut value is never taken for a whole one."""
# Kubernetes label/annotation key syntax: optional DNS-subdomain prefix and '/', then a name of up to 63
# characters (apimachinery validation IsQualifiedName).
_KEY = re.compile(
    r"^(?:[a-z0-9](?:[-a-z0-9]*[a-z0-9])?(?:\.[a-z0-9](?:[-a-z0-9]*[a-z0-9])?)*/)?"
    r"[A-Za-z0-9](?:[-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"
)


def series_label(prefix: str, key: str) -> str:
    """The series label a promoted key becomes, as kube-state-metrics names them: ``label_`` /
    ``annotation_`` and the key with every character outside ``[A-Za-z0-9_]`` replaced by ``_``."""
    return prefix + re.sub(r"[^A-Za-z0-9_]", "_", key)


def check_allowlists(
    labels: Sequence[str], annotations: Sequence[str], owner_kind: bool = False
) -> str | None:
    """None when the allow-lists can be promoted, else why not: too many keys together (``owner_kind``
    counts as one), a key that is no Kubernetes label key, two keys that give the same series label."""
    n = len(labels) + len(annotations) + owner_kind
    if n > MAX_PROMOTED:
        return (
            f"at most {MAX_PROMOTED} pod labels and annotations together (owner_kind counts as one), got {n}"
        )
    seen: dict[str, str] = {}
    for prefix, keys in (("label_", labels), ("annotation_", annotations)):
        for k in keys:
            if not _KEY.match(k) or len(k.rpartition("/")[0]) > 253:
                return (
                    f"{k!r} is not a Kubernetes label/annotation key ([prefix/]name, name <= 63 characters)"
                )
            name = series_label(prefix, k)
            if name in seen:
                return f"{k!r} and {seen[name]!r} both become series label {name}"
            seen[name] = k
    return None


def promote(
    pod: PodMeta, labels: Sequence[str], annotations: Sequence[str], owner_kind: bool = False
) -> tuple[tuple[str, str], ...]:
    """The pod's allow-listed labels and annotations that it has (non-empty), as (series label, value),
    values cut to ``MAX_PROMOTED_VALUE`` characters; with ``owner_kind``, ``owner_kind`` = the kind of its
    first ownerReference (``Job``, ``ReplicaSet``, ``StatefulSet``, ...) when it has one. Never raises."""
    out: list[tuple[str, str]] = []
    if owner_kind and pod.owner_kinds and pod.owner_kinds[0]:
        out.append(("owner_kind", pod.owner_kinds[0][:MAX_PROMOTED_VALUE]))
    for prefix, keys, source in (
        ("label_", labels, pod.labels),
        ("annotation_", annotations, pod.annotations),
    ):
        for k in keys:
            v = source.get(k)
            if v:
                v = str(v)
                if len(v) > MAX_PROMOTED_VALUE:
                    v = v[: MAX_PROMOTED_VALUE - 1] + "~"
                out.append((series_label(prefix, k), v))
    return tuple(out)
