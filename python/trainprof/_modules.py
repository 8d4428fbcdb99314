"""``with_modules``: the nn.Module hierarchy of every operator.

Two global nn.Module hooks (torch's ``register_module_forward_pre_hook`` and
``register_module_forward_hook``) keep, per thread, the stack of modules whose
``forward`` is running, and hand its path to the C++ core as one interned
name; the torch collector attaches that name to each operator (its
``Module Hierarchy`` in the timeline and operator_details.csv). A path reads
``TOP(Net)::features(Sequential)::0(Conv2d)``: the outermost module's class,
then each module's attribute name in its parent and its class.

The hooks cost a few microseconds per module call (torch then runs every
module through its slower hook-aware path), nothing per operator; they are
installed while a profile with ``with_modules`` records.
"""

from __future__ import annotations

import logging
import threading
from typing import Any, Optional

from . import _trainprof

_log = logging.getLogger("trainprof")


class _Frame:
    """One running module: the module and its path's interned name."""

    __slots__ = ("module", "path", "text")

    def __init__(self, module: Any, path: Any, text: str) -> None:
        self.module = module
        self.path = path
        self.text = text


class ModuleTracker:
    """Installs the hooks (``install``) and removes them (``remove``); never raises."""

    def __init__(self) -> None:
        self._handles: list[Any] = []
        self._local = threading.local()
        # (id of the parent's path text or "", id(module)) -> (module, path text, interned name).
        # The module is kept so that its id is not reused while cached.
        self._paths: dict[tuple[str, int], tuple[Any, str, Any]] = {}

    @property
    def installed(self) -> bool:
        return bool(self._handles)

    def install(self) -> None:
        """Starts tracking (idempotent)."""
        if self._handles:
            return
        try:
            from torch.nn.modules import module as torch_module

            _trainprof.enable_python_context()
            self._handles = [
                torch_module.register_module_forward_pre_hook(self._enter),
                torch_module.register_module_forward_hook(self._leave, always_call=True),
            ]
        except Exception:
            _log.exception("with_modules: cannot install nn.Module hooks; module hierarchies not recorded")
            self.remove()

    def remove(self) -> None:
        """Stops tracking and forgets the cached paths (idempotent)."""
        for handle in self._handles:
            try:
                handle.remove()
            except Exception:
                pass
        self._handles = []
        self._paths.clear()
        self._local = threading.local()
        _trainprof.set_module(None)

    def _path(self, parent: Optional[_Frame], module: Any) -> tuple[str, Any]:
        key = (parent.text if parent is not None else "", id(module))
        known = self._paths.get(key)
        if known is not None and known[0] is module:
            return known[1], known[2]
        kind = type(module).__name__
        if parent is None:
            text = f"TOP({kind})"
        else:
            name = next((n for n, child in parent.module._modules.items() if child is module), "?")
            text = f"{parent.text}::{name}({kind})"
        path = _trainprof.RangeName(text)
        self._paths[key] = (module, text, path)
        return text, path

    def _enter(self, module: Any, args: Any) -> None:
        try:
            stack = getattr(self._local, "stack", None)
            if stack is None:
                stack = self._local.stack = []
            text, path = self._path(stack[-1] if stack else None, module)
            stack.append(_Frame(module, path, text))
            _trainprof.set_module(path)
        except Exception:
            pass  # never into the training loop

    def _leave(self, module: Any, args: Any, output: Any) -> None:
        try:
            stack = getattr(self._local, "stack", None)
            if not stack:
                return
            # Normally the top; modules above it (their leave hook missed) go with it.
            for i in range(len(stack) - 1, -1, -1):
                if stack[i].module is module:
                    del stack[i:]
                    break
            else:
                return  # entered before the hooks were installed
            _trainprof.set_module(stack[-1].path if stack else None)
        except Exception:
            pass
