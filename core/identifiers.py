"""Identifiers normalised the same way at ingest and at lookup.

Emails are trimmed and lower-cased; phones become the digits of their E.164 form (Google's
libphonenumber), or their bare digits when no country can be told; websites become their
registrable domain under the Public Suffix List (`https://www.Acme.co.uk/about` -> `acme.co.uk`),
except a person-profile URL (`linkedin.com/in/jane`), which names a contact rather than a company.
"""

from __future__ import annotations

import re
from functools import cache
from urllib.parse import urlsplit

import phonenumbers
from publicsuffixlist import PublicSuffixList

from core.records import Identifier

# Hosts whose paths name a person, and the path prefix that does: such a URL resolves to a contact.
PROFILE_PATHS = {
    "linkedin.com": re.compile(r"^/(in|pub)/[^/?#]+"),
    "github.com": re.compile(r"^/[^/?#]+/?$"),
    "twitter.com": re.compile(r"^/[^/?#]+/?$"),
    "x.com": re.compile(r"^/[^/?#]+/?$"),
    "facebook.com": re.compile(r"^/[^/?#]+/?$"),
}


@cache
def _suffixes() -> PublicSuffixList:
    return PublicSuffixList()  # the list shipped inside the package; never fetched


def email(value: str) -> str:
    return value.strip().lower()


def phone(value: str) -> str:
    """Digits of the E.164 form when the number carries its country, else the bare digits."""
    try:
        parsed = phonenumbers.parse(value, None)
        return phonenumbers.format_number(parsed, phonenumbers.PhoneNumberFormat.E164).lstrip("+")
    except phonenumbers.NumberParseException:
        return re.sub(r"\D", "", value)


def host(value: str) -> str:
    value = value.strip()
    try:
        return (urlsplit(value if "://" in value else f"//{value}").hostname or "").rstrip(".")
    except ValueError:  # a malformed URL, e.g. an unclosed IPv6 bracket
        return ""


def registrable_domain(hostname: str) -> str:
    """`www.acme.co.uk` -> `acme.co.uk`; a bare public suffix or an unknown single label stays as it is."""
    hostname = hostname.lower()
    return _suffixes().privatesuffix(hostname) or hostname


def domain_of_email(address: str) -> str | None:
    _, at, domain = email(address).rpartition("@")
    return registrable_domain(domain) if at and domain else None


def website(value: str) -> Identifier:
    """A profile identifier for a person-profile URL, else the registrable domain."""
    hostname = host(value)
    domain = registrable_domain(hostname) if hostname else ""
    pattern = PROFILE_PATHS.get(domain)
    if pattern is not None:
        path = urlsplit(value.strip() if "://" in value else f"//{value.strip()}").path
        match = pattern.match(path.lower())
        if match:
            return Identifier("profile", f"{domain}{match.group(0).rstrip('/')}")
    return Identifier("domain", domain)
