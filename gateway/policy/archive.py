"""An OPA bundle's bytes, checked in linear time before any tar parser reads them, then unpacked in a child with a deadline.

OPA keeps a bundle's signature inside the archive (`.signatures.json`), so the tar has to be read
before the signature can be checked: whoever can write to the policy source gets to feed the tar
reader. CPython's `tarfile` before 3.11.10 / 3.12.6 (and 3.10.15, 3.9.20, 3.8.20) parses pax
extended headers with regular expressions that backtrack (CVE-2024-6232, python/cpython#121285):
a pax header of 30 KB holds the GIL for 1.4 s on 3.11.7, one of 600 KB (under 1 KB gzipped) for
minutes (the time grows with the square of the length), and with it the whole service, /healthz
included. So, in this order:

1. `scan`, stdlib only and linear, under a CPU deadline (SCAN_DEADLINE_S of its thread's CPU time:
   a reload in progress never holds a good one up for longer): the bundle's bytes capped
   (MAX_BUNDLE_BYTES, a file as a download); gunzip fed in bounded chunks, so a stream of many
   members costs its length and not its length times its members, and refused past
   MAX_GZIP_MEMBERS members; with a cap on the bytes it yields (a gzip bomb stops at the cap);
   walk the 512-byte headers (checksum, octal or base-256 size, type), count members and
   bytes, refuse extended headers (pax `x`/`g`, GNU long name/link `L`/`K`) above MAX_EXTENDED_BYTES,
   more than MAX_GLOBAL_HEADERS global pax headers or MAX_EXTENDED_TOTAL bytes of extended headers
   in all, and parse each pax record here ("<length> <keyword>=<value>\\n", the length must be exact),
   refusing a malformed one, a run of more than MAX_DIGIT_RUN digits (what the regexes backtrack
   on) and anything but regular files and directories. What passes is a tar `tarfile` reads in
   linear time; it is cut at its end-of-archive marker, so nothing unscanned follows.
2. `unpack`: `tarfile` reads the scanned tar in a child process (gateway/policy/untar.py, started
   isolated and without site-packages, `python -I -S`), killed after UNPACK_DEADLINE_S, so a parse
   that runs away all the same is refused and the revision in force keeps serving.

The caller (gateway/policy/bundle.py) then checks names, the signature and the manifest.
"""

from __future__ import annotations

import functools
import logging
import re
import struct
import subprocess
import sys
import tarfile
import time
import zlib
from dataclasses import dataclass
from pathlib import Path

from core.errors import ConfigurationError

MAX_ARCHIVE_BYTES = 64 * 1024 * 1024  # unpacked, all files together
MAX_ARCHIVE_FILES = 10_000  # members of a bundle: counted as the tar is scanned, before any is parsed
# The tar stream itself, headers and padding included: the gunzip stops here (a gzip bomb).
MAX_TAR_BYTES = MAX_ARCHIVE_BYTES + 32 * 1024 * 1024
MAX_EXTENDED_BYTES = 8 * 1024  # one pax header or GNU long name/link
MAX_EXTENDED_TOTAL = 64 * 1024  # every pax header and GNU long name/link of a bundle, together
MAX_GLOBAL_HEADERS = 8  # global pax headers (`g`) in a bundle; OPA's builds write none
MAX_DIGIT_RUN = 64  # consecutive ASCII digits in a pax header (a length, a size, a time need 20 at most)
DIGIT_RUN = re.compile(rb"[0-9]{%d,}" % (MAX_DIGIT_RUN + 1))
MAX_BUNDLE_BYTES = 16 * 1024 * 1024  # a bundle as stored or served, gzipped: a file's and a download's cap
MAX_GZIP_MEMBERS = 64  # gzip members of one bundle (OPA and tar write one)
GZIP_FEED = 64 * 1024  # compressed bytes handed to zlib at a time
SCAN_DEADLINE_S = 2.0  # CPU seconds of the scanning thread (gunzip and header walk) before it gives up
UNPACK_DEADLINE_S = 10.0  # the child that runs tarfile is killed after this
CHILD = Path(__file__).with_name("untar.py")
CVE = "CVE-2024-6232"

BLOCK = 512
ZERO_BLOCK = bytes(BLOCK)
REGULAR = frozenset({b"0", b"\0", b"7"})  # regular file, old regular file, contiguous file
DIRECTORY = b"5"
PAX = frozenset({b"x", b"g"})
GNU_LONG = frozenset({b"L", b"K"})
NAMES = {
    b"1": "hard link",
    b"2": "symbolic link",
    b"3": "character device",
    b"4": "block device",
    b"6": "FIFO",
    b"S": "GNU sparse file",
    b"X": "Solaris extended header",
    b"V": "GNU volume header",
    b"M": "GNU multi-volume continuation",
    b"D": "GNU dump directory",
}

log = logging.getLogger("gateway.policy")


# ------------------------------------------------------------------ the interpreter


def tarfile_vulnerable(version: tuple[int, int, int] | None = None) -> bool:
    """Whether a Python of `version` (default: this one) has the backtracking pax regexes of
    CVE-2024-6232. This one is not when its tarfile carries the fix whatever its version says: a
    distribution's backport (Debian 12's python3.11 3.11.2 has it) parses the length prefix with
    `_header_length_prefix_re`, which the fix added."""
    if version is None:
        if hasattr(tarfile, "_header_length_prefix_re"):
            return False
        version = (sys.version_info.major, sys.version_info.minor, sys.version_info.micro)
    major, minor, micro = version
    fixed = {8: 20, 9: 20, 10: 15, 11: 10, 12: 6}
    if (major, minor) < (3, 8):
        return True
    return major == 3 and minor in fixed and micro < fixed[minor]


def interpreter_warning() -> str | None:
    """The start-up warning on a vulnerable interpreter; None on a patched one."""
    if not tarfile_vulnerable():
        return None
    version = ".".join(str(part) for part in sys.version_info[:3])
    return (
        f"Python {version}: its tarfile backtracks on crafted pax headers ({CVE}; fixed in 3.11.10 / 3.12.6): "
        f"policy bundles are pre-scanned in linear time and unpacked in a child process killed after "
        f"{UNPACK_DEADLINE_S:g} s; run a patched Python"
    )


@functools.cache
def warn_if_vulnerable() -> bool:
    """Log `interpreter_warning()` once per process; whether it was logged."""
    warning = interpreter_warning()
    if warning is not None:
        log.warning("%s", warning)
    return warning is not None


# ------------------------------------------------------------------ 1. the scan


class Deadline:
    """The scan's CPU budget: `check` refuses the bundle once the thread has used `seconds` of CPU."""

    def __init__(self, source: Path, seconds: float | None = None) -> None:
        self.source = source
        self.seconds = SCAN_DEADLINE_S if seconds is None else seconds
        self.started = time.thread_time()

    def check(self) -> None:
        if time.thread_time() - self.started > self.seconds:
            raise ConfigurationError(
                f"{self.source}: took more than {self.seconds:g} s of CPU to scan before its signature could be checked; refused"
            )


NOT_ZERO = re.compile(rb"[^\0]")


def read_bundle_file(path: Path) -> bytes:
    """A bundle file's bytes, at most one past MAX_BUNDLE_BYTES: `scan` refuses a bundle past the
    cap, and a file past it is never read whole."""
    with path.open("rb") as handle:
        return handle.read(MAX_BUNDLE_BYTES + 1)


def gunzip(archive: bytes, source: Path, cap: int | None = None, deadline: Deadline | None = None) -> bytes:
    """The gzip stream's content (every member of a multi-member stream, at most MAX_GZIP_MEMBERS),
    never more than `cap` bytes of it: past the cap, refused without inflating the rest. Linear:
    zlib is fed GZIP_FEED bytes at a time, so what it copies per member (its unused input) is at
    most that, whatever follows."""
    cap = MAX_TAR_BYTES if cap is None else cap
    deadline = deadline or Deadline(source)
    out = bytearray()
    view = memoryview(archive)
    position = members = 0
    if not archive.startswith(b"\x1f\x8b"):
        raise ConfigurationError(f"{source}: not a gzipped tar bundle (no gzip header)")
    try:
        while position < len(archive):
            members += 1
            if members > MAX_GZIP_MEMBERS:
                raise ConfigurationError(f"{source}: a gzip stream of more than {MAX_GZIP_MEMBERS} members; refused")
            inflate = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
            while not inflate.eof:
                deadline.check()
                pending: bytes | memoryview = inflate.unconsumed_tail
                if not pending:
                    pending = view[position : position + GZIP_FEED]
                    position += len(pending)
                    if not pending:  # no input left and the member has not ended
                        raise ConfigurationError(f"{source}: not a gzipped tar bundle (the gzip stream is truncated)")
                chunk = inflate.decompress(pending, cap + 1 - len(out))  # max_length >= 1: 0 would mean unlimited
                out += chunk
                if len(out) > cap:
                    raise ConfigurationError(f"{source}: decompresses to more than {cap} bytes; refused before reading it all")
            position -= len(inflate.unused_data)  # the next member starts in the last bytes fed
            found = NOT_ZERO.search(archive, position)  # gzip allows zero padding after a member
            position = found.start() if found is not None else len(archive)
            if position < len(archive) and archive[position : position + 2] != b"\x1f\x8b":
                raise ConfigurationError(f"{source}: not a gzipped tar bundle (data after the gzip stream)")
    except zlib.error as exc:
        raise ConfigurationError(f"{source}: not a gzipped tar bundle (zlib error)") from exc
    return bytes(out)


def _number(field: bytes) -> int | None:
    """A header's numeric field as tarfile reads it: base-256 when the first byte is 0x80 (0xff,
    negative, is refused), else octal up to the first NUL, blanks around it; None when malformed."""
    if field[:1] == b"\x80":
        return int.from_bytes(field[1:], "big")
    if field[:1] == b"\xff":
        return None
    text = field.split(b"\0", 1)[0].strip(b" ")
    if text and not all(0x30 <= c <= 0x37 for c in text):
        return None
    return int(text, 8) if text else 0


def _checksum_ok(header: bytes) -> bool:
    stored = _number(header[148:156])
    unsigned = 256 + sum(header[:148]) + sum(header[156:])
    signed = 256 + sum(struct.unpack("148b8x356b", header))
    return stored is not None and stored in (unsigned, signed)


def _blocks(size: int) -> int:
    return -(-size // BLOCK) * BLOCK


def pax_records(data: bytes, source: Path) -> list[tuple[str, bytes]]:
    """The records of a pax extended header, parsed in one pass: "<length> <keyword>=<value>\\n",
    the length counting the whole record. A malformed record, or a run of more than MAX_DIGIT_RUN
    digits anywhere (what tarfile's regexes backtrack on), refuses the bundle."""
    run = DIGIT_RUN.search(data)  # linear, in C
    if run is not None:
        longest = len(run.group())
        raise ConfigurationError(
            f"{source}: a pax header holds a run of {longest} digits (at most {MAX_DIGIT_RUN}); refused before any tar parsing"
        )
    records: list[tuple[str, bytes]] = []
    position = 0
    while position < len(data):
        space = data.find(b" ", position, position + 8)
        digits = data[position:space] if space > position else b""
        if not digits or not digits.isdigit():
            raise ConfigurationError(f"{source}: a malformed pax record at byte {position} (no length); refused")
        length = int(digits)
        record = data[position : position + length]
        equals = record.find(b"=", len(digits) + 1)
        if len(record) != length or not record.endswith(b"\n") or equals <= len(digits) + 1:
            raise ConfigurationError(f"{source}: a malformed pax record at byte {position} (its length does not match); refused")
        keyword = record[len(digits) + 1 : equals]
        if not all(0x21 <= c <= 0x7E for c in keyword):
            raise ConfigurationError(f"{source}: a malformed pax record at byte {position} (keyword {keyword[:40]!r}); refused")
        records.append((keyword.decode("ascii"), record[equals + 1 : -1]))
        position += length
    return records


@dataclass(frozen=True, slots=True)
class Scanned:
    tar: bytes  # the tar up to its end-of-archive marker, then two zero blocks
    members: int
    size: int  # bytes of regular files


def scan(archive: bytes, source: Path) -> Scanned:
    """Check a gzipped bundle before any tar parser reads it (see the module doc); ConfigurationError
    naming `source` when it is refused."""
    if len(archive) > MAX_BUNDLE_BYTES:
        raise ConfigurationError(f"{source}: a bundle larger than {MAX_BUNDLE_BYTES} bytes; refused")
    deadline = Deadline(source)
    tar = gunzip(archive, source, deadline=deadline)
    position = members = size = extended = globals_ = 0
    pending: set[bytes] = set()  # extended headers read for the member that comes next
    pending_size: int | None = None  # a pax `size` for that member
    while True:
        deadline.check()
        header = tar[position : position + BLOCK]
        if len(header) < BLOCK:
            if header or pending or position == 0:
                why = "an empty tar" if not tar else "the tar ends inside a header"
                raise ConfigurationError(f"{source}: not a gzipped tar bundle ({why})")
            break  # no end-of-archive marker: the stream simply ends between members
        if header == ZERO_BLOCK:
            if pending:
                raise ConfigurationError(f"{source}: an extended header with no member after it; refused")
            break
        if not _checksum_ok(header):
            raise ConfigurationError(f"{source}: not a gzipped tar bundle (a header checksum at byte {position} does not match)")
        kind = header[156:157]
        stated = _number(header[124:136])
        if stated is None:
            raise ConfigurationError(f"{source}: not a gzipped tar bundle (a header at byte {position} has no valid size)")
        data_at = position + BLOCK
        if kind in PAX or kind in GNU_LONG:
            label = "pax header" if kind in PAX else "GNU long name" if kind == b"L" else "GNU long link name"
            if stated > MAX_EXTENDED_BYTES:
                raise ConfigurationError(
                    f"{source}: a {label} of {stated} bytes (at most {MAX_EXTENDED_BYTES}); refused before any tar parsing"
                )
            if kind in pending or (kind == b"g" and pending):
                raise ConfigurationError(f"{source}: extended headers repeated before one member; refused")
            extended += stated
            globals_ += kind == b"g"
            if extended > MAX_EXTENDED_TOTAL or globals_ > MAX_GLOBAL_HEADERS:
                raise ConfigurationError(
                    f"{source}: more than {MAX_GLOBAL_HEADERS} global pax headers or {MAX_EXTENDED_TOTAL} bytes of "
                    "extended headers in all; refused before any tar parsing"
                )
            block = tar[data_at : data_at + _blocks(stated)]
            if len(block) < _blocks(stated):
                raise ConfigurationError(f"{source}: not a gzipped tar bundle (the tar ends inside a {label})")
            if kind in PAX:
                if block[stated:].count(0) != len(block) - stated:  # tarfile would read on into the padding
                    raise ConfigurationError(f"{source}: a pax header with data in its padding; refused")
                for keyword, value in pax_records(block[:stated], source):
                    if keyword.startswith("GNU.sparse"):
                        raise ConfigurationError(
                            f"{source}: a GNU sparse file; a bundle holds only regular files and directories"
                        )
                    if keyword == "size":
                        if kind == b"g" or not value.isdigit():
                            raise ConfigurationError(f"{source}: a pax size record that is not a member's size; refused")
                        pending_size = int(value)
            if kind != b"g":
                pending.add(kind)
            position = data_at + _blocks(stated)
            continue
        members += 1
        if members > MAX_ARCHIVE_FILES:
            raise ConfigurationError(f"{source}: more than {MAX_ARCHIVE_FILES} members")
        length = stated if pending_size is None else pending_size
        if kind == DIRECTORY or (kind == b"\0" and header[:100].split(b"\0", 1)[0].endswith(b"/")):
            if length:  # tarfile skips no data after a directory
                raise ConfigurationError(f"{source}: a directory with content; refused")
        elif kind in REGULAR:
            size += length
            if size > MAX_ARCHIVE_BYTES:
                raise ConfigurationError(f"{source}: larger than {MAX_ARCHIVE_BYTES} bytes unpacked")
            if data_at + length > len(tar):
                raise ConfigurationError(f"{source}: not a gzipped tar bundle (the tar ends inside a file)")
        else:
            what = NAMES.get(kind, f"type {kind!r}")
            raise ConfigurationError(f"{source}: holds a {what}; a bundle holds only regular files and directories")
        position = data_at + _blocks(length)
        pending, pending_size = set(), None
    return Scanned(tar[:position] + ZERO_BLOCK * 2, members, size)


# ------------------------------------------------------------------ 2. the child


@dataclass(frozen=True, slots=True)
class Member:
    kind: str  # "file", "directory" or "other"
    name: str
    content: bytes


KINDS = {ord("f"): "file", ord("d"): "directory", ord("o"): "other"}


def unpack(archive: bytes, source: Path) -> list[Member]:
    """The members of a gzipped bundle: `scan`, then tarfile in a child process with a deadline."""
    scanned = scan(archive, source)
    started = time.perf_counter()
    try:
        done = subprocess.run(
            [sys.executable, "-I", "-S", str(CHILD)],
            input=scanned.tar,
            capture_output=True,
            timeout=UNPACK_DEADLINE_S,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise ConfigurationError(f"{source}: took longer than {UNPACK_DEADLINE_S:g} s to unpack; refused") from exc
    except OSError as exc:
        raise ConfigurationError(f"{source}: the unpacking process could not start ({type(exc).__name__})") from exc
    log.debug("%s: unpacked %d members in %.1f ms", source, scanned.members, (time.perf_counter() - started) * 1000)
    if done.returncode != 0:
        why = done.stderr.decode("ascii", "replace").strip().splitlines()[-1:] or [f"exit status {done.returncode}"]
        raise ConfigurationError(f"{source}: not a gzipped tar bundle ({why[0][:80]})")
    return _members(done.stdout, source)


def _members(out: bytes, source: Path) -> list[Member]:
    """The child's framing read back (see gateway/policy/untar.py)."""
    members: list[Member] = []
    view = memoryview(out)
    position = 0
    try:
        while view[position] != ord("e"):
            kind = KINDS[view[position]]
            (name_length,) = struct.unpack_from(">I", view, position + 1)
            name = bytes(view[position + 5 : position + 5 + name_length]).decode("utf-8", "surrogateescape")
            position += 5 + name_length
            (content_length,) = struct.unpack_from(">Q", view, position)
            content = bytes(view[position + 8 : position + 8 + content_length])
            if len(content) != content_length:
                raise IndexError
            members.append(Member(kind, name, content))
            position += 8 + content_length
    except (IndexError, KeyError, struct.error) as exc:
        raise ConfigurationError(f"{source}: the unpacking process answered out of frame; refused") from exc
    if position != len(out) - 1:
        raise ConfigurationError(f"{source}: the unpacking process answered out of frame; refused")
    return members
