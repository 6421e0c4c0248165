"""The item envelope, ``ItemIn``: one item as written over HTTP, from a file or from a document
section. The model is the contract's (api/writes.py); this module names it for the writes."""

from __future__ import annotations

from api.writes import ID as ID  # re-exported
from api.writes import MAX_SECTION_CHARS as MAX_SECTION_CHARS
from api.writes import MAX_TEXT_CHARS as MAX_TEXT_CHARS
from api.writes import MAX_WEIGHT as MAX_WEIGHT
from api.writes import NAME as NAME
from api.writes import PRINCIPAL as PRINCIPAL
from api.writes import ItemIn as ItemIn
