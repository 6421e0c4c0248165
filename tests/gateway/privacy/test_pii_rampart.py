"""The Rampart token classifier (gateway/privacy/rampart.py, issue 28): the names spaCy's model and
the rules miss in ordinary sentences are found; it reads only the sentences a candidate word is left
uncovered in; parts of an address it reads are no persons; it loads from the installed wheel with
one thread."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.privacy import rampart
from gateway.privacy.detect import Detector
from gateway.privacy.placeholders import Masker

# Sentences of the kind issue 28 found leaking (presidio-research's shapes, names written here):
# the first three the rules found already; the others only the classifier does.
MISSED_BEFORE = (
    ("My name is Rubija and I run the night shift.", ["Rubija"]),
    ("Tomomi Nishiyama lives at 12 Harbour Road.", ["Tomomi Nishiyama"]),
    ("John: You saved my life!\nMegan: Remember me?", ["John", "Megan"]),
    (
        "They had 6: Kateřina, James, Christopher, Jennifer, Emily and Michael.",
        ["Kateřina", "James", "Christopher", "Jennifer", "Emily", "Michael"],
    ),
    ("What's your last name? Baba", ["Baba"]),
    ("This song by ex-Zombie Kleist is a perfect example of why.", ["Kleist"]),
)


@pytest.mark.parametrize(("text", "expected"), MISSED_BEFORE)
def test_names_in_ordinary_sentences_are_masked(detector: Detector, text: str, expected: list[str]) -> None:
    masked = Masker().mask(text, detector.analyze(text))
    for name in expected:
        assert name not in masked, masked
    assert "<PERSON_1>" in masked


def test_a_scientific_sentence_is_not_read() -> None:
    """No candidate word (capitalised words are English, acronyms, or covered): nothing for the model."""
    text = (
        "Background: Alveolar macrophages express TLR4. Methods: We measured IL-6 in 40 patients. "
        "Results were significant (p < 0.01)."
    )
    assert rampart.unread(text, []) == []


def test_only_sentences_with_an_uncovered_candidate_are_read() -> None:
    text = "We measured the response. Then Rubija called. The samples were frozen."
    ranges = rampart.unread(text, [])
    assert [text[a:b] for a, b in ranges] == ["Then Rubija called."]
    start = text.index("Rubija")
    from gateway.privacy.spans import Span

    assert rampart.unread(text, [Span("PERSON", start, start + len("Rubija"), 0.9)]) == []


def test_a_gazetteer_name_in_lower_case_is_a_candidate() -> None:
    text = "the contract went to jukka yesterday"
    assert rampart.unread(text, []) == [(0, len(text))]


def test_address_parts_are_not_persons(detector: Detector) -> None:
    """Read as parts of an address by the classifier: the rules' PERSON spans on them are dropped."""
    for text in (
        "Please send it to the corner of 76 Boulevard de Normandie and Eriksson Bridge.",
        "I'm originally from Greenlander",
    ):
        assert [s for s in detector.analyze(text) if s.type == "PERSON"] == [], text


def test_model_reads_a_window_longer_than_its_positions() -> None:
    """A text far longer than one window (and than 512 tokens) is read in windows: a name at its
    end is still found, and spans map back to the right characters."""
    filler = "The committee reviewed the annual figures and agreed on the next steps. " * 40
    text = filler + "Afterwards Rubija Hadžić signed the minutes."
    spans = rampart.reader().read(text, [(0, len(text))])
    names = [text[s.start : s.end] for s in spans if s.type == rampart.ENTITY]
    assert "Rubija Hadžić" in names


def test_loaded_from_the_wheel_with_one_thread() -> None:
    folder = rampart.model_folder()
    assert (folder / "onnx" / "model_q4.onnx").is_file() and (folder / "tokenizer.json").is_file()
    assert "site-packages" in str(folder) or "dist-packages" in str(folder)
    options = rampart.reader()._session.get_session_options()
    assert options.intra_op_num_threads == 1 and options.inter_op_num_threads == 1


def test_the_analyzer_version_changes_with_the_model(monkeypatch: pytest.MonkeyPatch) -> None:
    """Stored spans of another model (or gate) version are analysed again."""
    from gateway.privacy.detect import analyzer_version

    assert rampart.model_version() == f"1.4.0/{rampart.VERSION}"
    before = analyzer_version()
    monkeypatch.setattr(rampart, "VERSION", rampart.VERSION + "-next")
    assert analyzer_version() != before


def test_a_request_time_string_costs_the_classifier_a_bounded_read(monkeypatch: pytest.MonkeyPatch, detector: Detector) -> None:
    """A question of 4,000 characters of made-up capitalised words (each one a candidate) would
    have the classifier read all of it, about half a second per call: during a request it reads
    at most REQUEST_READ_CHARS."""
    from gateway.privacy.mask import REQUEST_READ_CHARS

    question = " ".join(f"Zorbel{chr(97 + i % 26)}{chr(97 + i // 26 % 26)}x" for i in range(400))[:4000]
    read: list[int] = []
    original = rampart.Reader.read

    def spy(self: rampart.Reader, text: str, ranges: list[tuple[int, int]]) -> list[Any]:
        read.append(sum(b - a for a, b in ranges))
        return original(self, text, ranges)

    monkeypatch.setattr(rampart.Reader, "read", spy)
    detector.analyze_many([question])
    assert read[-1] > 3000  # at ingest (no limit) it reads everything
    detector.analyze_many([question], read_chars=REQUEST_READ_CHARS)
    assert 0 < read[-1] <= REQUEST_READ_CHARS
    assert rampart.within([(0, 600), (700, 1500), (1600, 1700)], 1000) == [(0, 600), (700, 1100)]
