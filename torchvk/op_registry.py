"""The op registry: every aten overload TorchVK runs is declared here once, and everything else is
generated from the declarations.

A declaration names the overload, how it runs (its kind), and its other aspects:

  kind           runs as                                                         declared by
  kernel         a function at the Python dispatch key, from the op table        @register(op, ...)
  decomposition  torch's own Python decomposition, its pieces through the table  register_decomposition(op)
  composite      a composition of other ops above autograd (AutogradPrivateUse1), @register_composite(op)
                 which autograd differentiates
  backend        a kernel at the PrivateUse1 key, for ops reached without a tvk  @register_backend(op)
                 tensor argument (factories, copies); also in the op table
  host           a kernel at the CPU key (pinned memory: a CPU tensor op)        @register_host(op)

  aspect         meaning                                                         declared by
  cross_device   takes CPU and tvk tensors on purpose (no same-device check)     register(..., cross_device=True)
  fusion         compiled mode's elementwise rule (kernel op, operand and        register(..., fusion=ElementwiseRule(...))
                 scalar argument names) and, for activations, a GEMM/conv epilogue
  traced_whole   compiled mode keeps the op whole: torch's Python kernels at     register(..., traced_whole=True)
                 the Autograd key are hidden while tracing (upsampling)
  traced         compiled mode traces this function in the op's place            register_composite(..., traced=...)
  meta           the op's shapes on meta/fake tensors (torch lacks a Meta kernel) register_meta(op, fn)
  autocast       torch.autocast("tvk")'s policy for the op (torchvk/autocast.py) register_autocast(op, policy, fn)

Generated from them: the op table the dispatcher reads (`TABLE`, `DECOMPOSE`, `NO_DEVICE_CHECK`),
every torch.library registration (one Library per namespace), compiled mode's fusion rules
(`FUSION`), its whole and traced ops, `torchvk.supported_ops()` and the declared-ops section of
docs/op-coverage.md (`coverage_rows()`).

Declaring an aspect of an overload twice raises `DuplicateRegistrationError` naming both places:
a second registration would otherwise replace the first silently and leave dead code behind.
This module imports nothing from torchvk: every op module sits above it.
"""
from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from typing import Callable

import torch
from torch._decomp import decomposition_table

KINDS = ("kernel", "decomposition", "composite", "backend", "host")
_KEYS = {"composite": "AutogradPrivateUse1", "backend": "PrivateUse1", "host": "CPU"}
AUTOCAST_POLICIES = ("lower_precision", "float32", "float32_dtype_arg", "promote", "banned")


class DuplicateRegistrationError(RuntimeError):
    """An aspect of one overload declared twice."""


@dataclass(frozen=True)
class ElementwiseRule:
    """How compiled mode fuses the op into an elementwise group: `kernel_op` (a name of
    tvk_kernels/kernels/elementwise.py's OPS, or a function of the bound arguments choosing one),
    the argument names of its operands (a, b, c) and of its scalars S(0).. (names, or fixed
    numbers). `epilogue`: for activations, a function of the bound arguments naming the
    GEMM/conv epilogue that applies it."""
    kernel_op: str | Callable
    operands: tuple
    scalars: tuple = ()
    epilogue: Callable | None = None


@dataclass
class Declaration:
    op: object                      # OpOverload (or OpOverloadPacket: every overload)
    kind: str | None = None
    impl: Callable | None = None
    where: dict = field(default_factory=dict)  # aspect -> "file:line" of its declaration
    cross_device: bool = False
    fusion: ElementwiseRule | None = None
    traced_whole: bool = False
    traced: Callable | None = None
    meta: Callable | None = None
    autocast: str | None = None


DECLARATIONS: dict = {}  # op -> Declaration
# generated views, read on the hot path (plain dicts: one lookup per op)
TABLE: dict = {}             # op -> the function that runs it on tvk tensors (kernel and backend kinds)
DECOMPOSE: dict = {}         # OpOverload -> torch's Python decomposition
NO_DEVICE_CHECK: set = set()  # ops taking CPU and tvk tensors on purpose
FUSION: dict = {}            # OpOverload -> ElementwiseRule
_libraries: dict = {}        # namespace -> torch.library.Library("ns", "IMPL")


def _caller() -> str:
    """file:line of the declaration (the first frame outside this module)."""
    frame = sys._getframe(1)
    here = os.path.abspath(__file__)
    while frame is not None and os.path.abspath(frame.f_code.co_filename) == here:
        frame = frame.f_back
    if frame is None:
        return "?"
    path = frame.f_code.co_filename
    root = os.path.dirname(os.path.dirname(here))
    if path.startswith(root + os.sep):
        path = os.path.relpath(path, root)
    return f"{path}:{frame.f_lineno}"


def _claim(op, aspect: str, where: str) -> Declaration:
    """The op's declaration, its `aspect` now taken: a second claim raises, naming both places."""
    entry = DECLARATIONS.get(op) or Declaration(op)  # kept once the claim stands
    if aspect == "kind":  # an overload and its packet both run it: the same op declared twice
        others = [DECLARATIONS.get(op.overloadpacket)] if isinstance(op, torch._ops.OpOverload) else \
            [DECLARATIONS.get(getattr(op, name)) for name in op.overloads() if hasattr(op, name)]
        for other in others:
            if other is not None and other.kind is not None:
                raise DuplicateRegistrationError(
                    f"{op} is declared at {where}, but {other.op} already is ({other.kind}) at "
                    f"{other.where['kind']}: declare each overload once (torchvk/op_registry.py)")
    if aspect in entry.where:
        raise DuplicateRegistrationError(
            f"{op}: its {aspect} is declared twice, at {entry.where[aspect]} and at {where}. Remove one: a second "
            f"registration would silently replace the first (torchvk/op_registry.py).")
    entry.where[aspect] = where
    DECLARATIONS[op] = entry
    return entry


def _set_kind(op, kind: str, impl, where: str) -> Declaration:
    entry = _claim(op, "kind", where)
    entry.kind, entry.impl = kind, impl
    return entry


def _overloads(ops):
    for op in ops:
        if isinstance(op, torch._ops.OpOverloadPacket):
            yield from (getattr(op, name) for name in op.overloads())
        else:
            yield op


def _library(namespace: str):
    lib = _libraries.get(namespace)
    if lib is None:
        lib = _libraries[namespace] = torch.library.Library(namespace, "IMPL")
    return lib


def _impl(op, fn, key: str):
    """torch.library registration of fn for op at a dispatch key."""
    namespace, name = op._schema.name.split("::")
    overload = "" if op._overloadname == "default" else "." + op._overloadname
    _library(namespace).impl(name + overload, fn, key)


# ---------------------------------------------------------------------- declaring
def register(*ops, cross_device: bool = False, fusion: ElementwiseRule | None = None, traced_whole: bool = False):
    """Decorator: the function runs these aten ops (OpOverloads, or packets for every overload) on tvk
    tensors, at the Python dispatch key."""
    where = _caller()

    def deco(fn):
        for op in ops:
            entry = _set_kind(op, "kernel", fn, where)
            TABLE[op] = fn
            if cross_device:
                entry.cross_device = True
                NO_DEVICE_CHECK.add(op)
            if traced_whole:
                entry.traced_whole = True
        if fusion is not None:
            for op in _overloads(ops):
                register_fusion(op, fusion, where)
        return fn

    return deco


def register_fusion(op, rule: ElementwiseRule, where: str | None = None):
    """Compiled mode's elementwise rule for op (declared with its kernel, or beside it)."""
    entry = _claim(op, "fusion", where or _caller())
    entry.fusion = FUSION[op] = rule


def register_decomposition(*ops):
    """Run torch's own decomposition of these ops (their pieces must be declared). A packet stands
    for its overloads that have one."""
    where = _caller()
    for ov in _overloads(ops):
        fn = decomposition_table.get(ov)
        if fn is not None:  # a torch without one: the op stays missing (NotImplementedError names it)
            _set_kind(ov, "decomposition", fn, where)
            DECOMPOSE[ov] = fn


def register_composite(*ops, traced: Callable | bool = False):
    """Decorator: the function computes these ops from other ops above autograd (the
    AutogradPrivateUse1 key): autograd differentiates the composition. `traced`: what compiled
    mode traces in the op's place (True: the function itself; False: torch's own kernels)."""
    where = _caller()

    def deco(fn):
        for op in ops:
            entry = _set_kind(op, "composite", fn, where)
            if traced:
                entry.traced = fn if traced is True else traced
            _impl(op, fn, _KEYS["composite"])
        return fn

    return deco


def register_backend(*ops, cross_device: bool = False):
    """Decorator: the function runs these ops at the PrivateUse1 key (ops that reach TorchVK with no
    tvk tensor argument: factories, cross-device copies); the op table holds it too."""
    where = _caller()

    def deco(fn):
        for op in ops:
            entry = _set_kind(op, "backend", fn, where)
            TABLE[op] = fn
            if cross_device:
                entry.cross_device = True
                NO_DEVICE_CHECK.add(op)
            _impl(op, fn, _KEYS["backend"])
        return fn

    return deco


def register_host(*ops):
    """Decorator: the function runs these ops on CPU tensors (the CPU key), for what tvk changes about
    a CPU op (pinned memory)."""
    where = _caller()

    def deco(fn):
        for op in ops:
            _set_kind(op, "host", fn, where)
            _impl(op, fn, _KEYS["host"])
        return fn

    return deco


def register_meta(op, fn):
    """The op's shapes on meta and fake tensors, where this torch has no Meta kernel of its own
    (a later torch may: then torch's stays, and nothing is declared)."""
    if torch._C._dispatch_has_kernel_for_dispatch_key(op.name(), "Meta"):
        return
    entry = _claim(op, "meta", _caller())
    entry.meta = fn
    _impl(op, fn, "Meta")


def register_autocast(op, policy: str, fn):
    """torch.autocast("tvk")'s kernel for op (AutocastPrivateUse1): policy is one of AUTOCAST_POLICIES."""
    if policy not in AUTOCAST_POLICIES:
        raise ValueError(f"unknown autocast policy {policy!r}; one of {AUTOCAST_POLICIES}")
    entry = _claim(op, "autocast", _caller())
    entry.autocast = policy
    _impl(op, fn, "AutocastPrivateUse1")


# ---------------------------------------------------------------------- reading
def traced_whole_ops() -> list:
    """Kernels compiled mode keeps whole (torch's Autograd-key Python kernels hidden while tracing)."""
    return [d.op for d in DECLARATIONS.values() if d.traced_whole]


def traced_ops() -> dict:
    """{op: function} compiled mode traces in the op's place (the composites)."""
    return {d.op: d.traced for d in DECLARATIONS.values() if d.traced is not None}


def supported_ops() -> list[str]:
    """Names of the aten overloads that run on tvk: kernel, decomposition, composite and backend kinds."""
    return sorted(str(d.op) for d in DECLARATIONS.values() if d.kind in ("kernel", "decomposition", "composite",
                                                                             "backend"))


def coverage_rows() -> list[dict]:
    """One row per declared overload: {op, kind, fusion, autocast, meta, where}, sorted by op."""
    rows = []
    for d in DECLARATIONS.values():
        if d.kind is None and d.autocast is not None:
            continue  # an autocast policy of an op TorchVK runs through its pieces (linear, conv2d)
        rows.append({"op": str(d.op), "kind": d.kind or "-", "fusion": _fusion_class(d),
                     "autocast": d.autocast or "", "meta": d.meta is not None,
                     "where": (d.where.get("kind") or next(iter(d.where.values()))).split(":")[0]})
    return sorted(rows, key=lambda r: r["op"])


def _fusion_class(d: Declaration) -> str:
    if d.fusion is None:
        return "whole" if d.traced_whole else ""
    return "elementwise+epilogue" if d.fusion.epilogue is not None else "elementwise"
