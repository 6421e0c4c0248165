"""Calibrate the semantic floor (GATEWAY_SEMANTIC_FLOOR): how much of what is relevant it keeps,
how many off-topic questions it turns into an honest empty answer.

Embeds, in-process with the gateway's model (`--embeddings`, as GATEWAY_EMBEDDINGS; 2 threads), the relevant abstracts
of N sampled SciFact training claims plus 800 other abstracts, then prints

- positives: per claim, the best cosine between the claim and one of its relevant abstracts;
- claims answered: per claim, the best cosine over the whole pool (a semantic-only answer abstains
  when even that is below the floor);
- negatives: per off-topic question (business chatter and nonsense a SciFact store should not
  answer), the best cosine over the whole pool;

and, for floors 0.20 .. 0.75, the share of positives kept, claims answered and off-topic questions
rejected. Run from the project root:

    .venv/bin/python bench/calibrate_floor.py --data-set /work/shared/data/scifact                      # bge-small
    .venv/bin/python bench/calibrate_floor.py --data-set /work/shared/data/scifact --embeddings minilm

Passages are embedded exactly as the gateway embeds a document section (title, newline, abstract),
queries exactly as a retrieve query. See bench/history/calibrate_floor.md for how to recalibrate for another model
or corpus.
"""

from __future__ import annotations

import argparse
import csv
import json
import random
import sys
import time
from pathlib import Path

import numpy as np

OTHER_ABSTRACTS = 800
FLOORS = [round(0.20 + 0.05 * i, 2) for i in range(12)]  # 0.20 .. 0.75
OFF_TOPIC = [
    "What pricing did we discuss with Jane?",
    "When is the contract renewal for Acme?",
    "Which discount rules apply to annual billing?",
    "Who is the account owner for Globex?",
    "What did the customer say about the refund?",
    "How many seats did they buy?",
    "Schedule a follow-up call next Tuesday",
    "What is the weather in Paris tomorrow?",
    "Best pizza restaurant near the office",
    "Reset my password for the VPN",
    "quarterly revenue forecast for the sales team",
    "Is the invoice overdue?",
    "What is the escalation path for priority one tickets?",
    "Summarize the board meeting minutes",
    "Which laptop should I buy?",
    "How do I file an expense report?",
    "Football scores from last night",
    "Recipe for chocolate cake",
    "Translate hello into French",
    "Who won the election?",
    "What are the office opening hours?",
    "Book a meeting room for ten people",
    "shipping status of order 4412",
    "Compare our plan tiers",
    "What is the cancellation policy?",
    "zebra wombat quokka",
    "xylophonenotstored",
    "SKU-4471-B",
    "the",
    "purple elephant dancing on the moon",
]


def percentile(values: list[float], q: float) -> float:
    """Linear interpolation between closest ranks (q in 0..100), as bench/retrieve_bench.py."""
    ordered = sorted(values)
    position = (len(ordered) - 1) * q / 100
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def read(path: Path) -> tuple[dict[str, dict[str, str]], dict[str, str], dict[str, set[str]]]:
    with open(path / "corpus.jsonl", encoding="utf-8") as handle:
        corpus = {d["_id"]: d for d in map(json.loads, filter(str.strip, handle))}
    with open(path / "queries.jsonl", encoding="utf-8") as handle:
        queries = {q["_id"]: q["text"] for q in map(json.loads, filter(str.strip, handle))}
    qrels: dict[str, set[str]] = {}
    with open(path / "qrels" / "train.tsv", encoding="utf-8", newline="") as handle:
        for row in csv.DictReader(handle, delimiter="\t"):
            if int(row["score"]) > 0 and row["corpus-id"] in corpus and row["query-id"] in queries:
                qrels.setdefault(row["query-id"], set()).add(row["corpus-id"])
    return corpus, queries, qrels


def passage(doc: dict[str, str]) -> str:
    """What the gateway embeds for an item of bench/quality_bench.py: the section (title) starts the text."""
    return f"{doc['title']}\n{doc['text']}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data-set", type=Path, required=True, help="the SciFact directory (BEIR layout)")
    parser.add_argument("--sample", type=int, default=200, help="training claims to sample (default 200)")
    parser.add_argument("--seed", type=int, default=7, help="sampling seed (default 7)")
    parser.add_argument("--embeddings", choices=("bge-small", "minilm", "minilm-float"), default="bge-small")
    args = parser.parse_args(argv)

    from gateway.settings import load_settings
    from gateway.writes.embeddings import load_embedder

    corpus, queries, qrels = read(args.data_set)
    rng = random.Random(args.seed)
    claims = rng.sample(sorted(qrels), min(args.sample, len(qrels)))
    relevant = sorted({doc for q in claims for doc in qrels[q]})
    others = rng.sample(sorted(set(corpus) - set(relevant)), OTHER_ABSTRACTS)
    pool = relevant + others
    row_of = {doc: i for i, doc in enumerate(pool)}

    embedder, note = load_embedder(load_settings({"embeddings": args.embeddings}), threads=2)
    if embedder is None or note:
        raise SystemExit(f"--embeddings {args.embeddings}: {note}")
    print(
        f"Embedding {len(pool)} abstracts ({len(relevant)} relevant to {len(claims)} sampled claims, "
        f"{len(others)} others) with {embedder.model_id}...",
        flush=True,
    )
    started = time.perf_counter()
    passages = np.concatenate([embedder.embed([passage(corpus[d]) for d in pool[i : i + 64]]) for i in range(0, len(pool), 64)])
    seconds = time.perf_counter() - started
    claim_vectors = embedder.embed([queries[q] for q in claims])
    off_vectors = embedder.embed(OFF_TOPIC)
    print(f"  {len(pool)} passages in {seconds:.1f} s ({len(pool) / seconds:.1f}/s)")

    claim_scores = claim_vectors @ passages.T  # cosines: the model's vectors are unit length
    positives = [float(max(claim_scores[i, row_of[d]] for d in qrels[q])) for i, q in enumerate(claims)]
    answered = [float(claim_scores[i].max()) for i in range(len(claims))]
    top1 = sum(1 for i, q in enumerate(claims) if pool[int(claim_scores[i].argmax())] in qrels[q])
    negatives = [float(s) for s in (off_vectors @ passages.T).max(axis=1)]

    print(
        f"\n=== semantic floor calibration: {len(claims)} SciFact train claims (seed {args.seed}), pool of {len(pool)} "
        f"abstracts, {len(OFF_TOPIC)} off-topic questions, {embedder.model_id} ==="
    )
    print(
        "positives (best cosine claim -> a relevant abstract): "
        + ", ".join(f"p{q} {percentile(positives, q):.3f}" for q in (1, 5, 10, 25, 50))
        + f", min {min(positives):.3f}"
    )
    print(
        "claims (best cosine over the pool):                   "
        + ", ".join(f"p{q} {percentile(answered, q):.3f}" for q in (1, 5, 10, 25, 50))
        + f"; a relevant abstract is the nearest for {top1 / len(claims):.0%}"
    )
    print(
        "off-topic (best cosine over the pool):                "
        + f"max {max(negatives):.3f}, p90 {percentile(negatives, 90):.3f}, p50 {percentile(negatives, 50):.3f}"
    )
    print(f"{'floor':>5}  {'positives kept':>14}  {'claims answered':>15}  {'off-topic rejected':>18}")
    for floor in FLOORS:
        kept = sum(1 for s in positives if s >= floor) / len(positives)
        answers = sum(1 for s in answered if s >= floor) / len(answered)
        rejected = sum(1 for s in negatives if s < floor) / len(negatives)
        print(f"{floor:5.2f}  {kept:14.1%}  {answers:15.1%}  {rejected:18.1%}")
    worst = sorted(zip(negatives, OFF_TOPIC), reverse=True)[:5]
    print("closest off-topic questions: " + "; ".join(f"{s:.3f} {q!r}" for s, q in worst))
    return 0


if __name__ == "__main__":
    sys.exit(main())
