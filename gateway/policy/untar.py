"""The child process that unpacks a pre-scanned bundle: `python -I -S untar.py`, tar in on stdin, members out on stdout.

Started by gateway/policy/archive.py with a deadline, so that a tar parse that runs away (CPython's
tarfile before 3.11.10 / 3.12.6 backtracks on crafted pax headers, CVE-2024-6232) is killed and the
service keeps answering. It reads only what archive.scan() let through: an uncompressed tar whose
headers were already checked. Standard library only, started isolated and without site-packages
(-I -S): nothing of the project is imported here, so it starts in tens of milliseconds.

Output, for each member in order: its kind (b"f" regular file, b"d" directory, b"o" anything
else), the length of its name (4 bytes, big-endian), the name (UTF-8, undecodable bytes kept as
surrogates), the length of its content (8 bytes; 0 unless a regular file) and the content; then
b"e". On failure: exit status 2 and the exception's type name on stderr.
"""

from __future__ import annotations

import io
import struct
import sys
import tarfile

MEMORY_BYTES = 1024 * 1024 * 1024  # address space of this process (the input is at most ~100 MiB)
CPU_SECONDS = 30  # a second fuse behind the parent's deadline


def limit() -> None:
    try:
        import resource
    except ImportError:  # not a POSIX system: the parent's deadline alone
        return
    for which, value in ((resource.RLIMIT_AS, MEMORY_BYTES), (resource.RLIMIT_CPU, CPU_SECONDS)):
        try:
            resource.setrlimit(which, (value, value))
        except (ValueError, OSError):  # a lower hard limit is already set: keep it
            pass


def main() -> int:
    limit()
    data = sys.stdin.buffer.read()
    out = sys.stdout.buffer
    try:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:", encoding="utf-8", errors="surrogateescape") as tar:
            for member in tar:
                kind = b"f" if member.isfile() else b"d" if member.isdir() else b"o"
                name = member.name.encode("utf-8", "surrogateescape")
                content = b""
                if kind == b"f":
                    extracted = tar.extractfile(member)
                    content = extracted.read() if extracted is not None else b""
                out.write(kind + struct.pack(">I", len(name)) + name + struct.pack(">Q", len(content)) + content)
    except Exception as exc:  # noqa: BLE001 - the parent refuses the bundle, naming the type
        sys.stderr.write(type(exc).__name__ + "\n")
        return 2
    out.write(b"e")
    out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
