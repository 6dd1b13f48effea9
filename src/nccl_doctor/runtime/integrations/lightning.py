"""PyTorch Lightning: `Trainer(callbacks=[NcclDoctorCallback()])` runs preflight at setup and watch during fit.

Works with every strategy built on torch.distributed (DDP, FSDP, DeepSpeed's process group): Lightning
has created the process group by the time callbacks are set up. Validation is marked as the "eval"
phase and checkpoint saving as "checkpoint", so long ones are judged as work, not hangs.
"""

from __future__ import annotations

from typing import Any

try:
    import lightning.pytorch as pl
except ImportError:  # the older package name
    import pytorch_lightning as pl  # type: ignore[no-redef]

from ..progress import TRAIN, phase, step


class NcclDoctorCallback(pl.Callback):
    """preflight (once, at setup) and watch (during fit); keyword arguments go to each."""

    def __init__(self, preflight: bool = True, watch: bool = True, preflight_kwargs: dict[str, Any] | None = None,
                 watch_kwargs: dict[str, Any] | None = None) -> None:
        self.run_preflight, self.run_watch = preflight, watch
        self.preflight_kwargs, self.watch_kwargs = preflight_kwargs or {}, watch_kwargs or {}
        self.preflight_report: Any = None
        self.watch_report: Any = None
        self._watch: Any = None

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        if self.run_preflight and self.preflight_report is None and _distributed():
            from ..preflight import preflight

            self.preflight_report = preflight(**self.preflight_kwargs)

    def on_fit_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self.run_watch and _distributed():
            from ..watch import watch

            self._watch = watch(**self.watch_kwargs)

    def on_train_batch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any,
                             batch_idx: int) -> None:
        phase(TRAIN)

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        step()

    def on_validation_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        phase("eval")

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        phase(TRAIN)

    def on_save_checkpoint(self, trainer: pl.Trainer, pl_module: pl.LightningModule,
                           checkpoint: dict[str, Any]) -> None:
        phase("checkpoint")  # back to "train" at the next batch

    def on_fit_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._stop()

    def on_exception(self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException) -> None:
        self._stop()

    def _stop(self) -> None:
        if self._watch is not None:
            self.watch_report = self._watch.stop()
            self._watch = None


def _distributed() -> bool:
    import torch.distributed as dist

    return dist.is_available() and dist.is_initialized()
