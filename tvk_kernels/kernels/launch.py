"""The one shape of a kernel family: config lookup, checked parameters, memoized pipelines.

Every family is a `Family` subclass naming its tuning/<family>.json and templates/<template>:

    fam = family(device, Softmax)                    # one per device, memoized
    params = fam.resolve({"n": rows * cols}, params)  # bucket from the JSON, tuned/default config,
                                                      # explicit keys on top, checked once
    pipe = fam.variant(defines, params["WG"], PUSH.size, shared_bytes=...)  # built once
    device.stream.dispatch(pipe, grid_1d(groups), push, "softmax")

A family whose launch takes more deciding than a config and a pipeline (matmul: checks, tile fit,
split-K, gemv or cooperative matrices; elementwise: layout, vector widths, metadata) keeps the
outcome as a launch plan, in the family's one memo:

    launch = fam.kept_plan(key) or fam.keep_plan(key, plan(...))  # planned once per geometry
    launch.record(device, ...)  # a plan's record() only records its dispatches
"""
from __future__ import annotations

import operator
from functools import lru_cache

from .. import benchmark_mode
from ..config import constraint_problems, generation, lookup
from ..errors import DeviceLimitError, InvalidConfigError
from ..runtime.compiler import template_checksum
from ..search_space import bucket_of, limits, search_space, with_derived


def grid_1d(groups: int, max_x: int = 65535) -> tuple[int, int, int]:
    """Spread `groups` workgroups over x and y: x is capped at 65535 on many devices."""
    groups = max(groups, 1)
    if groups <= max_x:
        return (groups, 1, 1)
    y = (groups + max_x - 1) // max_x
    return ((groups + y - 1) // y, y, 1)


def workgroup_size(device, preferred: int = 256) -> int:
    """`preferred` threads (a power of two) for a kernel whose workgroup size is not tuned, or the
    largest power of two the device's workgroups hold (Vulkan guarantees 128)."""
    facts = device.facts
    most = min(facts.max_workgroup_invocations, facts.max_workgroup_size[0])
    return min(preferred, 1 << (most.bit_length() - 1))


def loop_budget_params(fam: "Family", shape: dict, prm: dict, n: int, passes: int) -> dict:
    """`prm`, with WG raised where one row of `n` elements walked by at most WG threads, ITEMS
    elements a thread a step, `passes` times, would run past the device's loop budget
    (facts.max_loop_iterations: llvmpipe silently ends an invocation's loops after 65535
    iterations in all, leaving the rest of the row unwritten)."""
    budget = fam.device.facts.max_loop_iterations
    if not budget:
        return prm
    steps = budget - 256  # the cross-thread reduction rounds after the row loops count as well
    wg, items = int(prm["WG"]), int(prm["ITEMS"])
    need = pow2ceil(-(-n * passes // (steps * items)))  # threads a row needs
    if need <= wg:
        return prm
    facts = fam.device.facts
    most = 1 << (min(facts.max_workgroup_invocations, facts.max_workgroup_size[0]).bit_length() - 1)
    if need > most:
        raise DeviceLimitError(f"{fam.family}: a row of {n} elements needs {need} threads of one workgroup on "
                               f"{facts.name}, whose loops stop after {budget} iterations and whose workgroups hold "
                               f"{most}; split the row (e.g. reshape it and reduce in two steps)")
    # the tuned subgroup size belongs to the tuned workgroup: the wider one runs at the driver's choice
    kept = {name: value for name, value in prm.items()
            if name in fam.params()[0] and name not in subgroup_size_params(fam.family)}
    return fam.resolve(shape, {**kept, "WG": need})


def pow2ceil(n: int) -> int:
    """The smallest power of two >= n (1 for n <= 1)."""
    return 1 << max(int(n) - 1, 0).bit_length()


def powers_of_two(family: str, params: dict, *names: str) -> dict:
    """A family's rule (check_config): these parameters are powers of two (tree reductions
    and bitonic steps halve them). Returns `params`."""
    for name in names:
        value = params[name]
        if value < 1 or value & (value - 1):
            raise InvalidConfigError(f"{family}: {name}={value} must be a power of two; pass another {name}")
    return params


def address(x) -> int:
    """A device address from an int or anything with `.address` (a Buffer); None (no buffer) is 0."""
    return 0 if x is None else int(getattr(x, "address", x))


@lru_cache(maxsize=8192)  # a training step asks for the same few shapes every time
def _bucket(family: str, shape: tuple) -> str:
    return bucket_of(family, dict(shape))


MAX_PLANS = 8192  # a model's distinct call geometries per family, with room; a miss beyond only rebuilds


class Family:
    """One kernel family on one device: its config lookup and compiled variants, memoized."""

    family = ""    # tuning/<family>.json: search space, buckets, defaults
    template = ""  # templates/<template>: the tuned configs' checksum is this file's (and its includes')

    def __init__(self, device):
        self.device = device
        self.checksum = template_checksum(self.template)
        self._generation = generation()
        self._params: dict = {}    # bucket -> (params, source)
        self._resolved: dict = {}  # (bucket, explicit items) -> checked params with derived values
        self._pipelines: dict = {}
        self._benchmarked: dict = {}  # exact key -> params, benchmark mode
        self._plans: dict = {}  # a call's geometry -> its launch plan (kept_plan(), keep_plan())

    def bucket(self, shape: dict) -> str:
        """The shape's bucket: the first of tuning/<family>.json's "buckets" whose expression holds."""
        return _bucket(self.family, tuple(shape.items()))  # a call site builds its dict the same way each time

    def params(self, bucket: str = "*") -> tuple[dict, str]:
        """(params, source) of a shape bucket: the first tuned config that passes the checks, else the default."""
        if self._generation != generation():
            self._reload()
        p = self._params.get(bucket)
        if p is None:
            p = self._params[bucket] = lookup(self.device, self.family, bucket, self.checksum, self.check_config)
        return p

    def _reload(self) -> None:
        """config.reload() ran: configs may have changed, and what was decided from them."""
        self._params.clear()
        self._resolved.clear()
        self._plans.clear()
        self._generation = generation()

    def kept_plan(self, key):
        """The launch plan kept for a call whose geometry is `key` (keep_plan()), or None: never
        kept, the configs reloaded since, or an unhashable key (strides given as lists). The family's
        one memo of plans: an eager call, a compiled program's first run and a benchmark share it."""
        if self._generation != generation():
            self._reload()
            return None
        try:
            return self._plans.get(key)
        except TypeError:
            return None

    def keep_plan(self, key, plan):
        """Keep `plan` for `key` (up to MAX_PLANS, then the memo starts afresh); returns `plan`."""
        try:
            if len(self._plans) >= MAX_PLANS:
                self._plans.clear()
            self._plans[key] = plan
        except TypeError:  # an unhashable key: planned, not kept
            pass
        return plan

    def forget_plans(self) -> None:
        """Drop the kept launch plans (a test or an A/B that changes what a plan is built from)."""
        self._plans.clear()

    def resolve(self, shape: dict | str, explicit: dict | None = None) -> dict:
        """The parameters of a launch: the bucket's config (`shape` is a dict of the bucket
        expressions' names, or a bucket name), an explicit candidate's keys on top (the tuner,
        ablations, tests), checked once; derived values of the search space (WG, shared_bytes, ...)
        included. Raises InvalidConfigError for explicit parameters this device cannot run."""
        bucket = shape if isinstance(shape, str) else self.bucket(shape)
        key = (bucket, tuple(sorted(explicit.items())) if explicit else None)
        try:
            p = self._resolved.get(key)
        except TypeError:  # an unhashable value (a list, a dict): not a parameter
            self.validate({**self.params(bucket)[0], **explicit})
            raise
        if p is None or self._generation != generation():
            base = self.params(bucket)[0]
            if explicit:  # a required subgroup size belongs to the tuned workgroup: an explicit candidate
                # that does not name one runs at the driver's choice
                base = {**base, **{name: 0 for name in subgroup_size_params(self.family) if name not in explicit}}
            merged = {**base, **explicit} if explicit else dict(base)
            if explicit:
                merged = self.validate(merged)
            p = self._resolved[key] = with_derived(search_space(self.family), merged)
        return p

    def benchmarked(self, key: tuple, shape: dict, run) -> dict:
        """Benchmark mode (tvk_kernels/benchmark_mode.py): the fastest config for this exact key,
        timed once with `run(params)` on the call's buffers, then reused (also by later processes)."""
        p = self._benchmarked.get(key)
        if p is None or self._generation != generation():
            p = self._benchmarked[key] = benchmark_mode.best(self, key, shape, run)
        return p

    def validate(self, params: dict) -> dict:
        """Explicit parameters: integers, within the search space's constraints and the device's
        limits, and the family's own rules (check_config); returns them completed."""
        for name, value in params.items():
            if isinstance(value, bool) or not isinstance(value, int):
                try:
                    value = operator.index(value)
                except TypeError:
                    raise InvalidConfigError(f"{self.family}: parameter {name}={value!r} must be an integer") from None
            if value < 0:
                raise InvalidConfigError(f"{self.family}: parameter {name}={value} must not be negative")
        problems = constraint_problems(self.family, params, self.device.facts)
        if problems:
            space = search_space(self.family)
            try:
                derived = {k: v for k, v in with_derived(space, params).items() if k in space.get("derived", {})}
            except ArithmeticError:
                derived = {}
            facts = {k: v for k, v in limits(self.device.facts).items() if k.startswith("max_")}
            raise InvalidConfigError(
                f"{self.family} parameters {params} do not fit {self.device.facts.name}: " + "; ".join(problems)
                + (f" (derived: {derived})" if derived else "") + f"; device limits {facts}. Pass parameters "
                f"within tuning/{self.family}.json's constraints, or params=None for the tuned config.")
        return self.check_config(params)

    def check_config(self, params: dict) -> dict:
        """A family's own rules beyond its search space (raise InvalidConfigError); returns `params` completed."""
        return params

    def variant(self, defines: dict, local_size, push_size: int, shared_bytes: int = 0, spec: dict | None = None,
                subgroup_size: int | None = None, template: str | None = None):
        """The family's template (or another of its templates) with these defines, specialization
        constants and workgroup (an int: 1-D), device limits checked, built once."""
        if isinstance(local_size, int):
            local_size = (local_size, 1, 1)
        # insertion order, not sorted: a call site builds its dicts the same way every time (sorting
        # cost a third of a cached launch); another order only adds a memo entry for the same pipeline
        key = (template, tuple(defines.items()), local_size, push_size, shared_bytes,
               tuple(spec.items()) if spec else (), subgroup_size)
        p = self._pipelines.get(key)
        if p is None:
            pipelines = self.device.pipelines
            pipelines.check_limits(local_size, shared_bytes=shared_bytes, subgroup_size=subgroup_size,
                                   push_size=push_size)
            p = self._pipelines[key] = pipelines.get(template or self.template, defines, local_size=local_size,
                                                     push_size=push_size, spec=spec, subgroup_size=subgroup_size,
                                                     background=True)
        return p


def subgroup_size_params(family: str) -> list[str]:
    """The family's parameters that require a subgroup size (kind "subgroup_size" in its search space)."""
    return [name for name, spec in search_space(family)["params"].items()
            if isinstance(spec, dict) and spec.get("kind") == "subgroup_size"]


_families: dict = {}


def family(device, cls):
    """The device's one instance of a Family subclass."""
    key = (device.index, cls)
    f = _families.get(key)
    if f is None:
        f = _families[key] = cls(device)
    return f


def positive(family: str, params: dict, *names: str) -> dict:
    """A family's rule (check_config): these parameters are at least 1 (a local size, tile or
    count of 0 launches nothing or never finishes). Returns `params`."""
    for name in names:
        if params[name] < 1:
            raise InvalidConfigError(f"{family}: {name}={params[name]} must be a positive int; pass another {name}")
    return params


_recorder = None  # tune/record.py's ShapeRecorder while one is active, else None


def recording() -> bool:
    """Whether a shape recorder (tvk-tune --model, tvk-bench shapes) is active: launch sites call
    record_shape under `if recording():`, so an eager launch builds no shape dict when none is."""
    return _recorder is not None


def record_shape(family: str, shape: dict | None, **about) -> None:
    """Tell the active shape recorder the tuner shape of a launch: a dict in the format of the
    family's tuner target (tune/targets/<family>.py), or None where the target has no shape for
    it (nothing is recorded). about: what the shape leaves out (dtype="float16", op="mul",
    direction="backward"), counted apart."""
    if _recorder is not None and shape is not None:
        _recorder.add(family, shape, about)
