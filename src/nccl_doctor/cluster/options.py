"""What `check` and `bench` were asked: one object for the command line, the `--local` ranks and the judge.

The command line fills it; every `--local` child gets it back as its own command line (`argv()`) and
parses the same object from it; the ranks and the judge read it. Each field names its flag in its
metadata, so the three never drift apart.
"""

from __future__ import annotations

from dataclasses import MISSING, dataclass, field, fields
from typing import Any, ClassVar


def flag(default: Any, name: str | dict[str, str] | None, **more: Any) -> Any:
    """A field and the flag that carries it on the command line (None: positional; a dict: value -> flag)."""
    return field(default=default, metadata={"flag": name, **more})


@dataclass
class Options:
    command: ClassVar[str] = "check"  # the nccl-doctor command the ranks run, and the report's name
    backend: str = flag("auto", "--backend")  # auto | nccl | gloo
    timeout: float = flag(20.0, "--timeout")  # deadline of each stage, and of each collective
    quick: bool = flag(False, "--quick")  # skip the bandwidth stage

    def argv(self) -> list[str]:
        """This object as the command line of a rank: `nccl-doctor COMMAND ARGV` parses back to it."""
        args: list[str] = []
        for f in fields(self):
            if "flag" not in f.metadata:
                continue
            value, name = getattr(self, f.name), f.metadata["flag"]
            default = f.default if f.default is not MISSING else None
            if value == default or value is None:
                continue
            if name is None:
                args[:0] = list(value)
            elif isinstance(name, dict):
                args.append(name[value])
            elif isinstance(value, bool):
                args += [name] if value else []
            else:
                args += [name, str(value)]
        return args
