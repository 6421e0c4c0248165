"""Personal data on labelled text we did not write: presidio-research's synthetic set, scored as a leak
is seen.

The development split (`../shared/data/pii_presidio_dev/dev.json`, 486 texts, MIT licence; see its
README) is masked with the service's own detector and masker (`Detector.analyze_many`, then
`Masker.mask` with the spans, every type masked). A labelled value of a type the gateway masks
(PERSON, EMAIL_ADDRESS, PHONE_NUMBER, CREDIT_CARD, IBAN_CODE, US_SSN, IP_ADDRESS) that still
appears verbatim in the masked text reached the model: recall per type is the share that did not.
Precision is the share of detected spans that overlap a labelled value of a type the gateway masks
(a span on a street address, an organisation or a date counts against it, as it costs the reader
text it could have read). Throughput is the analysis in KB/s of UTF-8 text, in this process.

    .venv/bin/python bench/pii_dev_bench.py [--data ../shared/data/pii_presidio_dev/dev.json] [--show 10]

Prints a table, the first misses and false positives per type (with --show), and one JSON line.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from gateway.privacy.detect import ENTITY_TYPES, Detector  # noqa: E402
from gateway.privacy.placeholders import Masker  # noqa: E402

DEFAULT = Path(__file__).resolve().parent.parent.parent / "shared" / "data" / "pii_presidio_dev" / "dev.json"
MASKED = frozenset(ENTITY_TYPES)
TARGETS = {"PERSON": 0.93, "other": 0.98, "overall": 0.95, "precision": 0.85}


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--data", type=Path, default=DEFAULT)
    parser.add_argument("--show", type=int, default=0, help="misses and false positives to print per type")
    args = parser.parse_args()
    records: list[dict[str, Any]] = json.loads(args.data.read_text())
    texts = [r["full_text"] for r in records]
    detector = Detector()
    detector.analyze("warm up the models")
    started = time.perf_counter()
    found = detector.analyze_many(texts)
    seconds = time.perf_counter() - started
    kb = sum(len(t.encode()) for t in texts) / 1000

    totals, leaks = Counter[str](), Counter[str]()
    detected, correct = Counter[str](), Counter[str]()
    misses: dict[str, list[str]] = {}
    false: dict[str, list[str]] = {}
    for record, text, spans in zip(records, texts, found):
        masked = Masker().mask(text, spans)
        labelled = [s for s in record["spans"] if s["entity_type"] in MASKED]
        for s in labelled:
            totals[s["entity_type"]] += 1
            if s["entity_value"] in masked:
                leaks[s["entity_type"]] += 1
                misses.setdefault(s["entity_type"], []).append(f"{s['entity_value']!r} in {text[:120]!r}")
        for span in spans:
            detected[span.type] += 1
            if any(span.start < s["end_position"] and s["start_position"] < span.end for s in labelled):
                correct[span.type] += 1
            else:
                false.setdefault(span.type, []).append(f"{text[span.start : span.end]!r} in {text[:120]!r}")

    print(f"{len(records)} texts, {kb:,.1f} KB; analysis {seconds:.1f} s = {kb / seconds:.1f} KB/s (one process)\n")
    print("| type | values | leaked | recall | detected | precision |")
    print("|---|---|---|---|---|---|")
    summary: dict[str, Any] = {}
    for kind in sorted(MASKED, key=lambda k: -totals[k]):
        recall = 1 - leaks[kind] / totals[kind] if totals[kind] else None
        precision = correct[kind] / detected[kind] if detected[kind] else None
        summary[kind] = {"values": totals[kind], "leaked": leaks[kind], "recall": recall, "precision": precision}
        print(f"| {kind} | {totals[kind]} | {leaks[kind]} | {_f(recall)} | {detected[kind]} | {_f(precision)} |")
    overall = 1 - sum(leaks.values()) / sum(totals.values())
    precision_all = sum(correct.values()) / max(sum(detected.values()), 1)
    print(
        f"| all | {sum(totals.values())} | {sum(leaks.values())} | {_f(overall)} | {sum(detected.values())} | {_f(precision_all)} |"
    )
    others = [summary[k]["recall"] for k in MASKED if k != "PERSON" and summary[k]["recall"] is not None]
    verdicts = {
        "PERSON": summary["PERSON"]["recall"] >= TARGETS["PERSON"],
        "other": min(others) >= TARGETS["other"],
        "overall": overall >= TARGETS["overall"],
        "precision": precision_all >= TARGETS["precision"],
    }
    print("\ntargets: " + ", ".join(f"{k} {'MET' if ok else 'MISSED'} (>= {TARGETS[k]})" for k, ok in verdicts.items()))
    for kind in sorted(MASKED):
        for label, examples in (("missed", misses.get(kind, [])), ("false positive", false.get(kind, []))):
            for example in examples[: args.show]:
                print(f"  {kind} {label}: {example}")
    print(
        json.dumps(
            {
                "texts": len(records),
                "kb_per_s": round(kb / seconds, 1),
                "overall_recall": round(overall, 4),
                "precision": round(precision_all, 4),
                "types": summary,
                "targets": verdicts,
            },
            default=str,
        )
    )


def _f(value: float | None) -> str:
    return "—" if value is None else f"{value:.3f}"


if __name__ == "__main__":
    main()
