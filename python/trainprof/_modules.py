# Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
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
from typing import Any

from . import _trainprof

_log = logging.getLogger("trainprof")


_set_module = _trainprof.set_module


class _Node:
    """A module at one place in the hierarchy: its path's text and interned
    name, and the nodes of the modules it called (the cache of paths)."""

    __slots__ = ("module", "text", "path", "children")

    def __init__(self, module: Any, text: str) -> None:
        self.module = module  # kept, so that its id is not reused while cached
        self.text = text
        self.path = _trainprof.RangeName(text) if text else None
        self.children: dict[int, _Node] = {}


class ModuleTracker:
    """Installs the hooks (``install``) and removes them (``remove``); never raises."""

    def __init__(self) -> None:
        self._handles: list[Any] = []
        self._local = threading.local()
        self._root = _Node(None, "")  # above the outermost modules

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
        self._root = _Node(None, "")
        self._local = threading.local()
        _set_module(None)

    @staticmethod
    def _child(parent: _Node, module: Any) -> _Node:
        kind = type(module).__name__
        if parent.module is None:
            text = f"TOP({kind})"
        else:
            name = next((n for n, child in parent.module._modules.items() if child is module), "?")
            text = f"{parent.text}::{name}({kind})"
        node = _Node(module, text)
        parent.children[id(module)] = node
        return node

    def _enter(self, module: Any, args: Any) -> None:
        try:
            try:
                stack = self._local.stack
            except AttributeError:
                stack = self._local.stack = []
            parent = stack[-1] if stack else self._root
            node = parent.children.get(id(module))
            if node is None or node.module is not module:
                node = self._child(parent, module)
            stack.append(node)
            _set_module(node.path)
        except Exception:
            pass  # never into the training loop

    def _leave(self, module: Any, args: Any, output: Any) -> None:
        try:
            stack = self._local.stack
            if stack and stack[-1].module is module:
                stack.pop()
            else:
                # Modules above it (their leave hook missed) go with it.
                for i in range(len(stack) - 1, -1, -1):
                    if stack[i].module is module:
                        del stack[i:]
                        break
                else:
                    return  # entered before the hooks were installed
            _set_module(stack[-1].path if stack else None)
        except Exception:
            pass
