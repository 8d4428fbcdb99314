# Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
"""The flight recorder's check of the numbers: each step's loss (the tensor
``backward()`` is called on) and, when asked, the norm of the gradients
before each optimizer step, reported to the C++ recorder, which dumps the
ring when one turns NaN or infinite.

Nothing here makes the device wait: a value on a CUDA device is copied
into pinned host memory without blocking, an event recorded behind the
copy, and the value read once the event has passed (looked at the next
time a value comes, a step or so later); it is reported for the step it
belongs to. A value on the host is read at once."""

from __future__ import annotations

import logging
from typing import Any, Callable, Optional

_log = logging.getLogger("trainprof")

# The watch in effect (one recorder records at a time), and what it replaced.
_active: Optional["NumberWatch"] = None
_original_backward: Optional[Callable[..., Any]] = None


class _Copy:
    """A device value on its way to the host: read once ``event`` has passed."""

    __slots__ = ("host", "event", "step", "report")

    def __init__(self, host: Any, event: Any, step: int, report: Callable[[float, int], None]) -> None:
        self.host = host
        self.event = event
        self.step = step
        self.report = report


class NumberWatch:
    """Reports the loss and, with ``gradients``, the gradients' norm of
    each step to ``recorder`` (the C++ FlightRecorder)."""

    def __init__(self, recorder: Any, gradients: bool) -> None:
        self._recorder = recorder
        self._gradients = gradients
        self._copies: list[_Copy] = []
        self._hook: Optional[Any] = None
        self._stopped: set[str] = set()  # the checks given up: "loss", "gradients"
        self._ended = False  # uninstalled: an install still queued for ``import torch`` does nothing

    def install(self) -> None:
        """Wraps ``torch.Tensor.backward`` (and hooks the optimizers' step for
        the gradients) until ``uninstall``."""
        global _active, _original_backward
        import torch

        if _active is not None or self._ended:
            return
        _active = self
        if _original_backward is None:
            _original_backward = torch.Tensor.backward
            torch.Tensor.backward = _backward  # type: ignore[method-assign]
        if self._gradients:
            from torch.optim.optimizer import register_optimizer_step_pre_hook
            self._hook = register_optimizer_step_pre_hook(self._before_optimizer_step)

    def uninstall(self) -> None:
        """Reads what is still on its way (waiting for it: the recording ends) and unhooks."""
        global _active, _original_backward
        self._ended = True
        if _active is self:
            _active = None
            import torch

            if _original_backward is not None and torch.Tensor.backward is _backward:
                torch.Tensor.backward = _original_backward  # type: ignore[method-assign]
                _original_backward = None
        if self._hook is not None:
            self._hook.remove()
            self._hook = None
        for copy in self._copies:
            try:
                copy.event.synchronize()
                copy.report(float(copy.host), copy.step)
            except Exception:  # noqa: BLE001 -- the device failed: the value is lost, the training goes on
                pass
        self._copies.clear()

    def saw_loss(self, tensor: Any) -> None:
        self._watch("loss", tensor, self._recorder.loss)

    def _before_optimizer_step(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        import torch

        if "gradients" in self._stopped:
            return
        grads = [p.grad for group in optimizer.param_groups for p in group["params"] if p.grad is not None]
        if not grads:
            return
        try:
            with torch.no_grad():
                norms = torch._foreach_norm([g.detach() for g in grads])
                total = torch.linalg.vector_norm(torch.stack([n.to(norms[0].device) for n in norms]))
        except Exception as e:  # noqa: BLE001 -- sparse or odd gradients: the check says so once and stops
            self._give_up("gradients", str(e))
            return
        self._watch("gradients", total, self._recorder.gradient_norm)

    def _watch(self, check: str, tensor: Any, report: Callable[[float, int], None]) -> None:
        if check in self._stopped:
            return
        self._read_arrived()
        try:
            if tensor.numel() != 1:
                return  # backward(gradient) of a non-scalar: not a loss
            step = self._recorder.step_num()
            value = tensor.detach()
            if value.device.type == "cpu":
                report(float(value), step)
            elif value.device.type == "cuda":
                self._copy_from_device(value, step, report)
        except Exception as e:  # noqa: BLE001 -- never the training's failure
            self._give_up(check, str(e))

    def _copy_from_device(self, value: Any, step: int, report: Callable[[float, int], None]) -> None:
        import torch

        host = torch.empty((), dtype=torch.float64, pin_memory=True)
        host.copy_(value.reshape(()), non_blocking=True)
        event = torch.cuda.Event()
        event.record()
        self._copies.append(_Copy(host, event, step, report))

    def _read_arrived(self) -> None:
        while self._copies and self._copies[0].event.query():
            copy = self._copies.pop(0)
            copy.report(float(copy.host), copy.step)

    def _give_up(self, check: str, why: str) -> None:
        """Stops one check, said once; the other check and the recording go on."""
        if check in self._stopped:
            return
        self._stopped.add(check)
        what = "the loss" if check == "loss" else "the gradients' norm"
        _log.warning("flight recorder: the check of %s stops (%s); recording goes on", what, why)


def _backward(self: Any, *args: Any, **kwargs: Any) -> Any:
    """torch.Tensor.backward while a recorder watches: the loss is seen first."""
    watch = _active
    if watch is not None:
        watch.saw_loss(self)
    assert _original_backward is not None
    return _original_backward(self, *args, **kwargs)
