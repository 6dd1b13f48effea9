"""What every framework callback does, whatever the framework calls its hooks: preflight once when the
process group exists, watch while training runs, stop watching at the end (or on an exception)."""

from __future__ import annotations

from typing import Any


class Lifecycle:
    """preflight (once) and watch (while training); keyword arguments go to each."""

    def __init__(self, preflight: bool = True, watch: bool = True, preflight_kwargs: dict[str, Any] | None = None,
                 watch_kwargs: dict[str, Any] | None = None) -> None:
        self.run_preflight, self.run_watch = preflight, watch
        self.preflight_kwargs, self.watch_kwargs = preflight_kwargs or {}, watch_kwargs or {}
        self.preflight_report: Any = None
        self.watch_report: Any = None
        self._watch: Any = None

    def _start_preflight(self) -> None:
        if self.run_preflight and self.preflight_report is None and distributed():
            from ..preflight import preflight

            self.preflight_report = preflight(**self.preflight_kwargs)

    def _start_watch(self) -> None:
        if self.run_watch and self._watch is None and distributed():
            from ..watch import watch

            self._watch = watch(**self.watch_kwargs)

    def _stop_watch(self) -> None:
        if self._watch is not None:
            self.watch_report = self._watch.stop()
            self._watch = None


def distributed() -> bool:
    import torch.distributed as dist

    return dist.is_available() and dist.is_initialized()
