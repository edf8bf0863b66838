"""Compiled mode: `torchvk.compile(model)`.

trace.py (AOTAutograd on fake CPU tensors) -> fusion.py (elementwise chains, matmul epilogues,
batch norm + relu, cross-entropy backward) -> program.py (straight-line kernel calls, liveness)
-> replay.py (recorded command buffer); module.py is the user-facing module; backend.py (with
fake.py, what Dynamo traces) compiles torch.compile(backend="tvk")'s graphs on the same path.
Imported lazily: AOTAutograd is not loaded until something is compiled.
"""


def compile(model, *, loss_fn=None, fuse: bool = True, replay: bool = True):
    from .module import compile as _compile  # lazy: loads AOTAutograd (functorch), not needed until a compile

    return _compile(model, loss_fn=loss_fn, fuse=fuse, replay=replay)


compile.__doc__ = """Compile a tvk nn.Module (see torchvk/compile/module.py)."""


def __getattr__(name):
    if name == "CompiledModule":
        from .module import CompiledModule  # lazy: loads AOTAutograd (functorch)

        return CompiledModule
    if name == "GraphBreakError":
        from .program import GraphBreakError  # lazy: loads torchvk's compiled mode

        return GraphBreakError
    raise AttributeError(name)


__all__ = ["compile", "CompiledModule", "GraphBreakError"]
