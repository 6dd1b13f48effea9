"""Property tests: random and mutated logs never crash the reader or the diagnosis."""

from __future__ import annotations

import gzip
import io
import pickle
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nccl_doctor.logs import diagnose_text
from nccl_doctor.logs.reading import Collector
from nccl_doctor.logs.diagnose import diagnose
from nccl_doctor.logs.flight_recorder import UnsafeDump, safe_unpickle, summarize
from nccl_doctor.logs.signatures import signatures
from nccl_doctor.logs.sources import Source
from nccl_doctor.logs.facts import build_facts

FIXTURES = Path(__file__).parent / "fixtures" / "logs"
REAL_LINES = [ln for p in sorted((FIXTURES / "shared").glob("*/log.txt")) for ln in p.read_text().splitlines()]
EXAMPLES = [s.example for s in signatures()]
SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _run(data: bytes, name: str = "fuzz.log") -> None:
    collector = Collector()
    collector.add_source(Source(name=name, stream=io.BytesIO(data)))
    col = collector.finish()
    findings = diagnose(col)
    build_facts(col, findings)
    for f in findings:
        f.to_json()


def _mutate(line: str, cut: int, insert: str, digits: int) -> str:
    cut = cut % (len(line) + 1)
    line = line[:cut] + insert + line[cut:]
    return "".join(str((int(c) + digits) % 10) if c.isdigit() and digits else c for c in line)


@SETTINGS
@given(st.binary(max_size=4000))
def test_random_bytes(data):
    _run(data)


@SETTINGS
@given(st.lists(st.tuples(st.sampled_from(REAL_LINES + EXAMPLES), st.integers(0, 400),
                          st.sampled_from(["", "[rank3]:", "\x00", "\r", "\xff", "99: ", "[", "]", " NCCL WARN ",
                                           "SeqNum=", "\n", "é", "%|"]),
                          st.integers(0, 9)), max_size=60))
def test_mutated_real_lines(parts):
    text = "\n".join(_mutate(*p) for p in parts)
    _run(text.encode("utf-8", "surrogatepass"))
    diagnose_text(text)


@SETTINGS
@given(st.binary(max_size=600))
def test_random_gzip_and_pickle(data):
    _run(gzip.compress(data)[: max(1, len(data) // 2)], "x.log.gz")
    _run(b"\x80\x02" + data, "nccl_trace_rank_0")


@SETTINGS
@given(st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=8),
                    lambda kids: st.lists(kids, max_size=4) | st.dictionaries(st.text(max_size=8), kids, max_size=4),
                    max_leaves=20))
def test_builtin_pickles_load_and_summaries_never_crash(obj):
    loaded = safe_unpickle(pickle.dumps(obj, protocol=2))
    assert loaded == obj or isinstance(obj, (list, dict))
    try:
        summarize({"entries": [obj] if isinstance(obj, dict) else [], "pg_status": obj})
    except UnsafeDump:
        pass
