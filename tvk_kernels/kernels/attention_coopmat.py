"""Fused attention on cooperative matrices (templates/attention_coopmat.comp): attention.py's route for
float16 where the device has 16 x 16 x 16 fp16 -> fp32 subgroup matrices and a small forward and
backward checked against numpy passed (`routed`), unless TVK_COOPMAT_ATTENTION=0 (ROUTE_BY_DEFAULT). Same
arguments, tensors and strides as attention.py's kernels; its delta kernel (attention.comp KERNEL 1) runs
before the dQ and dK/dV passes. The backward kernels run only where BACKWARD_ROUTE allows (emulated: always).

Search space, buckets and defaults: tuning/attention_coopmat.json (BR, BC of the forward; BBR, BBC of
both backward passes). TVK_COOPMAT=0 or TVK_COOPMAT_ATTENTION=0 turns the route off.
TVK_COOPMAT_ATTENTION=emulate[:SUBGROUP] routes float16 here on any device with the template's EMULATE
(its matrix products on scalar code, subgroups of SUBGROUP invocations, 32 by default): how lavapipe's
tests run the rest of this kernel; never a speed path.
"""
from __future__ import annotations


from ..env_flags import env_flag
from ..errors import InvalidConfigError
from .launch import Family, family
from .matmul_coopmat import emulated_subgroup, has_16x16x16

# On: the lent H100 built all three kernels and ran them right (tests/test_attention_coopmat.py's device test), 2.1 to
# 4.1x faster forward + backward than attention.comp's fp16 kernels (benchmarks/attention_vs_torch.py, design note 54);
# TVK_COOPMAT_ATTENTION=0 turns it off
ROUTE_BY_DEFAULT = True
# The backward kernels (dQ, dK/dV) run here too; False would run attention.comp's backward after this forward (the
# same lse and dropout numbering): how the forward alone was measured while the backward crashed NVIDIA's pipeline
# build (design note 54); the emulation runs them everywhere
BACKWARD_ROUTE = True
MIN_SUBGROUP, MAX_SUBGROUP = 16, 64  # a row's scalar threads (SUBGROUP / 16) in its own subgroup


def shared_bytes(kernel: int, br: int, bc: int, head: int, subgroup: int, emulate: bool, hsplit: int = 1) -> int:
    """Shared memory of one kernel (forward 0, dQ 2, dK/dV 3) at these tiles, as the template declares it
    (dK/dV split over `hsplit` workgroups along the head dim keeps 1 / hsplit of its transposed tiles)."""
    tile = bc * (head // 8 + 1) * 16  # BC rows of octets, one octet of padding
    kept = br * (head // 8 + 1) * 16  # a tile of kept rows in shared memory
    halves = br * (bc + 8) * 2
    common = br * (bc + 4) * 4 + (br // 16) * subgroup * 4  # sS, sRed
    transposed = head // (hsplit if kernel == 3 else 1) * (bc + 8) * 2  # a tile as halves, a row per head dim
    if kernel == 0:  # the K tile, V's transposed; q kept in matrices (the emulation: in shared memory)
        return common + tile + transposed + halves + (kept if emulate else 0)
    # the backward keeps one operand in matrices (the emulation: in shared memory) and the other in shared memory;
    # dQ's k and dK/dV's q and dO tiles also transposed
    return (common + 2 * tile + (1 if kernel == 2 else 2) * (halves + transposed)
            + (2 if emulate else 1) * kept)


def emulation() -> int | None:
    """TVK_COOPMAT_ATTENTION=emulate[:SUBGROUP]: the subgroup size to emulate, else None."""
    return emulated_subgroup("TVK_COOPMAT_ATTENTION", (16, 32, 48, 64))


class CoopAttention(Family):
    family = "attention_coopmat"
    template = "attention_coopmat.comp"

    def __init__(self, device):
        Family.__init__(self, device)
        self._checked: dict = {}  # subgroup size -> the check's verdict (routed)

    def subgroup(self, emulate: int | None) -> int:
        return emulate or self.device.facts.subgroup_size

    def check_config(self, params: dict) -> dict:
        for name in ("BR", "BC", "BBR", "BBC"):
            value = params.get(name)
            if not isinstance(value, int) or value < 16 or value % 16:
                raise InvalidConfigError(f"attention_coopmat: {name}={value!r} must be a positive multiple of 16")
        split = params.get("HSPLIT", 1)
        if not isinstance(split, int) or split < 1:
            raise InvalidConfigError(f"attention_coopmat: HSPLIT={split!r} must be a positive integer")
        return params

    @staticmethod
    def splits(kernel: int, params: dict, head: int) -> int:
        """Workgroups a key block's dK/dV (kernel 3) is split over along the head dim: the config's HSPLIT,
        lowered to the largest count that divides the head dim's 16-wide blocks; 1 for the other kernels."""
        if kernel != 3:
            return 1
        split = min(params.get("HSPLIT", 1), head // 16)
        while (head // 16) % split:
            split -= 1
        return split

    def tiles(self, kernel: int, params: dict, head: int, emulate: int | None) -> tuple[int, int]:
        """(BR, BC) of a kernel at this head dim: the config's, BC then BR halved (down to 16) until the
        kernel fits the device's shared memory and workgroup size."""
        br, bc = (params["BR"], params["BC"]) if kernel == 0 else (params["BBR"], params["BBC"])
        sub = self.subgroup(emulate)
        facts = self.device.facts
        split = self.splits(kernel, params, head)
        while True:
            fits = (shared_bytes(kernel, br, bc, head, sub, bool(emulate), split) <= facts.max_shared_memory
                    and br // 16 * sub <= facts.max_workgroup_invocations)
            if fits:
                return br, bc
            if bc > 16 and bc >= br:
                bc //= 2
            elif br > 16:
                br //= 2
            else:
                raise InvalidConfigError(f"attention_coopmat: no tile of head dim {head} fits {facts.name}")

    def pipeline(self, kernel: int, params: dict, head: int, mask, causal: bool, dropout: bool, seed_buf: bool,
                 vec: int, emulate: int | None):
        br, bc = self.tiles(kernel, params, head, emulate)
        sub = self.subgroup(emulate)
        split = self.splits(kernel, params, head)
        defines = {"KERNEL": kernel, "HEAD": head, "BR": br, "BC": bc, "SUBGROUP_SIZE": sub, "VEC": vec,
                   "MASK": {None: 0, "bool": 1, "float": 2}[mask], "CAUSAL": int(bool(causal)),
                   "DROPOUT": int(bool(dropout)), "SEED_BUF": int(bool(seed_buf)), "EMULATE": int(bool(emulate)),
                   **({"HSPLIT": split} if split > 1 else {})}
        required = sub if not emulate and self.device.facts.subgroup_size_control else None
        pipe = self.variant(defines, (br // 16) * sub, 128, shared_bytes(kernel, br, bc, head, sub, bool(emulate), split),
                            subgroup_size=required)
        return pipe, br

    def routed(self, check) -> bool:
        """Whether this device runs float16 attention here: cooperative matrices of 16 x 16 x 16 fp16 -> fp32
        at subgroup scope, a subgroup size of 16 to 64, and `check(device)` (attention.py's run against numpy)
        passed (once)."""
        sub = self.device.facts.subgroup_size
        verdict = self._checked.get(sub)
        if verdict is None and getattr(self.device.stream, "dry", False):
            return False  # a dry run (a compiled program's first) discards the check's kernels: decide on a real run
        if verdict is None:
            verdict = has_16x16x16(self.device) and sub % 16 == 0 and MIN_SUBGROUP <= sub <= MAX_SUBGROUP
            self._checked[sub] = verdict  # the check below runs attention, which asks again: no recursion
            if verdict:
                verdict = self._checked[sub] = bool(check(self.device))
        return verdict


def route(device, dtype: str, check, backward: bool = False) -> tuple[CoopAttention, int | None] | None:
    """(family, emulated subgroup size or None) where float16 attention (its backward: `backward`) runs on this
    template, else None; `check(device)` decides once whether the device's matrices give right results."""
    if dtype != "float16":
        return None
    emulate = emulation()
    if emulate:
        return family(device, CoopAttention), emulate
    if backward and not BACKWARD_ROUTE:
        return None
    if not env_flag("TVK_COOPMAT", default=True) or not env_flag("TVK_COOPMAT_ATTENTION", default=ROUTE_BY_DEFAULT):
        return None
    if "VK_KHR_cooperative_matrix" not in device.facts.extensions:
        return None
    fam = family(device, CoopAttention)
    return (fam, None) if fam.routed(check) else None


def vec_width(d: int, addresses, strides) -> int:
    """8 (16-byte loads) where the head dim, the strides given (None: contiguous, multiples of d) and the
    loaded tensors' addresses are multiples of 8 halves, else 1."""
    if d % 8 or any(a % 16 for a in addresses):
        return 1
    if any(st is not None and any(int(x) % 8 for x in st) for st in strides or ()):
        return 1
    return 8
