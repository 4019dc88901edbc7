"""The first step of both Alertmanager webhook receivers (relay and remediation): body bytes to a JSON
document that is safe to walk, or a reason for a 400.

Two properties beyond "is JSON", checked once here for both: nesting is bounded (``MAX_DEPTH``), so no
recursive code after this point (Python's json decoder and encoder, the Unicode check below, templates)
can hit the interpreter's recursion limit (a 200 KB ``[[[[…`` body gave 500 + RecursionError); and
every string is Unicode text (a lone surrogate such as JSON ``"\\ud800"`` is not: no chat bot or API
server accepts it and encoding it later would fail on every retry).
"""

from __future__ import annotations

import json
import re
from typing import Any

MAX_DEPTH = 32
"""Deepest nesting of objects and arrays accepted. Alertmanager's body is 3 levels deep (body, ``alerts``
list, an alert's ``labels``: prometheus.io/docs/alerting/latest/configuration/#webhook_config); 32 leaves
room for any hand-made payload and stays far below Python's recursion limit (1,000 frames)."""

# Any surrogate escape (\\uD800-\\uDFFF): only then can a lone surrogate be in the document, and only then is
# every string checked (a valid pair, e.g. an emoji, passes that check).
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")


# decode() refuses an integer of over this many digits (json.loads, sys.int_info.default_max_str_digits).
MAX_INT_DIGITS = 4300
# For ``surely_within``: every byte but the opening brackets and the digits, deleted in one C pass.
_NOT_BRACKET_OR_DIGIT = bytes(c for c in range(256) if c not in b"[{0123456789")
# For ``surely_within``: digits to "0", everything else to " ", so that a long digit run is a substring search.
_DIGITS_AS_ZERO = bytes(48 if 48 <= c <= 57 else 32 for c in range(256))
_LONG_RUN = b"0" * (MAX_INT_DIGITS + 1)


class BodyError(ValueError):
    """The body is not a JSON document within the bounds; the message says why (sent back with 400)."""


def decode(body: bytes, max_depth: int = MAX_DEPTH) -> Any:
    """Parse ``body`` (UTF-8 JSON). Raises BodyError: not JSON; nested deeper than ``max_depth``; a string
    (key or value) holding a lone surrogate, with where it is (``body.alerts[0].labels key``)."""
    try:
        # Strict UTF-8 first (RFC 8259 8.1): json.loads(bytes) decodes with "surrogatepass", which let a lone
        # surrogate sent as raw bytes (ED A0 80) through where the escape "\ud800" was refused.
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BodyError(f"body is not UTF-8: {exc}") from None
    try:
        doc = json.loads(text)
    except ValueError as exc:  # not JSON, or an integer of over 4,300 digits (sys.int_info)
        raise BodyError(f"body is not JSON: {exc}") from None
    except RecursionError:  # deeper than the decoder's stack allows: certainly deeper than max_depth
        raise BodyError(f"body is nested deeper than {max_depth} levels") from None
    # Depth > max_depth needs more than max_depth opening brackets: most bodies skip the walk.
    if body.count(b"[") + body.count(b"{") > max_depth:
        depth = _depth(doc, max_depth)
        if depth > max_depth:
            raise BodyError(f"body is nested deeper than {max_depth} levels")
    if _SURROGATE_ESCAPE.search(body):
        try:
            json.dumps(doc, ensure_ascii=False).encode("utf-8")  # fast path: a valid pair (an emoji)
        except UnicodeEncodeError:
            _check_unicode(doc, "body")  # says where
    return doc


def surely_within(body: bytes, containers: int, chain: int, max_depth: int = MAX_DEPTH) -> bool:
    """True when ``body``, already accepted by a typed decoder (msgspec, alerts/relay/webhook.py), is
    certainly within ``decode``'s two bounds that such a decoder does not see, because it skips the members
    it does not know without building them: nesting (at most ``max_depth``) and integer size (at most
    ``MAX_INT_DIGITS`` digits). False means "maybe not": run ``decode`` for the answer.

    ``containers``: objects and arrays the typed decoder built (the body itself included); ``chain``: the
    most of them on one path from the body down to a skipped member. Every object or array opens with one
    ``[`` or ``{`` byte, so the skipped ones number at most the count of those bytes (strings included) less
    ``containers``, and the deepest path has at most ``chain`` + that many. An integer of over
    ``MAX_INT_DIGITS`` digits is that many digit bytes in a row. Costs one C pass over the body (0.8 us per
    KB here); the run search only for bodies of over ``MAX_INT_DIGITS`` digits in all."""
    kept = body.translate(None, _NOT_BRACKET_OR_DIGIT)
    brackets = kept.count(b"[") + kept.count(b"{")
    if chain + brackets - containers > max_depth:
        return False
    return len(kept) - brackets <= MAX_INT_DIGITS or _LONG_RUN not in body.translate(_DIGITS_AS_ZERO)


_CONTAINERS = (dict, list)  # the only containers json.loads makes


def _depth(doc: Any, limit: int) -> int:
    """Nesting depth of ``doc`` (a scalar is 0, ``[]`` is 1), counted level by level without recursion;
    stops once it exceeds ``limit``. Only containers are carried to the next level, filtered by a C-level
    comprehension: an Alertmanager body (about 4 containers per alert) costs a few microseconds."""
    level = [doc] if type(doc) in _CONTAINERS else []
    depth = 0
    while level and depth <= limit:
        depth += 1
        below: list[Any] = []
        for node in level:
            below += [c for c in (node.values() if type(node) is dict else node) if type(c) in _CONTAINERS]
        level = below
    return depth


def _check_unicode(node: Any, where: str) -> None:
    """Raise BodyError if a string in ``node`` holds a lone surrogate. Recursive: ``decode`` has bounded
    the depth first."""
    if isinstance(node, str):
        try:
            node.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise BodyError(
                f"{where}: invalid Unicode: lone surrogate U+{ord(node[exc.start]):04X} at character {exc.start}"
            ) from None
    elif isinstance(node, dict):
        for k, v in node.items():
            _check_unicode(k, f"{where} key")
            _check_unicode(v, f"{where}.{k}" if len(where) < 200 else where)
    elif isinstance(node, list):
        for i, v in enumerate(node):
            _check_unicode(v, f"{where}[{i}]" if len(where) < 200 else where)
