"""What `logs` keeps between runs, so that a start takes a tenth of a second instead of one: the compiled
hyperscan database (engine.py) and the signature table (signatures.py). Each entry is named by a key of what
it was made from; an entry that cannot be read or written only costs the next start its work again.

JSON and hyperscan's own serialisation only: nothing here is unpickled.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path


def cache_dir() -> Path:
    """$NCCL_DOCTOR_CACHE_DIR, else the user's cache directory."""
    given = os.environ.get("NCCL_DOCTOR_CACHE_DIR")
    if given:
        return Path(given)
    from platformdirs import user_cache_dir

    return Path(user_cache_dir("nccl-doctor", appauthor=False))


def key(*parts: object) -> str:
    return hashlib.sha256(repr(parts).encode()).hexdigest()[:24]


def read(name: str) -> bytes | None:
    try:
        return (cache_dir() / name).read_bytes()
    except OSError:
        return None


def write(name: str, blob: bytes) -> None:
    """Atomically: a reader never sees half an entry."""
    path = cache_dir() / name
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path.parent, prefix=".tmp-", delete=False) as fh:
            fh.write(blob)
        os.replace(fh.name, path)
    except OSError:
        pass
