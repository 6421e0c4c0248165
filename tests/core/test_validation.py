"""A request body as the contract's model: every refusal is a 400 naming the field, never the value."""

from __future__ import annotations

import pytest

from api.audit import FeedbackRequest, UsageRequest
from api.writes import MergeRequest
from core.errors import BadRequest
from core.validation import nul_at, validated


@pytest.mark.parametrize(
    ("model", "body", "named"),
    [
        (MergeRequest, ["ent_b"], "body: expected a JSON object"),
        (MergeRequest, {"into": "ent_\u0000b"}, "into: "),  # the pattern refuses it first
        (MergeRequest, {"into": "ent_b", "also": 1}, "also: unknown field"),
        (UsageRequest, {"used": ["a"] * 201}, "used: "),
        (FeedbackRequest, {"rating": True}, "rating: "),  # strict: a bool is not a rating
        (FeedbackRequest, {"rating": 3, "comment": "secret\u0000value"}, "comment: strings must not contain the NUL character"),
    ],
)
def test_a_refused_body_names_the_field_and_not_the_value(model: type, body: object, named: str) -> None:
    with pytest.raises(BadRequest) as refused:
        validated(model, body)
    assert refused.value.message.startswith(named) and "secret" not in refused.value.message


def test_an_accepted_body_is_the_model() -> None:
    assert validated(FeedbackRequest, {"rating": 5, "comment": None}) == FeedbackRequest(rating=5)
    assert nul_at({"used": ["a", "b\u0000"]}) == "used.1" and nul_at({"k\u0000": 1}) == "body" and nul_at([]) is None
