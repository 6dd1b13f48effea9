"""The stages of `check`, simple to complex; each module holds both sides of one stage.

A stage is what every rank does (`on_rank`: work, then publish JSON) and how the judge decides
(`on_judge`: gather, compare, findings). Earlier stages need less to work, so the first one that
fails names the most basic problem; later stages are skipped rather than left to time out.
"""

from __future__ import annotations

from . import backend, bandwidth, collectives, devices, fingerprints, network, rendezvous

STAGES = [m.STAGE for m in (rendezvous, fingerprints, devices, network, backend, collectives, bandwidth)]
