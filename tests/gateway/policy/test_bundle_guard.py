"""A bundle is read before its signature can be checked: nothing in it reaches a tar parser that can
be driven to super-linear time (CVE-2024-6232), and tarfile itself runs in a child with a deadline."""

from __future__ import annotations

import gzip
import io
import logging
import re
import subprocess
import sys
import tarfile
import threading
import time
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from core.errors import ConfigurationError
from gateway.policy import archive
from gateway.policy.bundle import read_archive, write_archive
from gateway.policy.source import PolicySource
from tests.conftest import open_gateway
from tests.loopback import Loopback, QuietHandler

ROOT = Path(__file__).resolve().parents[3]
POLICIES = ROOT / "policies"
NAME = Path("hostile.tar.gz")


# ------------------------------------------------------------------ raw tar, written by hand


def header(name: bytes, size: int, typeflag: bytes, size_field: bytes | None = None) -> bytes:
    """One ustar header with a valid checksum."""
    block = bytearray(512)
    block[0 : len(name)] = name
    block[100:108] = b"0000644\0"
    block[108:116] = b"0000000\0"
    block[116:124] = b"0000000\0"
    block[124:136] = size_field if size_field is not None else b"%011o\0" % size
    block[136:148] = b"00000000000\0"
    block[156:157] = typeflag
    block[257:263] = b"ustar\0"
    block[263:265] = b"00"
    block[148:156] = b" " * 8
    block[148:156] = b"%06o\0 " % sum(block)
    return bytes(block)


def pad(data: bytes) -> bytes:
    return data + b"\0" * (-len(data) % 512)


def record(keyword: str, value: bytes) -> bytes:
    """A pax record "<length> <keyword>=<value>\\n", its length counting itself."""
    body = b" " + keyword.encode() + b"=" + value + b"\n"
    length = len(body) + 1
    while len(str(length).encode() + body) != length:
        length += 1
    return str(length).encode() + body


def member(name: bytes, content: bytes, typeflag: bytes = b"0") -> bytes:
    return header(name, len(content), typeflag) + pad(content)


MODULE = member(b"gateway/extra.rego", b"package gateway.extra\n")
END = b"\0" * 1024


def hostile(digits: int) -> bytes:
    """The CVE-2024-6232 shape: a pax header of one long run of digits, with no '=' anywhere.
    tarfile's `\\d+ hdrcharset=` search backtracks over it in time quadratic in its length."""
    body = b"1" * digits
    return gzip.compress(header(b"PaxHeaders/x", len(body), b"x") + pad(body) + MODULE + END)


def refused(data: bytes, match: str, bound_s: float = 2.0) -> ConfigurationError:
    started = time.monotonic()
    with pytest.raises(ConfigurationError, match=match) as caught:
        read_archive(data, NAME)
    assert time.monotonic() - started < bound_s
    return caught.value


@pytest.fixture
def spawns(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """Every child process `unpack` starts."""
    started: list[list[str]] = []
    real = subprocess.run

    def run(command: list[str], **kwargs: Any) -> Any:
        started.append(command)
        return real(command, **kwargs)

    monkeypatch.setattr("gateway.policy.archive.subprocess.run", run)
    return started


# ------------------------------------------------------------------ the pre-scan


@pytest.mark.parametrize("digits", [30_000, 600_000])
def test_the_crafted_pax_header_is_refused_before_tarfile_sees_it(digits: int, spawns: list[list[str]]) -> None:
    """On 3.11.7, tarfile takes 1.4 s on the 30 KB header and minutes on the 600 KB one (under
    1 KB gzipped), holding the GIL; the scan refuses both in milliseconds and starts no child."""
    error = refused(
        hostile(digits), rf"hostile\.tar\.gz: a pax header of {digits} bytes \(at most 8192\); refused before any tar parsing"
    )
    assert "Traceback" not in error.message and spawns == []


def test_a_pax_header_under_the_cap_is_refused_when_tarfile_would_backtrack_on_it(spawns: list[list[str]]) -> None:
    """8,000 digits fit the size cap; a run that long is what the regexes backtrack on, so the
    records are parsed here and the run refused, even inside a well-formed record."""
    assert len(hostile(8000)) < 1000
    refused(hostile(8000), "a pax header holds a run of 8000 digits")
    padded = record("comment", b"7" * 65)
    data = gzip.compress(header(b"PaxHeaders/x", len(padded), b"x") + pad(padded) + MODULE + END)
    refused(data, "a run of 65 digits")
    assert spawns == []


def test_a_gnu_long_name_above_the_cap_is_refused() -> None:
    name = b"gateway/" + b"n" * 9000 + b".rego"
    data = gzip.compress(header(b"././@LongLink", len(name) + 1, b"L") + pad(name + b"\0") + MODULE + END)
    refused(data, rf"a GNU long name of {len(name) + 1} bytes \(at most 8192\)")


DECOMPRESSOBJ = zlib.decompressobj


class Counting:
    """zlib's decompressor, counting what it gives out."""

    total = 0

    def __init__(self, **kwargs: Any) -> None:
        self.inner = DECOMPRESSOBJ(**kwargs)

    def decompress(self, data: bytes, max_length: int = 0) -> bytes:
        out = self.inner.decompress(data, max_length)
        Counting.total += len(out)
        return out

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def test_a_gzip_bomb_is_refused_at_the_cap_without_inflating_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """16 GiB of zeros in 16 MB: each 1 MiB chunk is deflated after a full flush, so its bytes
    repeat. Inflating it whole would take minutes and more memory than the machine has."""
    deflate = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    first = deflate.compress(bytes(1 << 20)) + deflate.flush(zlib.Z_FULL_FLUSH)
    repeat = deflate.compress(bytes(1 << 20)) + deflate.flush(zlib.Z_FULL_FLUSH)
    bomb = first + repeat * (16 * 1024 - 1)  # no trailer: it is never reached
    assert len(bomb) < 20_000_000
    monkeypatch.setattr(archive, "MAX_BUNDLE_BYTES", 20_000_000)  # the cap under test is the inflated one
    monkeypatch.setattr("gateway.policy.archive.zlib.decompressobj", Counting)
    Counting.total = 0
    refused(bomb, f"decompresses to more than {archive.MAX_TAR_BYTES} bytes; refused before reading it all", 5.0)
    assert archive.MAX_TAR_BYTES < Counting.total <= archive.MAX_TAR_BYTES + 1


def test_the_member_count_is_capped_before_any_child_starts(monkeypatch: pytest.MonkeyPatch, spawns: list[list[str]]) -> None:
    monkeypatch.setattr(archive, "MAX_ARCHIVE_FILES", 3)
    data = gzip.compress(b"".join(member(b"gateway/x%d.json" % i, b"{}") for i in range(4)) + END)
    refused(data, "more than 3 members")
    assert spawns == []


def test_a_gzip_stream_of_many_tiny_members_is_refused_in_linear_time(spawns: list[list[str]]) -> None:
    """Issue 55: 400,000 gzip members in 8.4 MB cost 116 s of CPU when each member's leftover input
    was copied again (quadratic). Fed in bounded chunks and capped at MAX_GZIP_MEMBERS, it is
    refused at once; a stream of a few members still reads."""
    tiny = gzip.compress(b"")
    stream = tiny * 400_000
    assert len(stream) > 7_000_000
    started = time.thread_time()
    refused(stream, f"a gzip stream of more than {archive.MAX_GZIP_MEMBERS} members", 1.0)
    assert time.thread_time() - started < 0.5 and spawns == []
    tar = io.BytesIO(MODULE + END).getvalue()
    three = gzip.compress(tar[:700]) + b"\0" * 16 + gzip.compress(tar[700:1500]) + gzip.compress(tar[1500:])
    assert archive.gunzip(three, NAME) == tar  # several members, zero padding between them: one tar


def test_global_pax_headers_are_counted_and_capped(spawns: list[list[str]]) -> None:
    """Issue 55: any number of global pax headers of at most 8 KiB each were accepted (199 KB of
    them cost 38 s). More than MAX_GLOBAL_HEADERS, or MAX_EXTENDED_TOTAL bytes of extended
    headers in all, is refused before any tar parser runs."""
    one = record("comment", b"x" * 4000)
    many = b"".join(header(b"PaxHeaders/g%d" % i, len(one), b"g") + pad(one) for i in range(archive.MAX_GLOBAL_HEADERS + 1))
    refused(gzip.compress(many + MODULE + END), f"more than {archive.MAX_GLOBAL_HEADERS} global pax headers")
    big = record("comment", b"x" * 8000)
    members = b"".join(
        header(b"PaxHeaders/x%d" % i, len(big), b"x") + pad(big) + member(b"gateway/x%d.json" % i, b"{}") for i in range(9)
    )
    refused(gzip.compress(members + END), f"{archive.MAX_EXTENDED_TOTAL} bytes of extended headers in all")
    assert spawns == []


def test_a_bundle_file_past_the_cap_is_refused_without_reading_it_all(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A bundle file is capped as a download is (MAX_BUNDLE_BYTES), and so is any archive handed to the scan."""
    monkeypatch.setattr(archive, "MAX_BUNDLE_BYTES", 1000)
    path = tmp_path / "big.tar.gz"
    path.write_bytes(gzip.compress(MODULE + END) + bytes(2000))
    with pytest.raises(ConfigurationError, match="a bundle larger than 1000 bytes"):
        anyio.run(PolicySource(str(path)).fetch)
    refused(gzip.compress(MODULE + END) + bytes(2000), "a bundle larger than 1000 bytes")


def test_the_scan_runs_under_a_cpu_deadline(monkeypatch: pytest.MonkeyPatch, spawns: list[list[str]]) -> None:
    """Whatever a crafted bundle makes the scan do, its thread gives up after SCAN_DEADLINE_S of CPU
    (here none at all) and the bundle is refused before any child starts."""
    monkeypatch.setattr(archive, "SCAN_DEADLINE_S", 0.0)
    refused(gzip.compress(MODULE + END), "s of CPU to scan before its signature could be checked")
    assert spawns == []


@pytest.mark.parametrize(
    ("records", "match"),
    [
        (b"30 path=gateway/extra.rego\n", "its length does not match"),  # 27 bytes, said 30
        (b"20 path=gateway/extra\n29 path=gateway/extra.rego\n", "its length does not match"),
        (b"12 pathgateway\n", "its length does not match"),  # no '='
        (b"path=gateway/extra.rego\n", "no length"),
        (b"9 =no-key\n", "its length does not match"),
        (b"12 pa\th=x.y\n", "keyword"),
    ],
)
def test_a_malformed_pax_record_is_refused(records: bytes, match: str, spawns: list[list[str]]) -> None:
    data = gzip.compress(header(b"PaxHeaders/x", len(records), b"x") + pad(records) + MODULE + END)
    refused(data, rf"hostile\.tar\.gz: a malformed pax record at byte \d+ \({match}")
    assert spawns == []


def test_records_hidden_in_a_pax_headers_padding_are_refused() -> None:
    """tarfile reads a pax header's whole last block: a record after the stated size would be
    parsed by it and never by the scan."""
    stated = record("comment", b"x")
    hidden = record("path", b"gateway/elsewhere.rego")
    block = pad(stated + hidden)
    data = gzip.compress(header(b"PaxHeaders/x", len(stated), b"x") + block + MODULE + END)
    refused(data, "a pax header with data in its padding")


@pytest.mark.parametrize(
    ("typeflag", "what"), [(b"2", "symbolic link"), (b"1", "hard link"), (b"S", "GNU sparse file"), (b"3", "character device")]
)
def test_members_the_bundle_reader_would_refuse_are_refused_by_the_scan(typeflag: bytes, what: str) -> None:
    data = gzip.compress(MODULE + header(b"gateway/odd", 0, typeflag) + END)
    refused(data, f"holds a {what}; a bundle holds only regular files and directories")


def test_a_header_with_a_bad_checksum_or_a_truncated_stream_is_refused() -> None:
    broken = bytearray(MODULE)
    broken[0] ^= 1
    refused(gzip.compress(bytes(broken) + END), "not a gzipped tar bundle \\(a header checksum")
    refused(gzip.compress(MODULE + END)[:-12], "not a gzipped tar bundle")
    refused(b"not a tarball", "not a gzipped tar bundle")


# ------------------------------------------------------------------ what still loads


def repacked(archive_bytes: bytes, extra: dict[str, bytes], format: int) -> bytes:
    """A bundle's files plus `extra`, written again by tarfile in `format`."""
    out = io.BytesIO()
    with (
        tarfile.open(fileobj=io.BytesIO(archive_bytes), mode="r:gz") as source,
        tarfile.open(fileobj=out, mode="w:gz", format=format) as tar,
    ):
        files = {m.name: source.extractfile(m).read() for m in source if m.isfile()}  # type: ignore[union-attr]
        for name, content in {**files, **extra}.items():
            info = tarfile.TarInfo(name)
            info.size = len(content)
            info.mtime = 1_767_225_600.25  # a fraction: PAX_FORMAT writes it as a pax record
            tar.addfile(info, io.BytesIO(content))
    return out.getvalue()


LONG = "gateway/" + "deeply_nested_" * 8 + "/extra.rego"  # more than 100 characters: a pax `path` record


@pytest.mark.parametrize("format", [tarfile.PAX_FORMAT, tarfile.GNU_FORMAT])
def test_a_bundle_with_long_names_in_pax_or_gnu_headers_still_loads(format: int) -> None:
    assert len(LONG) > 100
    data = repacked(write_archive(POLICIES, "r1"), {LONG: b"package gateway.extra\n\nanswer := 42\n"}, format)
    assert (b"././@PaxHeader" if format == tarfile.PAX_FORMAT else b"././@LongLink") in gzip.decompress(data)
    bundle = read_archive(data, Path("b.tar.gz"))
    assert (LONG, "package gateway.extra\n\nanswer := 42\n") in bundle.modules
    assert bundle.label == "r1"


def test_a_members_size_from_a_pax_record_is_the_one_the_scan_follows() -> None:
    """The ustar size field says 0, a pax `size` record says 22: tarfile reads 22 bytes, and so
    does the scan, so both see the same headers after it."""
    content = b"package gateway.extra\n"
    size = record("size", str(len(content)).encode())
    raw = header(b"PaxHeaders/x", len(size), b"x") + pad(size) + header(b"gateway/extra.rego", 0, b"0") + pad(content)
    scanned = archive.scan(gzip.compress(raw + END), NAME)
    assert scanned.members == 1 and scanned.size == len(content)
    bundle = read_archive(gzip.compress(raw + END), NAME)
    assert bundle.modules == (("gateway/extra.rego", content.decode()),)


def test_a_base_256_size_field_is_read() -> None:
    content = b"package gateway.extra\n"
    field = b"\x80" + len(content).to_bytes(11, "big")
    raw = header(b"gateway/extra.rego", 0, b"0", size_field=field) + pad(content) + END
    assert read_archive(gzip.compress(raw), NAME).modules == (("gateway/extra.rego", content.decode()),)


# ------------------------------------------------------------------ the child and its deadline


def test_a_child_past_its_deadline_is_killed_and_the_bundle_refused(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"
    sleeper = tmp_path / "sleeper.py"
    sleeper.write_text(f"import os, time\nopen({str(pid_file)!r}, 'w').write(str(os.getpid()))\ntime.sleep(60)\n")
    monkeypatch.setattr(archive, "CHILD", sleeper)
    monkeypatch.setattr(archive, "UNPACK_DEADLINE_S", 1.0)
    refused(write_archive(POLICIES, "r1"), r"hostile\.tar\.gz: took longer than 1 s to unpack; refused", 6.0)
    pid = int(pid_file.read_text())
    assert not Path(f"/proc/{pid}").exists()  # killed and reaped


@pytest.mark.skipif(not archive.tarfile_vulnerable(), reason="this Python's tarfile does not backtrack")
def test_on_this_python_the_real_runaway_parse_is_cut_by_the_deadline(monkeypatch: pytest.MonkeyPatch) -> None:
    """The scan taken away: tarfile in the child backtracks on the crafted header for minutes,
    and the deadline ends it."""
    monkeypatch.setattr(archive, "scan", lambda data, source: archive.Scanned(gzip.decompress(data), 1, 0))
    monkeypatch.setattr(archive, "UNPACK_DEADLINE_S", 1.5)
    refused(hostile(600_000), "took longer than 1.5 s to unpack", 8.0)


def test_the_child_spawn_is_cheap_and_its_answer_matches_tarfile() -> None:
    data = write_archive(POLICIES, "r1")
    started = time.perf_counter()
    members = archive.unpack(data, Path("b.tar.gz"))
    elapsed = time.perf_counter() - started
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        expected = [(m.name, tar.extractfile(m).read()) for m in tar if m.isfile()]  # type: ignore[union-attr]
    assert [(m.name, m.content) for m in members] == expected and all(m.kind == "file" for m in members)
    assert elapsed < 3.0  # ~40-70 ms on a loaded 2-CPU machine


# ------------------------------------------------------------------ sources: unchanged bytes are not unpacked again


def test_an_unchanged_bundle_file_is_not_unpacked_again(tmp_path: Path, spawns: list[list[str]]) -> None:
    path = tmp_path / "policy.tar.gz"
    path.write_bytes(write_archive(POLICIES, "r1"))
    source = PolicySource(str(path))
    first = anyio.run(source.fetch)
    again = anyio.run(source.fetch)
    assert first is not None and again is first and len(spawns) == 1
    path.write_bytes(write_archive(POLICIES, "r2"))
    changed = anyio.run(source.fetch)
    assert changed is not None and changed.label == "r2" and len(spawns) == 2
    path.write_bytes(hostile(600_000))  # refused by the scan, then refused again from memory
    for _ in range(2):
        with pytest.raises(ConfigurationError, match="a pax header of 600000 bytes"):
            anyio.run(source.fetch)
    assert len(spawns) == 2


@pytest.fixture
def plain_server() -> Iterator[tuple[str, list[bytes]]]:
    """A bundle server that sends no ETag: every poll gets the whole body."""
    body: list[bytes] = [b""]

    class Handler(QuietHandler):
        def do_GET(self) -> None:  # noqa: N802
            self.send_response(200)
            self.send_header("Content-Length", str(len(body[0])))
            self.end_headers()
            self.wfile.write(body[0])

    with Loopback(Handler, "/bundles/gateway.tar.gz") as server:
        yield server.url, body


def test_an_unchanged_bundle_server_body_is_not_unpacked_again(
    plain_server: tuple[str, list[bytes]], spawns: list[list[str]]
) -> None:
    url, body = plain_server
    body[0] = write_archive(POLICIES, "r1")
    source = PolicySource(url)
    first = anyio.run(source.fetch)
    assert first is not None and anyio.run(source.fetch) is first and len(spawns) == 1
    body[0] = write_archive(POLICIES, "r2")
    changed = anyio.run(source.fetch)
    assert changed is not None and changed.label == "r2" and len(spawns) == 2


# ------------------------------------------------------------------ the service


def test_a_hostile_bundle_is_rejected_on_reload_while_the_service_answers(
    sqlite_url: str, tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Reloads from a bundle file: the crafted bundle is rejected in milliseconds; and with the scan
    taken away (on a vulnerable Python, the runaway parse itself), /healthz keeps answering while the
    child backtracks, the reload is rejected at the deadline, and the revision in force serves on."""
    bundle = tmp_path / "policy.tar.gz"
    bundle.write_bytes(write_archive(POLICIES, "r1"))
    archive.warn_if_vulnerable.cache_clear()
    with caplog.at_level(logging.WARNING, logger="gateway.policy"):
        gateway_context = open_gateway(sqlite_url, tmp_path, policy_bundle=str(bundle))
        with gateway_context as gateway:
            warnings = [r.getMessage() for r in caplog.records if "CVE-2024-6232" in r.getMessage()]
            if archive.tarfile_vulnerable():
                version = ".".join(map(str, sys.version_info[:3]))
                assert len(warnings) == 1 and f"Python {version}" in warnings[0] and "child process" in warnings[0]
            else:
                assert warnings == []
            admin = gateway.key("pat", tenant="platform", roles=("policy_admin",))
            policy = gateway.client.app.state.context.policy  # type: ignore[attr-defined]
            before = policy.revision

            bundle.write_bytes(hostile(600_000))
            started = time.monotonic()
            answer = gateway.client.post("/v1/policy/reload", headers=gateway.auth(admin))
            assert time.monotonic() - started < 2.0
            assert answer.status_code == 422 and answer.json()["reload"]["status"] == "rejected"
            assert "a pax header of 600000 bytes" in " ".join(answer.json()["reload"]["errors"])
            assert policy.revision == before

            if not archive.tarfile_vulnerable():
                return
            monkeypatch.setattr(archive, "scan", lambda data, source: archive.Scanned(gzip.decompress(data), 1, 0))
            monkeypatch.setattr(archive, "UNPACK_DEADLINE_S", 3.0)
            bundle.write_bytes(hostile(600_001))  # other bytes: not the refusal remembered
            result: dict[str, Any] = {}

            def reload() -> None:
                result["answer"] = gateway.client.post("/v1/policy/reload", headers=gateway.auth(admin))

            reloading = threading.Thread(target=reload)
            reloading.start()
            slowest = 0.0
            probes = 0
            while reloading.is_alive():
                started = time.monotonic()
                assert gateway.client.get("/healthz").status_code == 200
                slowest = max(slowest, time.monotonic() - started)
                probes += 1
                time.sleep(0.05)
            reloading.join()
            assert probes >= 10 and slowest < 1.0, (probes, slowest)
            rejected = result["answer"].json()["reload"]
            assert rejected["status"] == "rejected" and "took longer than 3 s to unpack" in " ".join(rejected["errors"])
            assert policy.revision == before


# ------------------------------------------------------------------ the interpreter


@pytest.mark.parametrize(
    ("version", "vulnerable"),
    [
        ((3, 11, 7), True),
        ((3, 11, 9), True),
        ((3, 11, 10), False),
        ((3, 11, 14), False),
        ((3, 12, 5), True),
        ((3, 12, 6), False),
        ((3, 13, 0), False),
        ((3, 10, 14), True),
        ((3, 10, 15), False),
        ((3, 9, 19), True),
        ((3, 9, 20), False),
        ((3, 8, 19), True),
        ((3, 8, 20), False),
        ((3, 7, 17), True),
    ],
)
def test_which_interpreters_are_vulnerable(version: tuple[int, int, int], vulnerable: bool) -> None:
    assert archive.tarfile_vulnerable(version) is vulnerable


def test_this_interpreter_is_judged_by_its_version_unless_its_tarfile_carries_the_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    by_version = archive.tarfile_vulnerable((sys.version_info.major, sys.version_info.minor, sys.version_info.micro))
    assert archive.tarfile_vulnerable() is (by_version and not hasattr(tarfile, "_header_length_prefix_re"))
    monkeypatch.setattr(tarfile, "_header_length_prefix_re", re.compile(rb"([0-9]{1,20}) "), raising=False)
    assert archive.tarfile_vulnerable() is False  # a distribution's backport, under an old version number


def test_the_warning_is_logged_once_on_a_vulnerable_interpreter(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(archive, "tarfile_vulnerable", lambda version=None: True)
    archive.warn_if_vulnerable.cache_clear()
    with caplog.at_level(logging.WARNING, logger="gateway.policy"):
        assert archive.warn_if_vulnerable() is True
        archive.warn_if_vulnerable()
    lines = [r for r in caplog.records if r.name == "gateway.policy"]
    assert len(lines) == 1 and lines[0].levelno == logging.WARNING
    assert "CVE-2024-6232" in lines[0].getMessage() and "pre-scanned" in lines[0].getMessage()
    monkeypatch.setattr(archive, "tarfile_vulnerable", lambda version=None: False)
    archive.warn_if_vulnerable.cache_clear()
    assert archive.interpreter_warning() is None and archive.warn_if_vulnerable() is False
    archive.warn_if_vulnerable.cache_clear()


def test_the_image_runs_a_python_whose_tarfile_is_patched() -> None:
    tags = re.findall(r"^FROM python:(\d+)\.(\d+)\.(\d+)-", (ROOT / "Dockerfile").read_text(), re.MULTILINE)
    assert len(tags) >= 2
    for tag in tags:
        major, minor, micro = (int(part) for part in tag)
        assert not archive.tarfile_vulnerable((major, minor, micro)), tag
