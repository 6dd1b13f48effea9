"""What `bench` was asked to do, in nccl-tests' terms, and the sizes that follows from it.

Every rank parses the same command line, and the judge the same one, so sizes and order are
computed on each side from these options (and the backend the judge chose) without exchanging them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import ClassVar

from ..options import Options, flag

# nccl-tests' type names (-d) -> torch's; uint32/uint64 exist in nccl-tests but not in torch.distributed.
DATATYPES = {"int8": "int8", "uint8": "uint8", "int32": "int32", "int64": "int64", "half": "float16",
             "float": "float32", "double": "float64", "bfloat16": "bfloat16"}
ELEMENT_BYTES = {"int8": 1, "uint8": 1, "int32": 4, "int64": 8, "half": 2, "float": 4, "double": 8, "bfloat16": 2}
AVERAGES = {0: "rank 0", 1: "mean", 2: "min", 3: "max"}  # nccl-tests -a: how per-rank times become one
DEFAULT_MAXBYTES = {"nccl": 256 << 20, "gloo": 8 << 20}  # GPUs need large messages to reach peak busbw
DEFAULT_MATRIX_BYTES = {"nccl": 64 << 20, "gloo": 4 << 20}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d*)?)\s*([kKmMgG]?)\s*[bB]?\s*$")
_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}


@dataclass
class BenchOptions(Options):
    command: ClassVar[str] = "bench"
    timeout: float = flag(60.0, "--timeout")
    collectives: tuple[str, ...] = flag((), None)  # sweep these, in the table's order; () = no sweep
    minbytes: int = flag(8, "-b")
    maxbytes: int | None = flag(None, "-e")  # None: DEFAULT_MAXBYTES of the backend
    stepfactor: int = flag(2, "-f")
    stepbytes: int = flag(1 << 20, "-i")  # used when stepfactor <= 1, as in nccl-tests
    iters: int = flag(20, "-n")
    warmup_iters: int = flag(5, "-w")
    datatype: str = flag("float", "-d")
    op: str = flag("sum", "-o")
    root: int = flag(0, "-r")
    check: int = flag(1, "-c")  # 1: check every result element by element
    average: int = flag(3, "-a")
    matrix: str | None = flag(None, {"hosts": "--matrix", "ranks": "--matrix-ranks"})  # one rank per host, or all
    matrix_bytes: int | None = flag(None, "--matrix-bytes")  # None: DEFAULT_MATRIX_BYTES of the backend
    matrix_time: float = flag(0.5, "--matrix-time")  # seconds of streaming per direction of each pair

    def max_bytes(self, backend: str) -> int:
        return self.maxbytes if self.maxbytes is not None else DEFAULT_MAXBYTES.get(backend, 8 << 20)

    def message_bytes(self, backend: str) -> int:
        return self.matrix_bytes if self.matrix_bytes is not None else DEFAULT_MATRIX_BYTES.get(backend, 4 << 20)

    def settings(self, backend: str) -> dict:
        """The nccl-tests view of the run, for the report header and the JSON facts."""
        return {"minbytes": self.minbytes, "maxbytes": self.max_bytes(backend), "stepfactor": self.stepfactor,
                "stepbytes": self.stepbytes, "iters": self.iters, "warmup_iters": self.warmup_iters,
                "datatype": self.datatype, "op": self.op, "root": self.root, "check": int(self.check),
                "average": self.average, "average_means": AVERAGES[self.average]}


def parse_size(text: str) -> int:
    """nccl-tests' sizes: 8, 512K, 32M, 1.5G (binary units); ValueError when it is none."""
    match = _SIZE.match(str(text))
    if not match:
        raise ValueError(f"{text!r} is not a size (e.g. 8, 512K, 32M, 1G)")
    return int(float(match.group(1)) * _UNITS[match.group(2).lower()])


def sizes(minbytes: int, maxbytes: int, stepfactor: int, stepbytes: int) -> list[int]:
    """Message sizes as nccl-tests walks them: times stepfactor when it is above 1, else plus stepbytes."""
    found, size = [], max(0, minbytes)
    while size <= maxbytes:
        found.append(size)
        following = size * stepfactor if stepfactor > 1 else size + stepbytes
        if following <= size:  # 0 * factor, or a zero step: one size only
            break
        size = following
    return found

