"""Personal data detection (real Presidio with the packaged spaCy model) and per-request masking."""

from __future__ import annotations

import subprocess
import sys
import threading

from gateway.privacy.detect import LITERAL, Detector, Span, clean
from gateway.privacy.placeholders import Masker

ALL_TYPES = frozenset({"PERSON", "EMAIL_ADDRESS", "PHONE_NUMBER", "CREDIT_CARD", "IBAN_CODE", "IP_ADDRESS"})
PLANTED = {
    "PERSON": "Margaret Thornton",
    "EMAIL_ADDRESS": "m.thornton@northwind.com",
    "PHONE_NUMBER": "+44 20 7946 0958",
    "CREDIT_CARD": "4111 1111 1111 1111",
    "IBAN_CODE": "DE89 3704 0044 0532 0130 00",
    "IP_ADDRESS": "192.168.14.20",
}
TEXT = (
    f"Call notes: {PLANTED['PERSON']} asked us to email {PLANTED['EMAIL_ADDRESS']} or ring {PLANTED['PHONE_NUMBER']}. "
    f"She paid with card {PLANTED['CREDIT_CARD']} and wants refunds to IBAN {PLANTED['IBAN_CODE']}. "
    f"Logged in from {PLANTED['IP_ADDRESS']}."
)


def test_every_planted_value_is_found_with_its_type_and_masked_away(detector: Detector) -> None:
    spans = detector.analyze(TEXT)
    found = {(s.type, TEXT[s.start : s.end]) for s in spans}
    for kind, value in PLANTED.items():
        assert (kind, value) in found, (kind, value, found)
    masked = Masker().mask(TEXT, spans)
    for value in PLANTED.values():
        assert value not in masked
    assert "<PERSON_1>" in masked and "<CREDIT_CARD_1>" in masked


def test_the_dependency_parser_stays_in_the_pipeline() -> None:
    """Nothing reads the parse, but the entity recogniser respects the sentence boundaries it sets:
    without it (or with spaCy's cheaper `senter`) 2 to 3 of the first 1,000 SciFact abstracts
    gained a false PERSON ("mm Hg", "Pre-eclampsia"; bench/history/ingest_bench.md, "What did not work", issue 18).
    Speed is not bought with spans."""
    from gateway.privacy.detect import _analyzer

    model = _analyzer().nlp_engine.nlp["en"]
    assert "parser" in model.pipe_names and model.pipe_names.index("parser") < model.pipe_names.index("ner")


def test_an_ip_address_is_not_also_a_phone_number(detector: Detector) -> None:
    text = "The VPN gateway is 10.20.30.40 and the backup is 172.16.254.1."
    assert {s.type for s in detector.analyze(text)} == {"IP_ADDRESS"}


def test_overlapping_spans_keep_the_best_scored_one_only() -> None:
    text = "reach jane.roe@acme.com today"
    spans = [Span("URL", 6, 13, 0.5), Span("EMAIL_ADDRESS", 6, 23, 1.0), Span("PERSON", 6, 14, 0.85)]
    assert clean(spans, text) == (Span("EMAIL_ADDRESS", 6, 23, 1.0),)
    out_of_range = [Span("PERSON", 20, 99, 0.9)]
    assert clean(out_of_range, text) == ()


def test_a_name_never_swallows_a_value_found_by_pattern() -> None:
    text = "Blocked 192.168.22.246 for Jane Roe"
    spans = [Span("PERSON", 0, 22, 0.85), Span("IP_ADDRESS", 8, 22, 0.6), Span("PERSON", 27, 35, 0.85)]
    assert clean(spans, text) == (Span("PERSON", 0, 7, 0.85), Span("IP_ADDRESS", 8, 22, 0.6), Span("PERSON", 27, 35, 0.85))
    masked = Masker().mask(text, clean(spans, text), keep=frozenset({"PERSON"}))
    assert "192.168.22.246" not in masked and "Jane Roe" in masked
    digits_only = "mobile +14167583748"
    assert clean([Span("PERSON", 0, 19, 0.85), Span("PHONE_NUMBER", 7, 19, 0.4)], digits_only) == (
        Span("PERSON", 0, 6, 0.85),
        Span("PHONE_NUMBER", 7, 19, 0.4),
    )


def test_placeholder_like_text_is_escaped_and_comes_back_as_written(detector: Detector) -> None:
    text = f"Template says <PERSON_1> but the customer is {PLANTED['PERSON']}."
    masker = Masker()
    spans = detector.analyze(text)
    assert any(s.type == LITERAL for s in spans)
    masked = masker.mask(text, spans)
    assert PLANTED["PERSON"] not in masked and "<PERSON_1>" in masked
    assert masked.count("<PERSON_1>") == 1  # the real person; the literal got a placeholder of its own
    assert masker.restore(masked, ALL_TYPES) == text
    hidden = masker.restore(masked, frozenset())
    assert PLANTED["PERSON"] not in hidden and "Template says <PERSON_1>" in hidden
    assert LITERAL not in masker.counts()


def test_placeholders_are_stable_within_a_request_and_restore_exactly() -> None:
    masker = Masker()
    first = masker.mask("Ann met Bob", [Span("PERSON", 0, 3, 0.9), Span("PERSON", 8, 11, 0.9)])
    second = masker.mask("Bob thanked Ann", [Span("PERSON", 0, 3, 0.9), Span("PERSON", 12, 15, 0.9)])
    assert first == "<PERSON_1> met <PERSON_2>" and second == "<PERSON_2> thanked <PERSON_1>"
    answer = "<PERSON_1> and <PERSON_2> agreed; <PERSON_3> was not there; < PERSON_1> and <PERSON_1 > are mangled"
    restored = masker.restore(answer, frozenset({"PERSON"}))
    assert restored == "Ann and Bob agreed; <PERSON_3> was not there; < PERSON_1> and <PERSON_1 > are mangled"
    assert masker.restore(answer, frozenset({"EMAIL_ADDRESS"})) == answer  # this reader may not see names
    assert masker.counts() == {"PERSON": 2}


def test_masking_by_slicing_gives_what_presidios_anonymizer_gives(detector: Detector) -> None:
    """`mask_many` puts the placeholders in itself (the 5 ms budget of a 16 KB context); on real
    detections, kept types, literal placeholders, an overlapping and an out-of-range span, its text
    and numbering are the anonymizer's."""
    texts = [
        TEXT,
        "Ann met Bob; <PERSON_1> is literal text. Ann again, and bob@x.example",
        "Margaret Thornton and Thornton's IBAN DE89 3704 0044 0532 0130 00",
        "nothing personal here",
        "",
    ]
    cases = [(text, list(detector.analyze(text))) for text in texts]
    cases.append(("Ann met Bob", [Span("PERSON", 0, 3, 0.9), Span("PERSON", 2, 6, 0.9), Span("PERSON", 8, 40, 0.9)]))
    for keep in (frozenset(), frozenset({"EMAIL_ADDRESS", "IBAN_CODE"})):
        sliced, reference = Masker(), Masker()
        assert sliced.mask_many(cases, keep) == [reference.presidio_mask(text, spans, keep) for text, spans in cases]
        assert sliced.counts() == reference.counts() and sliced.counts().get("PERSON", 0) >= 2
        assert all(
            sliced.restore(a, ALL_TYPES | {LITERAL}) == text
            for (text, _), a in zip(cases[:-1], sliced.mask_many(cases[:-1], keep))
        )


def test_types_the_reader_may_see_are_left_in_place() -> None:
    text = "mail ann@x.example about Ann"
    email, name = text.index("ann@"), text.index("Ann")
    spans = [Span("EMAIL_ADDRESS", email, email + len("ann@x.example"), 1.0), Span("PERSON", name, name + 3, 0.9)]
    assert Masker().mask(text, spans, keep=frozenset({"EMAIL_ADDRESS"})) == "mail ann@x.example about <PERSON_1>"


def test_concurrent_requests_never_see_each_others_mappings() -> None:
    errors: list[str] = []

    def request(n: int) -> None:
        masker = Masker()
        for round_ in range(200):
            value = f"Person{n}x{round_ % 7}"
            masked = masker.mask(value, [Span("PERSON", 0, len(value), 0.9)])
            if masker.restore(masked, frozenset({"PERSON"})) != value:
                errors.append(f"{n}: {masked}")
            for other in range(8):
                if other != n and f"Person{other}x" in masker.restore("<PERSON_1> <PERSON_2>", frozenset({"PERSON"})):
                    errors.append(f"{n} saw {other}")

    threads = [threading.Thread(target=request, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []


def test_one_masker_shared_by_threads_hands_out_one_placeholder_per_value() -> None:
    masker = Masker()
    seen: list[str] = []
    lock = threading.Lock()

    def work() -> None:
        for i in range(300):
            token = masker.placeholder("PERSON", f"v{i % 50}")
            with lock:
                seen.append(f"v{i % 50}={token}")

    threads = [threading.Thread(target=work) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    pairs = set(seen)
    assert len(pairs) == 50 and len({p.split("=")[1] for p in pairs}) == 50


def test_the_analyzer_loads_and_runs_without_the_network() -> None:
    script = (
        "import socket\n"
        "def refuse(*a, **k): raise SystemExit('network used')\n"
        "socket.create_connection = refuse\n"
        "socket.socket.connect = lambda *a, **k: refuse()\n"
        "from gateway.privacy.detect import Detector\n"
        "spans = Detector().analyze('Write to ann.lee@contoso.com today')\n"
        "assert [s.type for s in spans] == ['EMAIL_ADDRESS'], spans\n"
        "print('ok')\n"
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr[-2000:]
