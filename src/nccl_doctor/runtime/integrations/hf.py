"""Hugging Face Trainer (and accelerate): `Trainer(..., callbacks=[NcclDoctorTrainerCallback()])`.

The process group exists once TrainingArguments has been built (accelerate's PartialState), so
preflight runs at the start of training and watch for its duration; evaluation is marked as the "eval"
phase. With accelerate alone (no Trainer), call `nccl_doctor.preflight()` and `nccl_doctor.watch()`
after `Accelerator()`: they use the process group it created.
"""

from __future__ import annotations

from typing import Any

from transformers import TrainerCallback

from ..progress import TRAIN, phase, step
from .lifecycle import Lifecycle


class NcclDoctorTrainerCallback(Lifecycle, TrainerCallback):
    """preflight (once, at train begin) and watch (during train); keyword arguments go to each."""

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._start_preflight()
        self._start_watch()

    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        phase(TRAIN)

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        step(state.global_step)

    def on_prediction_step(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        phase("eval")

    def on_evaluate(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        phase(TRAIN)

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._stop_watch()
