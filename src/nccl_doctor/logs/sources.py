"""Inputs: paths, directories, globs and stdin turned into byte streams read in bounded chunks.

Everything is streamed: a chunk ends at a line boundary, a line longer than MAX_LINE is cut (and the
rest of it skipped), compressed files are decompressed on the fly. Whatever cannot be read becomes a
one-line problem; the rest is still analysed.
"""

from __future__ import annotations

import bz2
import glob
import gzip
import io
import lzma
import os
import re
import stat
import sys
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import cache
from typing import Any, BinaryIO

CHUNK_SIZE = 1 << 20
MAX_LINE = 64 * 1024
SNIFF = 8192

_MAGIC = [
    (b"\x1f\x8b", "gzip"),
    (b"BZh", "bzip2"),
    (b"\xfd7zXZ\x00", "xz"),
    (b"\x28\xb5\x2f\xfd", "zstd"),
]
_GLOB_CHARS = re.compile(r"[*?\[]")


@dataclass
class Source:
    """One input: a file (possibly compressed) or stdin."""

    name: str
    path: str | None = None  # None for stdin
    stream: BinaryIO | None = None  # set for stdin

    def open_raw(self) -> BinaryIO:
        if self.stream is not None:
            return self.stream
        assert self.path is not None
        return open(self.path, "rb")


@dataclass
class Chunk:
    data: bytearray  # whole lines (the last one may lack its newline at the end of input)
    first_line: int  # 1-based number of the first line in data
    lines: int = 0  # newlines in data


@dataclass
class ReadStats:
    truncated_lines: int = 0
    problem: str | None = None  # set when reading stopped early (truncated .gz, I/O error)
    notes: list[str] = field(default_factory=list)


def expand(paths: list[str]) -> tuple[list[Source], list[str]]:
    """Files to read for the given arguments, and one line per argument that yields nothing readable."""
    sources: list[Source] = []
    problems: list[str] = []
    seen: set[str] = set()

    def add_file(path: str) -> None:
        real = os.path.realpath(path)
        if real not in seen:
            seen.add(real)
            sources.append(Source(name=path, path=path))

    for arg in paths:
        if arg == "-":
            sources.append(Source(name="<stdin>", stream=sys.stdin.buffer))
            continue
        if _GLOB_CHARS.search(arg) and not os.path.exists(arg):
            matches = sorted(glob.glob(arg, recursive=True), key=natural_key)
            if not matches:
                problems.append(f"{arg}: no file matches this pattern")
            for m in matches:
                _add_path(m, add_file, problems)
            continue
        _add_path(arg, add_file, problems)
    return sources, problems


def input_size(sources: list[Source]) -> int:
    """Bytes the files hold (stdin counts nothing): what progress is measured against."""
    total = 0
    for s in sources:
        try:
            total += os.path.getsize(s.path) if s.path else 0
        except OSError:
            pass
    return total


def _add_path(path: str, add_file, problems: list[str]) -> None:
    try:
        st = os.stat(path)
    except FileNotFoundError:
        problems.append(f"{path}: no such file or directory" if not os.path.islink(path)
                        else f"{path}: broken symbolic link")
        return
    except OSError as exc:
        problems.append(f"{path}: cannot access ({exc.strerror or exc})")
        return
    if stat.S_ISDIR(st.st_mode):
        _walk(path, add_file, problems)
    elif stat.S_ISREG(st.st_mode) or stat.S_ISFIFO(st.st_mode):
        add_file(path)
    else:
        problems.append(f"{path}: not a regular file, skipped")


def _walk(top: str, add_file, problems: list[str]) -> None:
    """Recursive listing that follows symbolic links but never loops."""
    visited: set[tuple[int, int]] = set()
    stack = [top]
    found_any = False
    while stack:
        directory = stack.pop()
        try:
            st = os.stat(directory)
        except OSError as exc:
            problems.append(f"{directory}: cannot access ({exc.strerror or exc})")
            continue
        ident = (st.st_dev, st.st_ino)
        if ident in visited:
            problems.append(f"{directory}: symbolic link loop, not followed again")
            continue
        visited.add(ident)
        try:
            entries = sorted(os.scandir(directory), key=lambda e: natural_key(e.name))
        except OSError as exc:
            problems.append(f"{directory}: cannot list ({exc.strerror or exc})")
            continue
        subdirs = []
        for entry in entries:
            if entry.name.startswith("."):
                continue
            try:
                if entry.is_dir():
                    subdirs.append(entry.path)
                elif entry.is_file():
                    add_file(entry.path)
                    found_any = True
                elif entry.is_symlink() and not os.path.exists(entry.path):
                    problems.append(f"{entry.path}: broken symbolic link")
            except OSError as exc:
                problems.append(f"{entry.path}: cannot access ({exc.strerror or exc})")
        stack.extend(reversed(subdirs))
    if not found_any:
        problems.append(f"{top}: directory holds no files")


def natural_key(text: str) -> list[object]:
    """Sort key that puts rank-2 before rank-10."""
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", text)]


def sniff(raw: BinaryIO) -> tuple[bytes, str | None]:
    """The first bytes of a stream (kept for re-reading) and its compression, if any."""
    head = _peek(raw, SNIFF)
    for magic, kind in _MAGIC:
        if head.startswith(magic):
            return head, kind
    return head, None


READ_ERRORS = (OSError, EOFError, ValueError, zlib.error, lzma.LZMAError)


def _peek(raw: BinaryIO, n: int) -> bytes:
    """Look ahead without consuming. A corrupt compressed head reads as nothing here; the reader reports it."""
    if hasattr(raw, "peek"):
        try:
            return raw.peek(n)[:n]  # type: ignore[attr-defined]
        except READ_ERRORS:
            pass
    return b""


def open_stream(source: Source) -> tuple[BinaryIO, str | None]:
    """A decompressed byte stream for the source, and its compression name (None for plain)."""
    raw = source.open_raw()
    if not hasattr(raw, "peek"):
        raw = io.BufferedReader(raw)  # type: ignore[arg-type]
    _, kind = sniff(raw)
    if kind == "gzip":
        return gzip.GzipFile(fileobj=raw, mode="rb"), kind  # type: ignore[return-value]
    if kind == "bzip2":
        return bz2.BZ2File(raw), kind  # type: ignore[return-value]
    if kind == "xz":
        return lzma.LZMAFile(raw), kind  # type: ignore[return-value]
    if kind == "zstd":
        opener = _zstd_opener()
        if opener is None:
            raw.close()
            raise OSError("zstd-compressed; decompress it first (`zstd -d FILE`) or install the `zstandard` package")
        return opener(raw), kind
    return raw, None  # type: ignore[return-value]


def _zstd_opener():
    try:  # Python 3.14+
        from compression import zstd  # type: ignore[import-not-found]

        return lambda raw: zstd.ZstdFile(raw)
    except ImportError:
        pass
    try:
        import zstandard  # type: ignore[import-not-found]

        return lambda raw: zstandard.ZstdDecompressor().stream_reader(raw)
    except ImportError:
        return None


WIDE_COUNT = 1 << 16  # spans at least this long have their newlines counted by numpy (6x faster than bytes.count)


def newlines(data: bytes, start: int = 0, end: int | None = None, wide: int = WIDE_COUNT) -> int:
    """How many newlines data[start:end] holds, without copying it (by numpy from `wide` bytes on)."""
    end = len(data) if end is None else end
    if end - start < wide:  # numpy's fixed cost is more than the count of a short span
        return data.count(b"\n", start, end)
    np = _numpy()
    return int(np.count_nonzero(np.frombuffer(data, np.uint8, end - start, start) == 10))


@cache
def _numpy() -> Any:
    import numpy  # imported on the first wide span: a small input does not pay its import

    return numpy


def warm_numpy() -> None:
    """Import numpy now: processes forked afterwards share it instead of each importing it."""
    _numpy()


def iter_chunks(stream: BinaryIO, stats: ReadStats, chunk_size: int = CHUNK_SIZE,
                max_line: int = MAX_LINE, numbered: bool = True) -> Iterator[Chunk]:
    """Chunks of whole lines; lines longer than max_line are cut there (the rest is skipped).

    Each chunk is read into a buffer of its own, behind the previous chunk's unfinished line, and ends at its last
    newline: no copy of the chunk is made (joining and slicing bytes cost a third of a scan).
    Not `numbered`: first_line and lines are left 0 for a reader that counts the newlines anyway (a second count
    of every byte costs a sixth of a scan)."""
    carry = b""
    skipping = False
    line_no = 1
    offset = 0
    while True:
        data = bytearray(len(carry) + chunk_size)
        data[:len(carry)] = carry
        try:
            read = _read_into(stream, data, len(carry))
        except READ_ERRORS as exc:
            stats.problem = _read_error(exc, f"line {line_no}" if numbered else f"byte {offset}")
            read = 0
        offset += read
        if not read:
            break
        del data[len(carry) + read:]
        if skipping:  # carry is empty: drop the rest of the line that was cut
            newline = data.find(b"\n")
            if newline < 0:
                continue
            del data[:newline + 1]
            skipping = False
        cut = data.rfind(b"\n")
        if cut < 0:
            carry = bytes(data)
        else:
            carry = bytes(data[cut + 1:])
            del data[cut + 1:]
            count = data.count(b"\n") if numbered else 0
            yield Chunk(data, line_no if numbered else 0, count)
            line_no += count
        if len(carry) > max_line:
            stats.truncated_lines += 1
            yield Chunk(bytearray(carry[:max_line] + b"\n"), line_no if numbered else 0, int(numbered))
            line_no += 1
            carry = b""
            skipping = True
    if carry:
        yield Chunk(bytearray(carry), line_no if numbered else 0, carry.count(b"\n") if numbered else 0)


def _read_into(stream: BinaryIO, data: bytearray, start: int) -> int:
    """Read into data[start:] (one call, as read() would: it may return less); the number of bytes read."""
    with memoryview(data) as whole, whole[start:] as target:
        if hasattr(stream, "readinto"):
            return stream.readinto(target) or 0
        block = stream.read(len(target))
        target[:len(block)] = block
        return len(block)


def _read_error(exc: BaseException, where: str) -> str:
    if isinstance(exc, (EOFError, zlib.error, lzma.LZMAError, gzip.BadGzipFile)) or "compressed" in str(exc).lower():
        return f"compressed data ends early (truncated file); read up to {where}"
    return f"read error after {where} ({exc})"


BINARY_SHARE = 0.1  # control characters in a text log's head stay below this share ...
BINARY_SAMPLE = 4096  # ... of this many bytes at least: a short paste full of escapes is still text
_NOT_CONTROL = bytes(range(32, 256)) + b"\t\n\x0c\r\x1b"  # printable, and the controls text logs hold


def looks_binary(head: bytes) -> bool:
    """Text logs hold no NUL bytes and few control characters (binary files have NULs in their first bytes)."""
    if b"\x00" in head:
        return True
    controls = len(head.translate(None, _NOT_CONTROL))  # in C: a per-byte loop cost thousands of files 0.1 s
    return controls > max(len(head), BINARY_SAMPLE) * BINARY_SHARE
