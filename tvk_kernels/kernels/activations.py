"""Activations as data: one table, from which every place that applies an activation is derived.

An entry is a scalar-free activation: its GLSL expression in `x` and, for its backward, one in
`g` (the incoming gradient) and `x` (the input) or `y` (the output). Helpers the expressions
call live in templates/common/activation.glsl (and the erf and math includes under it).
From the table come:
  * the elementwise ops `<name>` and `<name>_backward` (OPS in kernels/elementwise.py);
  * the GEMM and conv2d epilogues: the expression is the templates' ACT define
    (`EPILOGUES`: the activations matmul and conv2d_forward take, `act_define`);
  * torchvk's eager ops aten.<aten>, aten.<aten>_ and aten.<aten>_backward
    (torchvk/aten/elementwise.py);
  * compiled mode's fusion rules: the op inside fused elementwise chains, its backward, and
    act(addmm) / act(convolution) epilogues (torchvk/compile/fusion.py).
Adding an activation is one `add(Activation(...))` here (and a helper in
templates/common/activation.glsl if its expression needs one). Activations with parameters
(leaky_relu, elu, softplus, ...) are ordinary elementwise ops: their scalars are push constants
that an epilogue does not have.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

_X = re.compile(r"\bx\b")
_GRAD_VARS = re.compile(r"\b([gxy])\b")


@dataclass(frozen=True)
class Activation:
    name: str                # the kernel op and epilogue name
    expr: str                # GLSL in x: float, or any compute type where ints == "keep"
    grad: str | None = None  # the backward, GLSL in g and x (or y, see grad_of); None: no backward op
    grad_of: str = "x"       # what the backward gets besides g: "x" the input, "y" the output
    aten: str | None = None  # the aten op it implements (eager registration, fusion); None: none
    when: tuple = ()         # (argument, value) pairs of that aten op that pick this entry (gelu's approximate)
    ints: str = "refuse"     # integer inputs: "keep" (computed as integers: relu), "float" (a float
                             # result: sigmoid), "refuse" (torch raises NotImplementedError)
    fusable: bool = True     # may run inside fused elementwise chains and as a GEMM/conv epilogue

    def glsl(self, var: str) -> str:
        """The forward expression in `var` instead of x."""
        return _X.sub(var, self.expr)

    def grad_glsl(self, grad_var: str, value_var: str) -> str:
        """The backward expression with g -> grad_var and x (or y) -> value_var."""
        return _GRAD_VARS.sub(lambda m: grad_var if m[1] == "g" else value_var, self.grad)


ACTIVATIONS: dict[str, Activation] = {}
EPILOGUES: dict[str, str] = {}  # name -> the templates' ACT define (its expression), for the fusable ones
_derived: list = []


def add(act: Activation) -> Activation:
    """Put an activation in the table, and into everything derived from it (see `each`)."""
    if not re.fullmatch(r"[a-z][a-z0-9_]*", act.name) or act.name in ACTIVATIONS or act.name == "none":
        raise ValueError(f"activation name {act.name!r} is taken or not a lower-case identifier")
    if not _X.search(act.expr):
        raise ValueError(f"activation {act.name}: its expression {act.expr!r} does not use x")
    if act.grad_of not in ("x", "y") or act.ints not in ("keep", "float", "refuse"):
        raise ValueError(f"activation {act.name}: grad_of must be 'x' or 'y' and ints 'keep', 'float' or 'refuse'")
    if act.grad and re.search(r"\b" + ("y" if act.grad_of == "x" else "x") + r"\b", act.grad):
        raise ValueError(f"activation {act.name}: its backward may use g and {act.grad_of} (grad_of), not both x and y")
    ACTIVATIONS[act.name] = act
    if act.fusable:
        EPILOGUES[act.name] = act.expr
    for derive in _derived:
        derive(act)
    return act


def act_define(expr: str | None) -> dict:
    """The defines that give a GEMM/conv template an epilogue expression (templates/common/activation.glsl):
    {"ACT": expr}, or none at all (None: no activation; the tuned kernels are compiled so)."""
    return {"ACT": expr} if expr else {}


def each(derive):
    """Call derive(activation) for every activation in the table now and for every one added later:
    how a module builds its part (ops, registrations, rules) from the table."""
    for act in list(ACTIVATIONS.values()):
        derive(act)
    _derived.append(derive)


def select(aten: str, kwargs: dict) -> Activation:
    """The entry an aten.<aten> call picks: the one whose `when` its arguments match, else the one
    with no `when` (gelu: approximate="tanh" -> gelu_tanh, anything else -> gelu)."""
    entries = [a for a in ACTIVATIONS.values() if a.aten == aten]
    for a in entries:
        if a.when and all(kwargs.get(k) == v for k, v in a.when):
            return a
    for a in entries:
        if not a.when:
            return a
    raise KeyError(f"no activation implements aten.{aten} with {kwargs}")


for _act in (
    Activation("relu", "(x < 0 ? 0 : x)", grad="(x > 0 ? g : 0)", aten="relu", ints="keep"),  # nan stays nan
    Activation("gelu", "(x * tvk_ncdf(x))", grad="(g * tvk_gelu_grad(x))", aten="gelu"),
    Activation("gelu_tanh", "tvk_gelu_tanh(x)", grad="(g * tvk_gelu_tanh_grad(x))", aten="gelu",
               when=(("approximate", "tanh"),)),
    Activation("silu", "(x / (1.0 + exp(-x)))", grad="(g * tvk_silu_grad(x))", aten="silu"),
    Activation("sigmoid", "tvk_sigmoid(x)", grad="(g * y * (1.0 - y))", grad_of="y", aten="sigmoid", ints="float"),
    Activation("tanh", "tvk_tanh(x)", grad="(g * (1.0 - y * y))", grad_of="y", aten="tanh", ints="float"),
    Activation("hardsigmoid", "(tvk_relu6(x + 3.0) / 6.0)", grad="((x > -3.0 && x < 3.0) ? g / 6.0 : 0.0)",
               aten="hardsigmoid"),
    Activation("hardswish", "(x * tvk_relu6(x + 3.0) / 6.0)",
               grad="(x < -3.0 ? 0.0 : (x <= 3.0 ? g * (x / 3.0 + 0.5) : g))", aten="hardswish"),
    Activation("mish", "(x * tvk_tanh(tvk_log1p(exp(x))))", grad="(g * tvk_mish_grad(x))", aten="mish"),
    # aten's log_sigmoid_forward returns (output, buffer): torchvk/aten/elementwise.py registers it itself
    Activation("log_sigmoid", "(min(x, 0.0) - tvk_log1p(exp(-abs(x))))", grad="(g * tvk_log_sigmoid_grad(x))"),
):
    add(_act)
