"""`bench`: nccl-tests' size sweeps and a pairwise link matrix, run as stages of check's judge and ranks.

Rendezvous, fingerprints (versions, settings, the backend choice, the facts the line rates come
from), device binding and backend init are check's own stages; `sweep` and `matrix` are bench's.
Whatever goes wrong on the way (a rank that never joins, a hang inside a collective) is therefore
reported the way `check` reports it.
"""

from __future__ import annotations


def stages() -> list:
    from ..stages import backend, devices, fingerprints, rendezvous
    from . import matrix, sweep

    return [rendezvous.STAGE, fingerprints.STAGE, devices.STAGE, backend.STAGE, sweep.STAGE, matrix.STAGE]
