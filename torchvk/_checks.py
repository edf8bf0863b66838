"""Argument checks before an op runs: torch itself judges shapes, dtypes and dims.

Before a table implementation (or a decomposition) runs, the op is run on meta tensors (no
data) with the same sizes, strides and dtypes. A call torch refuses raises there, before any
kernel reads memory, with torch's exception. Meta kernels word some errors differently from
the CPU ones users know (and a few raise AssertionError or ValueError where the CPU raises
RuntimeError), so a refused call is then run on zero-filled CPU stand-ins, when they are small,
and the CPU's own exception is raised; if the CPU accepts the call, the meta kernel was stricter
than torch and the call goes on.

A call that passed is remembered by its signature (the op; per argument the shape, stride and
dtype, or the scalar with its type), so a repeated call costs building that key and one dict
lookup. Ops without a meta kernel, or whose meta kernel needs data (item, nonzero), go unchecked.

Memory overlap (an op writing a tensor that overlaps itself or another of its tensors) is judged
by torch too, once per op and way of overlapping: see check_overlap.
"""
from __future__ import annotations

import warnings

import torch

from ._storage import span_elements
from ._tensor import TVKTensor, is_dense

_Tensor = torch.Tensor
_passed: dict = {}       # signature -> True: calls torch accepted (or could not judge)
_MAX_PASSED = 8192       # floats that change every step (a schedule's lr) must not grow it forever
_CPU_CONFIRM_BYTES = 16 << 20  # stand-ins up to this size re-run a refused call on the CPU
_unchecked: dict = {}    # op -> True when its calls are never checked

# ops whose meta kernel cannot judge a call: they need the data, or the real storage's size
_NEED_DATA = {"aten::_local_scalar_dense", "aten::is_nonzero", "aten::equal", "aten::as_strided_", "aten::set_"}


def _never_checked(func) -> bool:
    skip = _unchecked.get(func)
    if skip is None:
        # view ops already get their geometry from torch's meta kernels (aten/views.py)
        skip = _unchecked[func] = func.is_view or func._schema.name in _NEED_DATA
    return skip


def _key(x):
    t = type(x)
    if t is TVKTensor:
        return x._geometry_key
    if t is list or t is tuple:
        return tuple(map(_key, x))
    if isinstance(x, _Tensor):
        return (x.device, x.shape, x.stride(), x.dtype)
    return (t, x)  # the type too: 2 and 2.0 are equal keys but not equal arguments (an int tensor's alpha)


def call_key(func, args, kwargs):
    """A call's signature: the op; per argument its shape, strides, dtype and device, or its value
    with its type (numbers, dtypes, lists of ints). Calls with one key are the same call on other
    data. Hashing it raises TypeError where an argument is unhashable. The op goes in by id (an
    OpOverload hashes in Python, ~0.2 us a time): whoever stores a key keeps its op alive
    (`keep_op`), so no other op can take that id."""
    return (id(func), tuple(map(_key, args)), tuple((k, _key(v)) for k, v in kwargs.items()) if kwargs else ())


_kept_ops: dict = {}  # id -> op, for every op whose key is stored anywhere


def keep_op(func) -> None:
    _kept_ops[id(func)] = func


def check_call(func, args, kwargs, first=None, key=None):
    """Raise torch's exception if torch refuses this call (shapes, dtypes, dims, memory overlap);
    else return the arguments to run it with: these, or with copies of inputs that a written
    tensor overlaps (check_overlap). `first(func, args, kwargs)` (the dispatcher's device check)
    runs before the meta check on every call not remembered: a remembered signature passed it already.
    `key`: the call's call_key when the caller has it."""
    if _never_checked(func):
        if first is not None:
            first(func, args, kwargs)
        return args, kwargs
    if key is None:
        key = call_key(func, args, kwargs)
    try:
        known = key in _passed
    except TypeError:  # an unhashable argument: check it every time
        key, known = None, False
    if not known:
        if first is not None:
            first(func, args, kwargs)
        check_now(func, args, kwargs)
        if key is not None:
            if len(_passed) >= _MAX_PASSED:
                _passed.clear()
            keep_op(func)
            _passed[key] = True
    return check_overlap(func, args, kwargs)  # every call: overlap depends on which storages the tensors view


def check_now(func, args, kwargs):
    """Raise torch's exception if torch refuses this call; nothing is remembered."""
    err = _meta_error(func, args, kwargs)
    if err is not None:
        err = _torch_error(func, args, kwargs, err)
        if err is not None:
            raise err


def skip_check(op):
    """The dispatcher does not check calls of `op`: its implementation checks them (with
    check_now where it needs torch's judgement), e.g. where the remembered signature would
    miss on every call (an optimizer's per-step scalars) or a meta kernel cannot judge."""
    _unchecked[op] = True


def _stand_ins(x, make, device):
    """x with each tensor (tvk, or CPU: a scalar, a copy's source) replaced by make(tensor), on `device`."""
    if isinstance(x, _Tensor):
        return make(x)
    if isinstance(x, (list, tuple)):
        return type(x)(_stand_ins(y, make, device) for y in x)
    if isinstance(x, torch.device):
        return torch.device(device)
    if isinstance(x, torch.Generator):
        return None
    return x


def _meta(x):
    return torch.empty_strided(x.shape, x.stride(), dtype=x.dtype, device="meta")


def _cpu(x):
    n = span_elements(list(x.shape), list(x.stride()))
    return torch.zeros(n, dtype=x.dtype).as_strided(x.shape, x.stride())


def _arguments(args, kwargs, make, device):
    return [_stand_ins(a, make, device) for a in args], {k: _stand_ins(v, make, device) for k, v in kwargs.items()}


def _meta_error(func, args, kwargs):
    """The exception the meta kernel raises for this call; None if it accepts it or cannot judge it."""
    try:
        margs, mkwargs = _arguments(args, kwargs, _meta, "meta")
    except Exception:  # noqa: BLE001 - a geometry meta tensors cannot have: no check
        return None
    try:
        func(*margs, **mkwargs)
    except NotImplementedError:
        return None  # no meta kernel
    except Exception as e:  # noqa: BLE001 - torch's own error, judged below
        if "meta tensor" in str(e):
            return None  # the meta kernel needs data (".item() cannot be called on meta tensors")
        return e
    return None


def _tensor_bytes(x) -> int:
    if isinstance(x, _Tensor):
        return span_elements(list(x.shape), list(x.stride())) * x.element_size()
    if isinstance(x, (list, tuple)):
        return sum(_tensor_bytes(y) for y in x)
    return 0


def _torch_error(func, args, kwargs, meta_err):
    """torch's CPU exception for the call the meta kernel refused; None if the CPU accepts it."""
    fallback = RuntimeError(str(meta_err)) if isinstance(meta_err, AssertionError) else meta_err
    if _tensor_bytes(args) + _tensor_bytes(list(kwargs.values())) > _CPU_CONFIRM_BYTES:
        return fallback
    try:
        cargs, ckwargs = _arguments(args, kwargs, _cpu, "cpu")
    except Exception:  # noqa: BLE001 - no CPU stand-ins for this geometry
        return fallback
    try:
        with torch.no_grad():
            func(*cargs, **ckwargs)
    except Exception as e:  # noqa: BLE001 - torch's own error
        return e
    return None


# ------------------------------------------------------------------------- memory overlap
# torch refuses a call whose written tensor overlaps itself ("more than one element of the
# written-to tensor refers to a single memory location": a stride-0 dim, as expand makes) or an
# input ("some elements of the input tensor and the written-to tensor refer to a single memory
# location"); at::assert_no_internal_overlap, assert_no_partial_overlap, assert_no_overlap. Which op
# checks which of its tensors, and how strictly, is each op's own: elementwise ops allow an input
# that is exactly the output (x.mul_(x), add(x, y, out=x)), index_select, gather and cat allow no
# shared element at all, mm checks only its output, reductions and fill_ nothing. So torch judges:
# a call whose tensors overlap in a way torch could refuse runs once on CPU stand-ins that share
# memory the same way, and torch's verdict is kept per op and overlap pattern (which argument
# overlaps which, and how; not their sizes). A call whose written tensors share no storage with
# another argument and have no stride-0 dim (nearly every call) costs metadata reads only.

INTERNAL_OVERLAP = ("unsupported operation: more than one element of the written-to tensor refers to a single "
                    "memory location. Please clone() the tensor before performing the operation.")
PARTIAL_OVERLAP = ("unsupported operation: some elements of the input tensor and the written-to tensor refer to "
                   "a single memory location. Please clone() the tensor before performing the operation.")
_OVERLAP_WORDS = "a single memory location"  # in both of torch's messages
_SAME, _FULL, _PARTIAL, _INTERNAL, _TOO_HARD = "same", "full", "partial", "internal", "too hard"
_tensor_slots: dict = {}  # op -> (written, other) tensor arguments as (position, name); None: writes none
_verdicts: dict = {}      # (op, overlap pattern) -> torch's (exception type, message), or None: allowed
_UNJUDGED = object()      # no verdict kept for the pattern yet
_TOO_LARGE = object()     # no verdict: the call is too large to run on the CPU
_KEYWORD = 1 << 30        # the position of a keyword-only argument: never in args


def overlap_screened(func) -> bool:
    """Whether check_call screens this op's calls for memory overlap (ops it never checks judge their own)."""
    return not _never_checked(func) and not writes_nothing(func)


def writes_nothing(func) -> bool:
    """Whether the op writes none of its arguments, neither elements nor geometry (t_, resize_)."""
    pure = _pure.get(func)
    if pure is None:
        pure = _pure[func] = not func._schema.is_mutable and torch.Tag.inplace_view not in func.tags
    return pure


_pure: dict = {}


def _find_tensor_slots(func):
    if torch.Tag.inplace_view in func.tags:  # t_, unsqueeze_: a new geometry, no element written
        return None
    slots = ([], [])
    for i, a in enumerate(func._schema.arguments):
        if "Tensor" in str(a.type):
            slots[0 if a.alias_info is not None and a.alias_info.is_write else 1].append(
                (_KEYWORD if a.kwarg_only else i, a.name))
    return (tuple(slots[0]), tuple(slots[1])) if slots[0] else None


def internal_overlap(t) -> bool:
    """at::has_internal_overlap(t) == MemOverlap::Yes: a dim of more than one element at stride 0."""
    return any(n > 1 and s == 0 for n, s in zip(t.shape, t.stride()))


def overlap(a, b):
    """at::get_overlap_status of two tensors on one storage: _SAME (one tensor), _FULL (the same bytes at
    the same strides), _PARTIAL (some shared bytes), _TOO_HARD (either is not dense: torch does not
    judge, and never refuses), or None (no shared byte, or either is empty)."""
    if a is b:
        return _SAME
    if a.numel() == 0 or b.numel() == 0:
        return None
    if not is_dense(a) or not is_dense(b):
        return _TOO_HARD
    a_size, b_size = a.element_size(), b.element_size()
    a_begin, b_begin = a.storage_offset() * a_size, b.storage_offset() * b_size
    a_end, b_end = a_begin + a.numel() * a_size, b_begin + b.numel() * b_size
    if a_begin == b_begin and a_end == b_end:
        return _FULL if a.stride() == b.stride() else _PARTIAL
    return _PARTIAL if a_begin < b_end and b_begin < a_end else None


def check_overlap(func, args, kwargs):
    """Raise torch's exception if torch refuses this call for how its written tensors overlap
    themselves or its other tensors; else return the arguments to run it with. Where torch allows
    an input to overlap a written tensor (mm(x, x, out=x), sum(x, 1, out=x[0])), its result
    depends on the order its loops read and write, and a GPU's threads have none: such an input is
    then copied first and the call gives the result it gives on separate tensors. Elementwise ops
    (torch's pointwise tag, copy_) are the exception, and the common case: torch allows them only
    an input that is exactly the output, and each element is read before it is written."""
    slots = _tensor_slots.get(func, False)
    if slots is False:
        slots = _tensor_slots[func] = _find_tensor_slots(func)
    if slots is None:
        return args, kwargs
    # the screen, on every call: no stride 0 in a written tensor, no other tensor on its storage
    n = len(args)
    storages, count = set(), 0
    for pos, name in slots[0]:
        w = args[pos] if pos < n else kwargs.get(name)
        for t in ((w,) if type(w) is TVKTensor else w if type(w) is list or type(w) is tuple else ()):
            if type(t) is TVKTensor:
                if 0 in t.stride():
                    return _overlapping(func, args, kwargs, slots)
                storages.add(t._tvk)
                count += 1
    if len(storages) < count:  # two written tensors on one storage
        return _overlapping(func, args, kwargs, slots)
    for pos, name in slots[1]:
        x = args[pos] if pos < n else kwargs.get(name)
        if type(x) is TVKTensor:
            if x._tvk in storages:
                return _overlapping(func, args, kwargs, slots)
        elif type(x) is list or type(x) is tuple:
            for y in x:
                if type(y) is TVKTensor and y._tvk in storages:
                    return _overlapping(func, args, kwargs, slots)
    return args, kwargs


def _tensors(x, name, into):
    if type(x) is TVKTensor:
        into.append((name, x))
    elif type(x) is list or type(x) is tuple:  # cat's tensors, index_put's indices
        into.extend(((name, j), y) for j, y in enumerate(x) if type(y) is TVKTensor)


def _overlapping(func, args, kwargs, slots):
    """check_overlap for a call the screen found a stride 0 or a shared storage in."""
    n = len(args)
    written, others = [], []
    for pos, name in slots[0]:
        _tensors(args[pos] if pos < n else kwargs.get(name), name, written)
    for pos, name in slots[1]:
        _tensors(args[pos] if pos < n else kwargs.get(name), name, others)
    inputs = {name for name, _ in others}
    on_storage: dict = {}  # Storage -> its written tensors, then its inputs, in argument order
    for name, t in written + others:
        on_storage.setdefault(t._tvk, []).append((name, t))
    pattern, entangled = [], set()  # entangled: inputs whose shared elements no order of torch's fixes
    for name, w in written:
        if internal_overlap(w):
            pattern.append((name, _INTERNAL))
    for group in on_storage.values():
        for k, (name, w) in enumerate(group):
            if name in inputs:
                break  # inputs are not compared with one another
            for other_name, other in group[k + 1:]:
                how = overlap(w, other)
                if how is _TOO_HARD:
                    if other_name in inputs and _spans_meet(w, other):
                        entangled.add(other_name)
                elif how is not None:
                    pattern.append((name, other_name, how))
    if pattern:
        _judge(func, args, kwargs, tuple(pattern))
        if not _elementwise(func):
            entangled.update(p[1] for p in pattern if len(p) == 3 and p[1] in inputs)
    return _copying(func, args, kwargs, entangled) if entangled else (args, kwargs)


def _spans_meet(a, b) -> bool:
    """Whether the byte ranges two views of one storage reach meet (their elements may still not)."""
    a_begin, b_begin = a.storage_offset() * a.element_size(), b.storage_offset() * b.element_size()
    a_end = a_begin + span_elements(list(a.shape), list(a.stride())) * a.element_size()
    b_end = b_begin + span_elements(list(b.shape), list(b.stride())) * b.element_size()
    return a_begin < b_end and b_begin < a_end


_ELEMENTWISE = {torch.ops.aten.copy_.default: True}  # op -> whether it is elementwise; copy_ has no tag


def _elementwise(func) -> bool:
    known = _ELEMENTWISE.get(func)
    if known is None:
        known = _ELEMENTWISE[func] = torch.Tag.pointwise in func.tags
    return known


def _judge(func, args, kwargs, pattern):
    key = (func, pattern)
    verdict = _verdicts.get(key, _UNJUDGED)
    if verdict is _UNJUDGED:
        verdict = _cpu_verdict(func, args, kwargs)
        if verdict is _TOO_LARGE:
            verdict = _elementwise_verdict(pattern)
        else:
            _verdicts[key] = verdict
    if verdict is not None:
        raise verdict[0](verdict[1])


def _copying(func, args, kwargs, names):
    """args and kwargs with a copy of each input named in `names` (a name, or (name, index) in a list)."""
    def copied(x, name):
        if name in names:
            return x.clone()
        if type(x) is list or type(x) is tuple:
            return type(x)(y.clone() if (name, j) in names else y for j, y in enumerate(x))
        return x

    args = tuple(copied(x, a.name) for x, a in zip(args, func._schema.arguments))
    return args, {k: copied(v, k) for k, v in kwargs.items()}


def _cpu_verdict(func, args, kwargs):
    """torch's verdict on the call run on zero-filled CPU stand-ins, one CPU buffer per tvk Storage
    (the same tensor object where the call passes one twice); None if the CPU allows it."""
    if _tensor_bytes(args) + _tensor_bytes(list(kwargs.values())) > _CPU_CONFIRM_BYTES:
        return _TOO_LARGE
    extents: dict = {}  # Storage -> bytes its views reach

    def measure(x):
        if type(x) is TVKTensor:
            end = span_elements(list(x.shape), list(x.stride()), x.storage_offset()) * x.element_size()
            extents[x._tvk] = max(extents.get(x._tvk, 0), end)
        return x

    _arguments(args, kwargs, measure, "cpu")
    buffers = {st: torch.zeros(nbytes, dtype=torch.uint8).untyped_storage() for st, nbytes in extents.items()}
    made: dict = {}

    def stand_in(x):
        t = made.get(id(x))
        if t is None:
            t = made[id(x)] = torch.empty(0, dtype=x.dtype).set_(buffers[x._tvk], x.storage_offset(), x.shape,
                                                                  x.stride()) if type(x) is TVKTensor else x.clone()
        return t

    cargs, ckwargs = _arguments(args, kwargs, stand_in, "cpu")
    try:
        with torch.no_grad(), torch.random.fork_rng(devices=[]), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the CPU's own warnings (an out= resized) are not the call's
            func(*cargs, **ckwargs)
    except Exception as e:  # noqa: BLE001 - only torch's overlap errors are this check's
        if _OVERLAP_WORDS in str(e):
            return type(e), str(e)
    return None


def _elementwise_verdict(pattern):
    """TensorIterator's rule, every elementwise op's, for a call too large to ask the CPU about: a
    stride-0 output or a partial overlap is refused; an input that is exactly the output is not."""
    kinds = {p[-1] for p in pattern}
    if _INTERNAL in kinds:
        return RuntimeError, INTERNAL_OVERLAP
    return (RuntimeError, PARTIAL_OVERLAP) if _PARTIAL in kinds else None
