"""AlertmanagerConfig builder: the generated alertmanager.yml dict -> a prometheus-operator AlertmanagerConfig
(``monitoring.coreos.com/v1alpha1``) routing the same way in a shared Alertmanager (kube-prometheus-stack), pure.

One source of truth: the object is a translation of :func:`alerts.alertmanager.build_fragment` (itself
:func:`alerts.alertmanager.build_config` scoped to xpuwatch's alerts), so a receiver, route or inhibit rule
added to the spec shows up in all three. What differs from alertmanager.yml, and why:

- The top route carries the fragment's scope matchers (xpuwatch's categories and alert names): in a shared
  Alertmanager the operator makes it a child of the global root with ``continue: true``, and without a
  matcher it would catch every alert of the cluster (kube-prometheus-stack's own rules included) and send
  them to the performance channel. The inhibit rules carry the alert-name matcher on both sides, so they
  touch no other alert of the cluster.
- Bearer tokens come from the Secret :data:`SECRET` in the object's namespace, one key per token file of the
  generated config, named like the file (``.../relay-token`` -> key ``relay-token``), the same keys the
  operator mounts at ``/etc/alertmanager/secrets/<secret>/<key>`` when the Secret is listed in
  ``Alertmanager.spec.secrets``.
- A matcher whose operator is ``=`` is written without ``matchType``: the operator reads an empty matchType
  (``regex`` false) as ``name="value"`` (prometheus-operator v0.93.0 pkg/alertmanager/amcfg.go
  ``convertMatchersV2`` -> ``inhibitRuleToV2``), and a bare ``=`` is YAML 1.1's ``!!value`` tag, which
  PyYAML refuses once kustomize has re-serialised it unquoted.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from pathlib import PurePosixPath
from typing import Any

from xpuwatch.alerts.alertmanager import Endpoints, build_fragment
from xpuwatch.alerts.rules import dump_yaml
from xpuwatch.alerts.spec import CATEGORIES, Spec

NAME = "xpuwatch"
NAMESPACE = "xpuwatch"
SECRET = "xpuwatch-alertmanager"
_DEFAULT_ENDPOINTS = Endpoints()
# kube-prometheus-stack's convention; overlays replace it with the user's Helm release name.
LABELS = {
    "app.kubernetes.io/name": "xpuwatch",
    "app.kubernetes.io/part-of": "xpuwatch",
    "release": "kube-prometheus-stack",
}

# Alertmanager's matcher syntax as build_config writes it: name, operator, double-quoted value.
_MATCHER = re.compile(r'^(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?P<op>=~|!~|!=|=)"(?P<value>(?:[^"\\]|\\.)*)"$')
_ROUTE_FIELDS = {
    "group_by": "groupBy",
    "group_wait": "groupWait",
    "group_interval": "groupInterval",
    "repeat_interval": "repeatInterval",
    "continue": "continue",
}


def matcher(text: str) -> dict[str, str]:
    """``'name=~"v"'`` -> ``{"name": "name", "matchType": "=~", "value": "v"}`` (no matchType for ``=``).

    Raises ValueError on text that is not one quoted Alertmanager matcher."""
    m = _MATCHER.match(text)
    if m is None:
        raise ValueError(f"not an Alertmanager matcher: {text!r}")
    out = {"name": m["name"]}
    if m["op"] != "=":
        out["matchType"] = m["op"]
    out["value"] = json.loads(f'"{m["value"]}"')
    return out


def _route(r: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"receiver": r["receiver"]}
    if r.get("matchers"):
        out["matchers"] = [matcher(t) for t in r["matchers"]]
    for key, name in _ROUTE_FIELDS.items():
        if key in r:
            out[name] = r[key]
    if r.get("routes"):
        out["routes"] = [_route(c) for c in r["routes"]]
    return out


def _receiver(r: Mapping[str, Any], secret: str) -> dict[str, Any]:
    unsupported = set(r) - {"name", "webhook_configs"}
    if unsupported:
        raise ValueError(f"receiver {r['name']}: only webhook_configs translate, not {sorted(unsupported)}")
    hooks = []
    for hook in r.get("webhook_configs", []):
        converted: dict[str, Any] = {"url": hook["url"], "sendResolved": hook["send_resolved"]}
        auth = hook.get("http_config", {}).get("authorization")
        if auth is not None:  # a webhook without a token (an out-of-band meta_url) has no http_config
            key = PurePosixPath(auth["credentials_file"]).name
            converted["httpConfig"] = {
                "authorization": {"type": auth["type"], "credentials": {"name": secret, "key": key}}
            }
        hooks.append(converted)
    return {"name": r["name"], "webhookConfigs": hooks}


def from_fragment(
    fragment: Mapping[str, Any],
    *,
    name: str = NAME,
    namespace: str = NAMESPACE,
    secret: str = SECRET,
) -> dict[str, Any]:
    """The AlertmanagerConfig object (a dict, keys in the CRD's order) for a fragment as
    :func:`alerts.alertmanager.build_fragment` returns it: its one route becomes the object's top route.
    Raises ValueError on a matcher or receiver it cannot translate."""
    (top,) = fragment["route"]["routes"]
    return {
        "apiVersion": "monitoring.coreos.com/v1alpha1",
        "kind": "AlertmanagerConfig",
        "metadata": {"name": name, "namespace": namespace, "labels": dict(LABELS)},
        "spec": {
            "route": _route(top),
            "receivers": [_receiver(r, secret) for r in fragment["receivers"]],
            "inhibitRules": [
                {
                    "sourceMatch": [matcher(t) for t in rule["source_matchers"]],
                    "targetMatch": [matcher(t) for t in rule["target_matchers"]],
                    "equal": list(rule["equal"]),
                }
                for rule in fragment.get("inhibit_rules", [])
            ],
        },
    }


def from_config(
    config: Mapping[str, Any],
    categories: Sequence[str] = CATEGORIES,
    *,
    name: str = NAME,
    namespace: str = NAMESPACE,
    secret: str = SECRET,
) -> dict[str, Any]:
    """The AlertmanagerConfig for a whole alertmanager.yml dict (:func:`alerts.alertmanager.build_config`): its
    root becomes the top route with ``category=~"<categories>"`` as its only matcher, inhibit rules as they
    are. Raises ValueError on a matcher or receiver it cannot translate."""
    root = config["route"]
    top = {"receiver": root["receiver"], "matchers": [f'category=~"{"|".join(categories)}"']}
    top.update({k: v for k, v in root.items() if k not in top})
    fragment = {"route": {"routes": [top]}, **{k: v for k, v in config.items() if k != "route"}}
    return from_fragment(fragment, name=name, namespace=namespace, secret=secret)


def render_alertmanagerconfig(spec: Spec, endpoints: Endpoints = _DEFAULT_ENDPOINTS) -> str:
    """alertmanagerconfig.yaml text for the spec and endpoints (deploy/kustomize/components/alertmanagerconfig
    holds a copy)."""
    return dump_yaml(from_fragment(build_fragment(spec, endpoints)))
