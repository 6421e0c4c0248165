"""gateway.writes.documents: front matter into the envelope, Markdown into section pieces, pieces into items."""

from __future__ import annotations

import dataclasses
import hashlib
import re

import pytest

from core.errors import BadRequest
from gateway.writes.documents import (
    DEFAULT_MAX_BYTES,
    Document,
    join_section,
    parse_document,
    piece_id,
    section_items,
)
from gateway.writes.items import ItemIn

FRONT = '---\nacl: ["group:sales"]\n---\n'


def doc(body: str, front: str = FRONT, max_bytes: int = DEFAULT_MAX_BYTES, doc_id: str = "guide") -> Document:
    return parse_document(doc_id, front + body, max_bytes=max_bytes)


def normalise(text: str) -> str:
    return " ".join(text.split())


def size(text: str) -> int:
    return len(text.encode("utf-8"))


def sentences(count: int, words: int = 12, tag: str = "s") -> str:
    return " ".join(f"{tag}{n} " + " ".join(f"word{w}" for w in range(words)) + "." for n in range(count))


# --- front matter -------------------------------------------------------------------------------


def test_front_matter_inline_and_dash_lists_quoted_strings_and_comments() -> None:
    raw = (
        "---\n"
        "# who may see it\n"
        "acl: [group:sales, \"user:jane\", 'role:admin']   # inline list\n"
        "scope:\n"
        "  - sales\n"
        "  - 'support'\n"
        "tags: []\n"
        'title: "Pricing: the \\"guideline\\""\n'
        "sensitivity: 'confidential'\n"
        "authority: approved\n"
        "status: active\n"
        "valid_from: 2026-01-01T00:00:00Z\n"
        'valid_to: "2027-01-01T00:00:00+01:00"\n'
        "recorded_at: 2026-02-01T10:00:00Z\n"
        "slot: 'pricing#discounts'\n"
        "entity: ent_globex\n"
        "attached_to: ent_globex\n"
        "source_system: wiki\n"
        "source_uri: wiki://pricing#discounts\n"
        "---\n"
        "Body.\n"
    )
    document = parse_document("pricing", raw)
    assert document.envelope == {
        "acl": ["group:sales", "user:jane", "role:admin"],
        "scope": ["sales", "support"],
        "tags": [],
        "sensitivity": "confidential",
        "authority": "approved",
        "status": "active",
        "valid_from": "2026-01-01T00:00:00Z",
        "valid_to": "2027-01-01T00:00:00+01:00",
        "recorded_at": "2026-02-01T10:00:00Z",
        "slot": "pricing#discounts",
        "entity": "ent_globex",
        "attached_to": "ent_globex",
        "source": {"system": "wiki", "uri": "wiki://pricing#discounts"},
    }
    assert document.title == 'Pricing: the "guideline"'
    assert document.pieces[0].heading_path == ('Pricing: the "guideline"',)


def test_single_quotes_escape_by_doubling_and_scalar_list_value_is_one_entry() -> None:
    document = doc("Body.\n", front="---\nacl: '*'\ntitle: 'It''s here'\nsource_uri: x\n---\n")
    assert document.envelope == {"acl": ["*"], "source": {"uri": "x"}}
    assert document.title == "It's here"


@pytest.mark.parametrize(
    ("front", "expected"),
    [
        ("---\nsensitivity: internal\n---\n", "acl is required"),
        ('---\nacl: ["*"]\ncolour: blue\n---\n', "line 3: unknown key 'colour'"),
        ('---\nacl: ["*"]\nid: mine\n---\n', "line 3: unknown key 'id'"),
        ('---\nacl: ["*"]\nthis line is not a key\n---\n', "line 3: expected 'key: value'"),
        ('---\nacl: ["*"]\nstatus:active\n---\n', "line 3: expected 'key: value'"),
        ('---\nacl: ["*"\n---\n', "line 2: acl: list not closed"),
        ("---\nacl: [a, [b]]\n---\n", "line 2: acl: nested lists"),
        ("---\nacl: [a,, b]\n---\n", "line 2: acl: empty entry"),
        ("---\nacl: [a] trailing\n---\n", "line 2: acl: unexpected text"),
        ("---\nacl: *\n---\n", "line 2: acl: unsupported syntax"),
        ('---\nacl: ["*"]\ntitle: |\n  block\n---\n', "line 3: title: unsupported syntax"),
        ('---\nacl: ["*"]\nsource_system: {a: b}\n---\n', "line 3: source_system: unsupported syntax"),
        ('---\nacl: ["*"]\nslot: a: b\n---\n', "line 3: slot: a value containing ': ' must be quoted"),
        ('---\nacl: ["*"]\ntitle: "open\n---\n', "line 3: title: unterminated quoted string"),
        ('---\nacl: ["*"]\ntitle: "a\\qb"\n---\n', "line 3: title: unsupported escape"),
        ("---\nacl:\n  sales: x\n---\n", "line 3: indented line"),
        ('---\n- group:sales\nacl: ["*"]\n---\n', "line 2: a '- item' line must follow a key with no value"),
        ("---\nacl:\nscope: [sales]\n---\n", "line 2: acl: no value"),
        ('---\nacl: ["*"]\nslot:\n---\n', "line 3: slot: no value"),
        ('---\nacl: ["*"]\nacl: ["*"]\n---\n', "line 3: acl: given twice"),
        ('---\nacl: ["*"]\nsensitivity: [internal]\n---\n', "line 3: sensitivity: expected a single value"),
        ("---\nacl: group:a, group:b\n---\n", "line 2: acl: write a list as [a, b]"),
        ('---\nacl: ["*"]\n', "no closing ---"),
        ('---\nacl: ["*"]\nsensitivity: secret\n---\n', "front matter: sensitivity:"),
        ('---\nacl: ["nobody"]\n---\n', "front matter: acl:"),
        ('---\nacl: ["*"]\nvalid_from: tomorrow\n---\n', "front matter: valid_from:"),
    ],
)
def test_front_matter_errors_name_the_line_and_key(front: str, expected: str) -> None:
    with pytest.raises(BadRequest) as caught:
        doc("Body.\n", front=front)
    assert expected in caught.value.message


def test_unknown_key_message_lists_the_allowed_keys() -> None:
    with pytest.raises(BadRequest) as caught:
        doc("Body.\n", front='---\nacl: ["*"]\nkind: memory\n---\n')
    assert "unknown key 'kind'" in caught.value.message
    assert "acl" in caught.value.message and "source_uri" in caught.value.message


@pytest.mark.parametrize("raw", ["# Title\n\nBody.\n", "", "\n---\nacl: ['*']\n---\nBody.\n", "acl: ['*']\n"])
def test_no_front_matter_is_refused(raw: str) -> None:
    with pytest.raises(BadRequest) as caught:
        parse_document("guide", raw)
    assert "front matter with at least acl is required" in caught.value.message


def test_error_messages_never_quote_the_value() -> None:
    with pytest.raises(BadRequest) as caught:
        doc("Body.\n", front='---\nacl: ["*"]\ntitle: "secretvalue\n---\n')
    assert "secretvalue" not in caught.value.message


@pytest.mark.parametrize("bad_id", ["", "has space", "a#b", "x" * 201])
def test_document_id_is_checked(bad_id: str) -> None:
    with pytest.raises(BadRequest):
        doc("Body.\n", doc_id=bad_id)


def test_nul_and_lone_surrogates_are_refused() -> None:
    with pytest.raises(BadRequest):
        doc("a\x00b\n")
    with pytest.raises(BadRequest):
        doc("a\ud800b\n")
    with pytest.raises(BadRequest):
        parse_document("guide", b"---\nacl: ['*']\n---\n\xff\n")


# --- sectioning ---------------------------------------------------------------------------------


def test_headings_of_levels_one_to_three_cut_and_level_four_does_not() -> None:
    body = (
        "Before any heading.\n"
        "# Pricing guideline\n"
        "Overview.\n"
        "## Discounts\n"
        "Discount rules.\n"
        "### Annual billing\n"
        "Ten percent.\n"
        "#### Exceptions\n"
        "None this year.\n"
        "##### Deeper\n"
        "Still here.\n"
        "## Refunds ##\n"
        "Within 30 days.\n"
        "#nospace is not a heading\n"
        "    # indented four spaces is not a heading\n"
    )
    pieces = doc(body, front="---\nacl: ['*']\ntitle: The guide\n---\n").pieces
    assert [p.heading_path for p in pieces] == [
        ("The guide",),
        ("Pricing guideline",),
        ("Pricing guideline", "Discounts"),
        ("Pricing guideline", "Discounts", "Annual billing"),
        ("Pricing guideline", "Refunds"),
    ]
    assert [p.index for p in pieces] == [0, 1, 2, 3, 4]
    assert pieces[0].text == "Before any heading."
    assert pieces[3].text.startswith("Annual billing\n\nTen percent.")
    assert "#### Exceptions\nNone this year." in pieces[3].text
    assert "##### Deeper\nStill here." in pieces[3].text
    assert pieces[4].text.startswith("Refunds\n\nWithin 30 days.")
    assert "#nospace is not a heading" in pieces[4].text
    assert "# indented four spaces" in pieces[4].text
    assert pieces[3].section == "Pricing guideline > Discounts > Annual billing"
    assert pieces[3].section_key == "pricing-guideline/discounts/annual-billing"


def test_preamble_takes_the_document_id_without_a_title_and_empty_sections_make_no_piece() -> None:
    body = "Preamble.\n# Empty\n\n\n## Also empty\n# Full\nText.\n"
    pieces = doc(body).pieces
    assert [(p.heading_path, p.text) for p in pieces] == [(("guide",), "Preamble."), (("Full",), "Full\n\nText.")]
    assert [p.heading_path for p in doc("# Only\nText.\n").pieces] == [("Only",)]  # no empty preamble
    assert doc("").pieces == () and doc("# A\n## B\n").pieces == ()


def test_a_deeper_heading_after_a_skipped_level_keeps_the_path_it_has() -> None:
    pieces = doc("# A\na\n### C\nc\n## B\nb\n# D\nd\n").pieces
    assert [p.heading_path for p in pieces] == [("A",), ("A", "C"), ("A", "B"), ("D",)]


def test_headings_inside_fenced_code_blocks_are_ignored() -> None:
    body = (
        "# Setup\n"
        "Run this:\n"
        "```sh\n"
        "# install the tool\n"
        "## not a heading either\n"
        "```\n"
        "~~~python\n"
        "# a comment\n"
        "```\n"
        "# still code: a ``` line does not close a ~~~ fence\n"
        "~~~\n"
        "  ````\n"
        "  # indented fence content\n"
        "  ```\n"
        "  # a shorter closing marker does not close it\n"
        "  ````\n"
        "## Usage\n"
        "Use it.\n"
    )
    pieces = doc(body).pieces
    assert [p.heading_path for p in pieces] == [("Setup",), ("Setup", "Usage")]
    assert "# install the tool" in pieces[0].text
    assert "# still code" in pieces[0].text
    assert "# a shorter closing marker" in pieces[0].text


def test_an_unclosed_fence_runs_to_the_end() -> None:
    pieces = doc("# A\n```\n# B\ncode\n\n").pieces
    assert [p.heading_path for p in pieces] == [("A",)]
    assert pieces[0].text == "A\n\n```\n# B\ncode"


def test_inline_triple_backticks_do_not_open_a_fence() -> None:
    pieces = doc("# A\n```inline``` text\n# B\nb\n").pieces
    assert [p.heading_path for p in pieces] == [("A",), ("B",)]


def test_repeated_heading_paths_get_distinct_section_keys() -> None:
    pieces = doc("# Notes\na\n# Notes\nb\n# Ünïcode Straße — 料金\nc\n").pieces
    assert [p.section_key for p in pieces] == ["notes", "notes~2", "ünïcode-strasse-料金"]


# --- cutting ------------------------------------------------------------------------------------


def test_a_long_section_is_cut_at_paragraphs_then_sentences_and_every_piece_fits() -> None:
    limit = 400
    paragraphs = [sentences(2, tag=f"p{n}s") for n in range(6)]  # each about 200 bytes
    long_paragraph = sentences(8, tag="long")  # about 800 bytes: must be cut at sentences
    body = "\n\n".join(paragraphs[:3] + [long_paragraph] + paragraphs[3:])
    document = doc(f"# Long\n{body}\n", max_bytes=limit)
    texts = [p.text for p in document.pieces]
    assert len(texts) > 3
    assert all(size(t) <= limit for t in texts)
    assert all(p.heading_path == ("Long",) and p.section_key == "long" for p in document.pieces)
    assert [p.part for p in document.pieces] == list(range(len(texts)))
    assert texts[0].startswith("Long\n\n") and not any(t.startswith("Long\n") for t in texts[1:])
    assert all(t.endswith(".") for t in texts)  # cut only after a sentence
    for paragraph in paragraphs:  # the short paragraphs stay whole, each in one piece
        assert sum(paragraph in t for t in texts) == 1
    long_parts = [t for t in texts if "long" in t]  # the long one starts and ends on a piece boundary
    assert len(long_parts) >= 2 and all("long" in t.split()[0] and "\n\n" not in t for t in long_parts)
    assert normalise(" ".join(long_parts)) == normalise(long_paragraph)
    assert normalise(join_section(texts)) == normalise("Long\n\n" + body)


def test_paragraph_boundaries_win_over_sentence_boundaries_further_on() -> None:
    first = "Short one. Two."
    second = " ".join(f"Sentence {n}." for n in range(30))  # sentence ends within reach of the limit
    document = doc(f"# H\n{first}\n\n{second}\n", max_bytes=size("H\n\n" + first) + 60)
    assert document.pieces[0].text == f"H\n\n{first}"


def test_a_sentence_longer_than_the_limit_is_cut_at_whitespace() -> None:
    words = " ".join(f"w{n:03d}" for n in range(200))  # one sentence, 999 bytes, no sentence end inside
    texts = [p.text for p in doc(f"# H\n{words}\n", max_bytes=100).pieces]
    assert all(size(t) <= 100 for t in texts)
    assert all(re.fullmatch(r"w\d{3}", t.split()[-1]) for t in texts)  # no word cut in two
    assert normalise(join_section(texts)) == normalise(f"H\n\n{words}")


def test_line_breaks_are_preferred_to_spaces() -> None:
    rows = "\n".join(f"| row {n} | value {n} |" for n in range(20))
    texts = [p.text for p in doc(f"# Table\n{rows}\n", max_bytes=120).pieces]
    assert all(t.endswith("|") for t in texts)
    assert normalise(join_section(texts)) == normalise(f"Table\n\n{rows}")


def test_an_oversized_code_block_stays_whole_and_alone() -> None:
    limit = 300
    code = "```python\n" + "\n".join(f"value_{n} = {n}  # comment\n\n" for n in range(40)) + "```"
    assert size(code) > limit
    before = sentences(1, tag="before")
    after = sentences(1, tag="after")
    document = doc(f"# Code\n{before}\n\n{code}\n\n{after}\n", max_bytes=limit)
    texts = [p.text for p in document.pieces]
    assert texts == [f"Code\n\n{before}", code, after]
    assert [size(t) <= limit for t in texts] == [True, False, True]


def test_a_small_code_block_is_packed_with_its_neighbours_but_never_cut() -> None:
    code = "```\nline one\n\nline two. Sentence! ok\n```"
    document = doc(f"# A\nIntro text.\n{code}\nAfter.\n", max_bytes=60)
    texts = [p.text for p in document.pieces]
    assert any(code in t for t in texts)
    assert all(t.count("```") in (0, 2) for t in texts)


def test_a_heading_never_stands_alone_even_before_an_oversized_block() -> None:
    code = "```\n" + "x = 1\n" * 40 + "```"
    texts = [p.text for p in doc(f"# Title\n{code}\nAfter.\n", max_bytes=50).pieces]
    assert texts == [f"Title\n\n{code}", "After."]


def test_multibyte_text_is_never_cut_mid_character() -> None:
    japanese = "料金は年払いで一割引きになります。" * 30 + "割引の上限は二割です" * 30  # no spaces at all
    emoji = "👩‍👩‍👧‍👦👍🏽🇯🇵é́" * 40  # ZWJ sequence, skin tone, flag, combining marks
    for limit in range(64, 200, 7):
        document = doc(f"# 料金\n{japanese}\n\n{emoji}\n", max_bytes=limit)
        texts = [p.text for p in document.pieces]
        assert all(size(t) <= limit for t in texts), limit
        assert "".join("".join(t.split()) for t in texts) == "料金" + japanese + emoji
        for text in texts:
            text.encode("utf-8").decode("utf-8")
            assert not text.startswith(("\u200d", "\U0001f3fd", "\u0301", "🇵")) and not text.endswith(("\u200d", "🇯"))
        assert texts[0].startswith("料金\n\n")


def test_japanese_sentences_are_cut_after_the_full_stop() -> None:
    sentence = "料金は年払いで一割引きになります。"
    texts = [p.text for p in doc(f"# 料金\n{sentence * 20}\n", max_bytes=200).pieces]
    assert len(texts) > 1
    assert all(t.endswith("。") for t in texts)


def test_an_oversized_heading_is_cut_rather_than_exceeding_the_limit() -> None:
    heading = "Heading " * 20
    texts = [p.text for p in doc(f"# {heading}\nBody.\n", max_bytes=50).pieces]
    assert all(size(t) <= 50 for t in texts)
    assert normalise(join_section(texts)) == normalise(f"{heading} Body.")


def test_max_bytes_has_a_floor() -> None:
    with pytest.raises(ValueError):
        doc("Body.\n", max_bytes=8)


# --- identity and items ---------------------------------------------------------------------------


def long_document() -> str:
    sections = [f"## Part {n}\n\n" + "\n\n".join(sentences(3, tag=f"x{n}p{m}s") for m in range(4)) for n in range(5)]
    return '---\nacl: ["group:sales"]\ntags: [pricing]\n---\n# Guide\nIntro.\n\n' + "\n\n".join(sections) + "\n"


def test_same_input_same_ids_and_sha256() -> None:
    raw = long_document()
    first, second = parse_document("guide", raw, max_bytes=500), parse_document("guide", raw, max_bytes=500)
    assert first == second
    assert first.sha256 == hashlib.sha256(raw.encode("utf-8")).hexdigest()
    assert parse_document("guide", raw.encode("utf-8"), max_bytes=500) == first
    assert section_items(first) == section_items(second)


def test_a_one_character_change_changes_the_sha256_and_only_that_piece() -> None:
    raw = long_document()
    changed = raw.replace("x2p1s1 word0", "x2p1s1 wordO", 1)
    assert changed != raw and len(changed) == len(raw)
    before, after = parse_document("guide", raw, max_bytes=500), parse_document("guide", changed, max_bytes=500)
    assert before.sha256 != after.sha256
    assert len(before.pieces) == len(after.pieces) > 5
    differing = [i for i, (a, b) in enumerate(zip(before.pieces, after.pieces)) if a != b]
    assert len(differing) == 1
    a, b = before.pieces[differing[0]], after.pieces[differing[0]]
    assert (a.index, a.heading_path, a.section_key, a.part) == (b.index, b.heading_path, b.section_key, b.part)
    assert [i["id"] for i in section_items(before)] == [i["id"] for i in section_items(after)]


def test_every_item_passes_item_validation() -> None:
    raw = (
        "---\n"
        "acl: [group:sales, user:jane]\nscope: [sales]\ntags:\n  - pricing\nsensitivity: confidential\n"
        "authority: approved\nvalid_from: 2026-01-01T00:00:00Z\nsource_system: wiki\nsource_uri: wiki://x\n"
        "title: Guide\nentity: ent_globex\nattached_to: ent_globex\nslot: guide\nstatus: active\n"
        "recorded_at: 2026-01-02T00:00:00Z\nvalid_to: 2027-01-01T00:00:00Z\n"
        "---\n" + long_document().split("---\n", 2)[2] + "\n# " + "Very long heading " * 40 + "\nText.\n"
    )
    document = parse_document("pricing_guideline", raw, max_bytes=300)
    items = section_items(document)
    assert len(items) == len(document.pieces) > 10
    for n, item in enumerate(items):
        validated = ItemIn.model_validate(item)
        assert validated.id == f"pricing_guideline:{n:04d}" == piece_id("pricing_guideline", n)
        assert validated.kind == "document" and validated.document == "pricing_guideline"
        assert validated.text == document.pieces[n].text
        assert validated.tags == ["pricing"]  # the envelope's tags, nothing added
        assert validated.source == {"system": "wiki", "uri": "wiki://x"}
        assert set(item) == {"id", "kind", "document", "section", "text", *document.envelope}
    assert items[1]["section"] == "Guide > Part 0"
    assert len(items[-1]["section"]) == 500  # a very long heading path is shortened to fit


def test_items_do_not_share_the_envelope_lists() -> None:
    document = doc("# A\na\n# B\nb\n")
    items = section_items(document)
    items[0]["acl"].append("user:mallory")
    assert document.envelope["acl"] == ["group:sales"] and items[1]["acl"] == ["group:sales"]


def test_document_and_piece_are_frozen() -> None:
    document = doc("Body.\n")
    with pytest.raises(dataclasses.FrozenInstanceError):
        document.id = "other"  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        document.pieces[0].text = "other"  # type: ignore[misc]


# --- join_section -------------------------------------------------------------------------------


def test_join_section_reassembles_a_section_cut_into_parts() -> None:
    body = "\n\n".join(
        [sentences(3, tag="a"), sentences(9, tag="b"), "```\ncode block\n\n  indented\n```", sentences(2, tag="c")]
    )
    document = doc(f"# Intro\nFirst.\n# Big one\n{body}\n# Outro\nLast.\n", max_bytes=250)
    by_section: dict[str, list[str]] = {}
    for piece in document.pieces:
        by_section.setdefault(piece.section_key, []).append(piece.text)
    assert len(by_section["big-one"]) > 3
    joined = join_section(by_section["big-one"])
    assert normalise(joined) == normalise(f"Big one\n\n{body}")
    assert "```\ncode block\n\n  indented\n```" in joined
    assert join_section(["a", "", "  b  "]) == "a\n\nb"
