"""Synthesis, only when asked: the packed context, every personal value masked, goes to the model
as quoted data; the answer comes back restored only for the types this actor may see.

The question is analysed and masked with the same per-request Masker as the context, so a name
asked about and the same name in an item share one placeholder. A failure of the endpoint (or of
masking) never costs the caller the context: `answer` is `{"text": null, "error": ...}`.
"""

from __future__ import annotations

import re
from typing import Any

import anyio.to_thread

from audit.record import Synthesised, SynthesisSkipped, TraceBuilder
from core.constraints import Disclosure
from core.records import Fused
from gateway.privacy.detect import ENTITY_TYPES, clean
from gateway.privacy.mask import Masking
from gateway.privacy.store import Privacy
from gateway.synthesis.client import ContextItem, Synthesizer

ENTITY = "ENTITY"  # an entity id an edge names, as the model sees it: <ENTITY_1>


def _for_model(entry: Fused, text: str, masking: Masking) -> str:
    """The entry's text, masked for every type; an edge's ends (entity ids, which can spell a name
    or an address) become per-request placeholders, the same one for the same entity in every edge."""
    record = entry.record
    if record.kind == "edge":
        for end in dict.fromkeys(e for e in (record.edge_from, record.edge_to) if e):
            pattern = re.compile(rf"(?<![\w.-]){re.escape(end)}(?![\w-])")
            text = pattern.sub(lambda _: masking.masker.placeholder(ENTITY, end), text)
    return text


async def synthesize(
    synthesizer: Synthesizer,
    privacy: Privacy,
    disclosure: Disclosure,
    question: str,
    cited: list[tuple[str, Fused]],
    masking: Masking | None,
    trace: TraceBuilder,
) -> dict[str, Any]:
    if masking is None or privacy.detector is None:  # nothing is sent unmasked, ever
        reason = privacy.unavailable or "personal data could not be masked"
        trace.record(SynthesisSkipped.of(reason))
        return {"text": None, "error": f"synthesis skipped: {reason}"}
    # Only the citation, the kind (an enumeration) and the text masked for every type are sent: no
    # section, slot, source or other field of an item reaches the model (see ContextItem).
    # One mask per value: what the question names is masked in the context, and what the context (or
    # any field of the response) masked is masked in the question, where the analyzer missed it.
    question_spans = await anyio.to_thread.run_sync(privacy.detector.analyze, question)
    masking.masker.register([(question, question_spans)])
    texts = masking.entry_texts([entry for _, entry in cited], frozenset())  # every type, masked together
    context = [
        ContextItem(citation, entry.record.id, entry.record.kind, _for_model(entry, text, masking))
        for (citation, entry), text in zip(cited, texts)
    ]
    known = masking.masker.known([question])[0]
    masked_question = masking.masker.mask(question, clean(list(question_spans) + known, question))
    result = await synthesizer.answer(masked_question, context)
    by_citation = {item.citation: item.id for item in context}
    trace.record(
        Synthesised(
            sent=tuple(item.id for item in context),
            cited=tuple(by_citation[c] for c in result.citations if c in by_citation),
            invented_citations=len(result.invented_citations),
            flagged_as_instructions=tuple(by_citation[c] for c in result.flagged if c in by_citation),
            grounded=result.grounded,
            error=result.error,
            ms=result.ms,
            masked_for_model=masking.masker.counts(),
        )
    )
    if result.text is None:
        return {"text": None, "error": result.error or "synthesis failed"}
    reveal = frozenset(disclosure.reveal) if disclosure.mask else frozenset(ENTITY_TYPES)
    return {  # entity ids come back: the reader sees them in the items' `from` and `to` anyway
        "text": masking.masker.restore(result.text, reveal | {ENTITY}),
        "citations": list(result.citations),
        "confidence": result.confidence,
        "grounded": result.grounded,
    }
