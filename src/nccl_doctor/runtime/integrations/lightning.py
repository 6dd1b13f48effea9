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
from .lifecycle import Lifecycle


class NcclDoctorCallback(Lifecycle, pl.Callback):
    """preflight (once, at setup) and watch (during fit); keyword arguments go to each."""

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        self._start_preflight()

    def on_fit_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._start_watch()

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
        self._stop_watch()

    def on_exception(self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException) -> None:
        self._stop_watch()
