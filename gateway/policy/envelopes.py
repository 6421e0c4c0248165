"""One evaluation per distinct envelope: the items of a verify that differ only in their id share a
verdict when the policy cannot read ids (gateway/policy/id_reads.py), so one of them is evaluated
and its verdict given to the others. On SciFact a verify of ~80 documents holds a handful of
distinct envelopes."""

from __future__ import annotations

import json
from typing import Any, Callable


def by_envelope(policy_input: dict[str, Any]) -> tuple[dict[str, Any], dict[str, list[str]]]:
    """The input with one item per distinct envelope (the first, with its own id), and for each such
    item's id the ids of the others it stands for. Items without a string id are kept as they are."""
    items = policy_input.get("items")
    if not isinstance(items, list):
        return policy_input, {}
    kept: list[Any] = []
    first_of: dict[str, str] = {}
    others: dict[str, list[str]] = {}
    for item in items:
        if not isinstance(item, dict) or not isinstance(item.get("id"), str):
            kept.append(item)
            continue
        envelope = json.dumps({k: v for k, v in item.items() if k != "id"}, sort_keys=True, separators=(",", ":"))
        first = first_of.get(envelope)
        if first is None:
            first_of[envelope] = item["id"]
            kept.append(item)
        else:
            others.setdefault(first, []).append(item["id"])
    if not others:
        return policy_input, {}
    return {**policy_input, "items": kept}, others


def fanned_out(answer: Any, others: dict[str, list[str]]) -> Any:
    """The answer about the kept items, given to the items each stands for: an allowed id allows
    them, a denied one denies them with the same reason. Anything malformed is left as it is, for
    the service to refuse as it would have."""
    if not others or not isinstance(answer, dict):
        return answer
    allowed, denied = answer.get("allowed"), answer.get("denied")
    result = dict(answer)
    if isinstance(allowed, list):
        result["allowed"] = [*allowed, *(i for a in allowed if isinstance(a, str) for i in others.get(a, ()))]
    if isinstance(denied, list):
        result["denied"] = [
            *denied,
            *(
                {**entry, "id": i}
                for entry in denied
                if isinstance(entry, dict) and isinstance(entry.get("id"), str)
                for i in others.get(entry["id"], ())
            ),
        ]
    return result


def evaluate_by_envelope(policy_input: dict[str, Any], evaluate: Callable[[dict[str, Any]], Any]) -> Any:
    reduced, others = by_envelope(policy_input)
    return fanned_out(evaluate(reduced), others)
