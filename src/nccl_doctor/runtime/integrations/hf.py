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


class NcclDoctorTrainerCallback(TrainerCallback):
    """preflight (once, at train begin) and watch (during train); keyword arguments go to each."""

    def __init__(self, preflight: bool = True, watch: bool = True, preflight_kwargs: dict[str, Any] | None = None,
                 watch_kwargs: dict[str, Any] | None = None) -> None:
        self.run_preflight, self.run_watch = preflight, watch
        self.preflight_kwargs, self.watch_kwargs = preflight_kwargs or {}, watch_kwargs or {}
        self.preflight_report: Any = None
        self.watch_report: Any = None
        self._watch: Any = None

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if not _distributed():
            return
        if self.run_preflight and self.preflight_report is None:
            from ..preflight import preflight

            self.preflight_report = preflight(**self.preflight_kwargs)
        if self.run_watch:
            from ..watch import watch

            self._watch = watch(**self.watch_kwargs)

    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        phase(TRAIN)

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        step(state.global_step)

    def on_prediction_step(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        phase("eval")

    def on_evaluate(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        phase(TRAIN)

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self._watch is not None:
            self.watch_report = self._watch.stop()
            self._watch = None


def _distributed() -> bool:
    import torch.distributed as dist

    return dist.is_available() and dist.is_initialized()
