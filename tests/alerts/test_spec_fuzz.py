"""Bad spec input never crashes the loader: any corruption of spec.yaml is a SpecError naming a path."""

from __future__ import annotations

import copy
from typing import Any

import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from xpuwatch.alerts.alertmanager import build_config
from xpuwatch.alerts.rules import RuleBuildError, build_groups
from xpuwatch.alerts.spec import DEFAULT_SPEC_PATH, SpecError, parse_spec

RAW = yaml.safe_load(DEFAULT_SPEC_PATH.read_text())

junk = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=6,
)


def _paths(node: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix]
    if isinstance(node, dict):
        for k, v in node.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            out += _paths(v, (*prefix, i))
    return out


PATHS = _paths(RAW)[1:]


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(PATHS), junk)
def test_any_replaced_node_parses_or_raises_spec_error(path: tuple[Any, ...], value: Any) -> None:
    data = copy.deepcopy(RAW)
    node = data
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    try:
        spec = parse_spec(data)
    except SpecError as exc:
        assert str(exc)
        return
    # a spec that parses builds, or the builder refuses it with a SpecError/RuleBuildError naming the cause
    try:
        build_groups(spec)
        build_config(spec)
    except (SpecError, RuleBuildError) as exc:
        assert str(exc)


@given(junk)
def test_non_mapping_top_level_is_a_spec_error(value: Any) -> None:
    if isinstance(value, dict):
        value = {**value, "alerts": None}
    try:
        parse_spec(value)
    except SpecError:
        return
    raise AssertionError("parsed junk")
