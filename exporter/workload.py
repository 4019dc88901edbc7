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
