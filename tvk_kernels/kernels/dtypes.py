"""Storage dtypes of the kernels: one table of names, codes and sizes for every family.

A dtype's code is what a template's dtype define (DTYPE, DT, DT0.., IN_F16) holds. Templates
name the codes through templates/common/dtypes.glsl (TVK_DT_FLOAT32 ...), which mirrors this
table; tests/test_activation_table.py checks that the two agree.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class DType:
    name: str
    code: int            # the templates' dtype code (TVK_DT_<NAME> in templates/common/dtypes.glsl)
    itemsize: int
    kind: str            # "f" floating, "i" signed integer, "u" unsigned integer, "b" bool
    feature: str | None  # the device.facts.features key its storage needs
    define: str | None   # the elementwise template's USE_* define that enables that storage


DTYPES = {d.name: d for d in (
    DType("float32", 0, 4, "f", None, None),
    DType("float16", 1, 2, "f", "storage_16bit", "USE_F16"),
    DType("int64", 2, 8, "i", "shader_int64", "USE_I64"),
    DType("int32", 3, 4, "i", None, None),
    DType("bool", 4, 1, "b", "storage_8bit", "USE_U8"),
    # raw 16-bit words (the high half of a float32), computed in float32: no bf16 arithmetic needed
    DType("bfloat16", 5, 2, "f", "storage_16bit", "USE_F16"),
    # small integers: loaded zero- or sign-extended, computed in int32, stored by truncation (wraparound)
    DType("uint8", 6, 1, "u", "storage_8bit", "USE_U8"),
    DType("int8", 7, 1, "i", "storage_8bit", "USE_U8"),
    DType("int16", 8, 2, "i", "storage_16bit", "USE_F16"),
)}


def codes(*names: str) -> dict:
    """{name: code} for the dtypes a family takes."""
    return {n: DTYPES[n].code for n in names}


def glsl_name(name: str) -> str:
    """The dtype's code as templates/common/dtypes.glsl names it."""
    return "TVK_DT_" + name.upper()


# ------------------------------------------------------------------ 16-bit storage, float32 arithmetic
STORAGE = codes("float32", "float16", "bfloat16")  # what templates including common/storage.glsl store


def storage_define(dtype: str) -> dict:
    """The DTYPE define of a common/storage.glsl template; none for float32, so its float32 modules
    (and the tuned configs stamped with them) stay as they were."""
    return {} if dtype == "float32" else {"DTYPE": STORAGE[dtype]}


def check_storage(device, dtype: str, family: str) -> None:
    """A clear error for a storage dtype the family or the device does not hold."""
    if dtype not in STORAGE:
        raise TypeError(f"{family}: storage dtype {dtype!r} is not one of {sorted(STORAGE)}")
    if dtype != "float32" and not device.facts.features.get("storage_16bit"):
        raise TypeError(f"{family}: {device.facts.name} has no 16-bit storage for {dtype} tensors")
