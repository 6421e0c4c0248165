"""Items that differ only in their id are decided once (gateway/policy/envelopes.py), and only for a
policy that cannot read ids (gateway/policy/id_reads.py): the verdicts with and without this are
identical, for the shipped policy, for a policy adding a rule of its own on the envelope, and for
policies that read the id, which are then evaluated item by item."""

from __future__ import annotations

import asyncio
import json
import random
from pathlib import Path
from typing import Any

import pytest

from gateway.policy.bundle import PolicyBundle, read_bundle
from gateway.policy.embedded import EmbeddedEngine, build_engine, first_value
from gateway.policy.envelopes import by_envelope, evaluate_by_envelope
from gateway.policy.id_reads import id_read
from gateway.settings import PROJECT_POLICIES
from tests.policies.test_compiled_items import FAILED, constraints, interpreter_for, outcome, write_policy
from tests.policies.test_parity import VALID, items_input, random_item

SHIPPED = read_bundle(PROJECT_POLICIES)
ITEMS = next(source for path, source in SHIPPED.modules if path.endswith("items/items.rego"))

ENVELOPE_RULE = '\nfailures contains [item.id, "memo"] if {\n\tsome item in input.items\n\titem.kind == "memory"\n\titem.status == "draft"\n}\n'
READS_IDS = {
    "compares the id": '\nfailures contains [item.id, "embargo"] if {\n\tsome item in input.items\n\titem.id == "i3"\n}\n',
    "reads it by object.get": '\nfailures contains [item.id, "x"] if {\n\tsome item in input.items\n\tobject.get(item, "id", "") == "i3"\n}\n',
    "by a computed key": '\nfailures contains [item.id, "x"] if {\n\tsome item in input.items\n\tsome f in ["kind", "id"]\n\tobject.get(item, f, "") == "i3"\n}\n',
    "iterates the item": '\nfailures contains [item.id, "x"] if {\n\tsome item in input.items\n\tsome k, v in item\n\tv == "i3"\n}\n',
    "serialises the item": '\nfailures contains [item.id, "x"] if {\n\tsome item in input.items\n\tcontains(json.marshal(item), "i3")\n}\n',
    "indexes input.items": '\nfailures contains [input.items[i].id, "x"] if {\n\tsome i\n\tinput.items[i]["id"] == "i3"\n}\n',
    "names a value made from the id": '\nfailures contains [substring(item.id, 0, 1), "x"] if {\n\tsome item in input.items\n}\n',
    "makes the id a reason": '\nfailures contains [item.id, item.id] if {\n\tsome item in input.items\n\tendswith(item.id, "3")\n}\n',
    "reads the failures": '\nfailures contains [item.id, "x"] if {\n\tsome item in input.items\n\tsome [id, _] in failures0\n\tid == "i3"\n}\n'
    "failures0 := failures\n",
    "passes the item on": '\nfailures contains [item.id, "x"] if {\n\tsome item in input.items\n\tis_three(item)\n}\n'
    'is_three(x) if x.id == "i3"\n',
    "every over the items": '\nfailures contains ["i3", "x"] if {\n\tevery item in input.items { item.id != "i3" }\n}\n',
    "with replaces the input": '\nfailures contains [item.id, "x"] if {\n\tsome item in input.items\n\tnot item.kind with input as {}\n}\n',
}


def batch(rng: random.Random, size: int) -> list[dict[str, Any]]:
    """Items drawn from a dozen envelopes, so most envelopes repeat under other ids."""
    envelopes = [{k: v for k, v in random_item(rng, n).items() if k != "id"} for n in range(12)]
    return [{"id": f"i{n}", **rng.choice(envelopes)} for n in range(size)]


def policy_input(items: list[dict[str, Any]], decided: dict[str, Any]) -> dict[str, Any]:
    return items_input(items, decided, entities={})


def bundle_with(tmp_path: Path, extra: str) -> PolicyBundle:
    return write_policy(tmp_path, ITEMS + extra)


def test_the_shipped_policy_and_an_envelope_rule_read_no_ids(tmp_path: Path) -> None:
    assert id_read(SHIPPED, SHIPPED) is None
    assert id_read(bundle_with(tmp_path, ENVELOPE_RULE), SHIPPED) is None


@pytest.mark.parametrize("how", sorted(READS_IDS))
def test_a_policy_that_may_read_ids_is_found_with_its_place(tmp_path: Path, how: str) -> None:
    found = id_read(bundle_with(tmp_path, READS_IDS[how]), SHIPPED)
    assert found is not None and "items.rego:" in found, found


def test_changed_id_plumbing_is_not_trusted(tmp_path: Path) -> None:
    changed = ITEMS.replace("not item.id in failed_ids]", 'not item.id in failed_ids; item.id != "i3"]')
    assert changed != ITEMS
    found = id_read(write_policy(tmp_path, changed), SHIPPED)
    assert found is not None and "allowed" in found


def test_one_item_per_envelope_is_evaluated() -> None:
    items = [
        {"id": "a", "kind": "memory"},
        {"id": "b", "kind": "memory"},
        {"id": "c", "kind": "edge"},
        {"id": 7, "kind": "memory"},
    ]
    reduced, others = by_envelope({"items": items})
    assert [i["id"] for i in reduced["items"]] == ["a", "c", 7] and others == {"a": ["b"]}


@pytest.mark.parametrize("extra", ["", ENVELOPE_RULE], ids=["shipped", "envelope rule"])
def test_verdicts_by_envelope_are_the_verdicts_item_by_item(tmp_path: Path, extra: str) -> None:
    bundle = bundle_with(tmp_path, extra)
    interpret = interpreter_for(bundle)
    decided = constraints(lambda i: _request(bundle, i))
    rng = random.Random(20261202)
    allowed = denied = 0
    for _ in range(30):
        given = policy_input(batch(rng, rng.choice([2, 20, 120])), decided)
        one_by_one = outcome(interpret, given)
        assert outcome(lambda i: evaluate_by_envelope(i, interpret), given) == one_by_one
        if one_by_one != FAILED:
            allowed += bool(one_by_one["allowed"])
            denied += bool(one_by_one["denied"])
    assert allowed >= 5 and denied >= 5  # real verdicts both ways, not only failures


@pytest.mark.parametrize("how", ["compares the id", "makes the id a reason", "passes the item on"])
def test_a_policy_that_reads_ids_is_evaluated_item_by_item_by_the_service(tmp_path: Path, how: str) -> None:
    """By envelope, i3 would share its twins' verdict: the policy processes do not deduplicate it."""
    bundle = bundle_with(tmp_path, READS_IDS[how])
    interpret = interpreter_for(bundle)
    decided = constraints(lambda i: _request(bundle, i))
    given = policy_input([{"id": f"i{n}", **VALID} for n in range(6)], decided)
    one_by_one = outcome(interpret, given)
    assert one_by_one != FAILED and "i3" not in one_by_one["allowed"] and len(one_by_one["allowed"]) == 5
    assert outcome(lambda i: evaluate_by_envelope(i, interpret), given) != one_by_one  # why it must not be deduplicated
    engine = EmbeddedEngine(bundle, workers=1)
    try:
        assert outcome(lambda i: asyncio.run(engine.evaluate("items", i)), given) == one_by_one
    finally:
        engine._close()


def test_the_policy_processes_decide_by_envelope_as_item_by_item() -> None:
    interpret = interpreter_for(SHIPPED)
    decided = constraints(lambda i: _request(SHIPPED, i))
    given = policy_input(batch(random.Random(5), 200), decided)
    engine = EmbeddedEngine(SHIPPED, workers=1)
    try:
        served = outcome(lambda i: asyncio.run(engine.evaluate("items", i)), given)
    finally:
        engine._close()
    assert served == outcome(interpret, given) and served != FAILED


def _request(bundle: PolicyBundle, request_input: dict[str, Any]) -> Any:
    engine = build_engine(bundle)
    engine.set_input_json(json.dumps(request_input))
    decided = first_value(engine.eval_query_as_json("data.gateway.request"))
    assert decided["allow"]
    return decided["constraints"]


@pytest.mark.parametrize("extra, deduplicated", [("", True), (READS_IDS["compares the id"], False)], ids=["shipped", "reads ids"])
def test_the_policy_process_deduplicates_only_a_policy_that_reads_no_ids(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    extra: str,
    deduplicated: bool,
) -> None:
    import io

    from gateway.policy import worker

    bundle = bundle_with(tmp_path, extra)
    calls: list[int] = []
    real = worker.evaluate_by_envelope  # type: ignore[attr-defined]

    def counting(given: dict[str, Any], evaluate: Any) -> Any:
        calls.append(len(given["items"]))
        return real(given, evaluate)

    monkeypatch.setattr(worker, "evaluate_by_envelope", counting)
    decided = constraints(lambda i: _request(bundle, i))
    load = {"root": str(bundle.root), "modules": [list(m) for m in bundle.modules], "data": bundle.data, "compiled": True}
    given = policy_input([{"id": f"i{n}", **VALID} for n in range(6)], decided)
    requests = io.BytesIO((json.dumps(load) + "\n" + "data.gateway.items " + json.dumps(given) + "\n").encode())
    answers = io.BytesIO()
    worker.serve(requests, answers)
    first, second = answers.getvalue().decode().splitlines()
    assert first == "+" and second.startswith("+")
    assert sorted(json.loads(second[1:])["allowed"]) == sorted(outcome(interpreter_for(bundle), given)["allowed"])
    assert calls == ([6] if deduplicated else [])
