"""Reading sysfs attributes, the way every hardware reader of this package does it.

Readers take a `root` (default "/"): the directory that holds sys/, dev/, proc/ and var/log/, so that
tests and `topo --sysfs-root` point them at a copied or fake tree.
"""

from __future__ import annotations

import os
from pathlib import Path


def read_text(path: Path) -> str | None:
    """An attribute, stripped; None when missing or unreadable (the kernel answers EINVAL for some)."""
    try:
        return path.read_text(errors="replace").strip()
    except OSError:
        return None


def read_int(path: Path) -> int | None:
    """An integer attribute in C notation ('0x1a', '16', '-1'); None when missing or not a number."""
    text = read_text(path)
    try:
        return int(text, 0) if text is not None else None
    except ValueError:
        return None


def names(directory: Path) -> list[str]:
    """The entries of a directory, sorted; [] when it does not exist or cannot be listed."""
    try:
        return sorted(os.listdir(directory))
    except OSError:
        return []


def numbered(directory: Path) -> list[int]:
    """The numeric entries of a directory ('1', '2', '10' for ports or GID slots), in numeric order."""
    return sorted(int(name) for name in names(directory) if name.isdigit())
