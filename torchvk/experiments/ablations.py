"""Experiment 6: ablations, one change at a time against the full configuration.

  tuned vs default configs   every kernel family with a tuner target, on its shape suite
  deferred vs blocking       MNIST training step, TVK_LAUNCH_BLOCKING's per-kernel submit+wait
  fp16 vs fp32               matmul 1024/2048 (training stays fp32: no fp16 autocast yet)
  cooperative vs scalar      fp16 matmul, cooperative-matrix kernel vs the tiled kernel
  subgroup vs shared memory  sum reduction of 16M floats
  fused vs per-tensor optim  SGD+momentum step of the MNIST CNN's parameters
  torch.optim paths          AdamW / SGD step of a 60-tensor model: default (foreach), foreach, fused, for-loop,
                             each against one fused kernel launch for all parameters
  warm vs cold cache         compile time of every pipeline an MNIST CNN training step needs
  eager vs graph replay      the same step captured once (torchvk.graph) and replayed
  eager vs compiled          the same step through torchvk.compile (fused, replayed); cold/warm first compiled step
"""
from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch
import torch.nn.functional as F

import torchvk
from tvk_kernels.bench.common import environment, installed_size, md_table, median, write_result
from tvk_kernels.config import default_params, lookup
from tvk_kernels.kernels import matmul as matmul_kernels
from tvk_kernels.kernels import optim as optim_kernels
from tvk_kernels.kernels import reduce as reduce_kernels
from tvk_kernels.runtime.compiler import template_checksum
from tvk_kernels.search_space import bucket_of
from tvk_kernels.tune.measure import time_candidate
from tvk_kernels.tune.targets import load_targets, unavailable

from . import models
from .overlap import step_overlap_ms


def _family_tuned_vs_default(device, quick):
    # quick (lavapipe): 3 timed runs after the warm-up runs, not 10 after 50 ms of queued warm-up runs
    timing = {"repeats": 3, "warm_seconds": 0.0} if quick else {}
    rows = []
    for family, target in sorted(load_targets().items()):
        if unavailable(target, device):  # a family this device cannot run (the cooperative-matrix GEMM)
            continue
        for shape in target.suites["tiny" if quick else "suite"]:
            bucket = bucket_of(family, shape)
            tuned, source = lookup(device, family, bucket, template_checksum(target.template))
            default = default_params(family, device.facts, bucket)
            case = target.prepare(device, shape)
            try:
                t_tuned = time_candidate(device, lambda i: case.run(tuned, i), 3, **timing)
                t_default = t_tuned if tuned == default else time_candidate(device, lambda i: case.run(default, i), 3,
                                                                            **timing)
            finally:
                case.free()
            rows.append({"family": family, "shape": shape, "bucket": bucket, "config_source": source,
                         "tuned_s": t_tuned, "default_s": t_default, "speedup": t_default / t_tuned})
    return rows


def _gpu_time(device, fn, repeats=10):
    """Median GPU seconds of `fn()` (Vulkan timestamps, after warm-up)."""
    return time_candidate(device, lambda i: fn(), n_inputs=1, warmup=1, repeats=repeats)


@contextlib.contextmanager
def _square_matmul(device, n: int):
    """A zero-argument launcher of one fp32 n^3 matmul on scratch buffers (freed afterwards)."""
    a, b, c = (device.allocator.alloc(n * n * 4) for _ in range(3))
    try:
        yield lambda: matmul_kernels.matmul(device, a.address, b.address, c.address, n, n, n)
    finally:
        for x in (a, b, c):
            x.free()


def _spin_up(device, seconds: float = 1.5, n: int = 2048):
    """Keep the GPU busy for a moment before timing: a driver at its idle clock raises it only
    under sustained load (settings are left alone; this is load, as any warm-up)."""
    with _square_matmul(device, n) as launch:
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            for _ in range(20):
                launch()
            device.stream.synchronize()


def _clock_probe_us(device, n=1024) -> float:
    """GPU microseconds of one fp32 n^3 matmul: taken at the start and end of the run, so a result
    says whether its kernels ran at full clock (the H200 was seen idling at 345 MHz after host-bound work)."""
    with _square_matmul(device, n) as launch:
        return _gpu_time(device, launch, repeats=20) * 1e6


def _matmul_variants(device, quick):

    out = []
    for n in ((128,) if quick else (1024, 2048, 4096)):
        bufs = {}
        for dt, np_dt in (("float32", np.float32), ("float16", np.float16)):
            a = device.upload(np.random.default_rng(0).standard_normal((n, n)).astype(np_dt))
            b = device.upload(np.random.default_rng(1).standard_normal((n, n)).astype(np_dt))
            c = device.allocator.alloc(n * n * np.dtype(np_dt).itemsize)
            bufs[dt] = (a, b, c)
        run = lambda dt, params=None: matmul_kernels.matmul(device, bufs[dt][0].address, bufs[dt][1].address,  # noqa: E731
                                                bufs[dt][2].address, n, n, n, dtype=dt, params=params)
        info16 = run("float16")
        t32 = _gpu_time(device, lambda: run("float32"))
        t16 = _gpu_time(device, lambda: run("float16"))
        tiled = default_params("matmul", device.facts, bucket_of("matmul", {"M": n, "N": n, "K": n, "batch": 1}))
        t16_tiled = _gpu_time(device, lambda: run("float16", tiled))
        out.append({"n": n, "fp32_s": t32, "fp16_s": t16, "fp16_kernel": info16.get("kernel"),
                    "fp16_tiled_s": t16_tiled, "fp16_over_fp32_speedup": t32 / t16,
                    "coopmat_over_tiled_speedup": (t16_tiled / t16) if info16.get("kernel") == "coopmat" else None})
        for trio in bufs.values():
            for buf in trio:
                buf.free()
    return out


def _reduction_variants(device, quick):

    n = 1 << (16 if quick else 24)
    x = device.upload(np.random.default_rng(0).standard_normal(n).astype(np.float32))
    out = device.allocator.alloc(4)
    fam_params = reduce_kernels.family(device, reduce_kernels.Reduce).resolve("large")
    res = {}
    for label, sub in (("subgroup", 1), ("shared_memory", 0)):
        params = dict(fam_params, SUBGROUP=sub)
        if sub and not device.facts.features.get("subgroup_arithmetic"):
            res[label] = None
            continue
        res[label] = _gpu_time(device, lambda: reduce_kernels.reduce(device, "sum", x.address, out.address, (n,), params=params))
    x.free(), out.free()
    res["n"] = n
    res["subgroup_speedup"] = (res["shared_memory"] / res["subgroup"]) if res.get("subgroup") else None
    return res


def _mnist_setup(device, batch: int, model_name="cnn", fused: bool = True):
    """The ablations' training workload: model, SGD with momentum, one random MNIST-shaped batch."""
    dev = f"tvk:{device.index}"
    torch.manual_seed(0)
    model = models.build(model_name).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, **({"fused": True} if fused else {"foreach": False}))
    return model, opt, torch.randn(batch, 1, 28, 28).to(dev), torch.randint(0, 10, (batch,)).to(dev)


def _time_steps(step, steps: int, warmup: int = 2) -> tuple[float, float]:
    """Median ms of (issuing step(), step() through its sync) over `steps` runs after `warmup`."""
    host, total = [], []
    for i in range(steps + warmup):
        t0 = time.perf_counter()
        step()
        t1 = time.perf_counter()
        torch.tvk.synchronize()
        if i >= warmup:
            host.append(t1 - t0)
            total.append(time.perf_counter() - t0)
    return median(host) * 1e3, median(total) * 1e3


def _fresh_grads_host_ms(opt, params, steps: int, warmup: int = 2) -> float:
    """Median host ms of issuing opt.step() when every step brings new grad tensors, as
    zero_grad(set_to_none=True) and backward do (the grads are made outside the timing)."""
    host = []
    for i in range(steps + warmup):
        for p in params:
            p.grad = torch.randn_like(p)
        torch.tvk.synchronize()
        t0 = time.perf_counter()
        opt.step()
        t1 = time.perf_counter()
        torch.tvk.synchronize()
        if i >= warmup:
            host.append(t1 - t0)
    return median(host) * 1e3


def _optimizer_step_ms(device, steps: int, quick: bool) -> dict:
    """Median ms (through its sync) of a torch.optim AdamW / SGD+momentum step over a 60-tensor model
    (30 Linear layers) in each of its paths, and of one fused kernel launch for all parameters
    (what torchvk.optim's own classes ran before torch.optim reached these kernels: issue #17's target
    is torch.optim's steps within 1.1x of it). host_ms: the same steps' median host ms of issuing
    them (Python: torch.optim's own and TorchVK's), host_ms_fresh_grads: with new grads every step."""
    width = 16 if quick else 512
    torch.manual_seed(0)
    model = torch.nn.Sequential(*[torch.nn.Linear(width, width) for _ in range(30)]).to(f"tvk:{device.index}")
    params = list(model.parameters())
    for p in params:
        p.grad = torch.randn_like(p)
    grads = [p.grad for p in params]
    out = {"tensors": len(params), "elements": sum(p.numel() for p in params), "host_ms": {},
           "host_ms_fresh_grads": {}}
    for name, cls, kw in (("adamw", torch.optim.AdamW, {"lr": 1e-3}),
                          ("sgd", torch.optim.SGD, {"lr": 1e-2, "momentum": 0.9})):
        res, host, fresh = {}, {}, {}
        for mode, extra in (("default", {}), ("foreach", {"foreach": True}), ("fused", {"fused": True}),
                            ("for_loop", {"foreach": False})):
            opt = cls(params, **kw, **extra)
            host[mode], res[mode] = _time_steps(opt.step, steps)
            if mode != "for_loop":
                fresh[mode] = _fresh_grads_host_ms(opt, params, steps)
                for p, g in zip(params, grads):
                    p.grad = g
        states = [(torch.zeros_like(p), torch.zeros_like(p)) for p in params]
        if name == "adamw":
            entries = [(p.tvk_address, p.grad.tvk_address, m.tvk_address, v.tvk_address, 0, p.numel())
                       for p, (m, v) in zip(params, states)]
            host["one_fused_launch"], res["one_fused_launch"] = _time_steps(
                lambda: optim_kernels.adamw_step(device, entries, 1e-3, step=1), steps)
        else:
            entries = [(p.tvk_address, p.grad.tvk_address, m.tvk_address, p.numel()) for p, (m, _) in zip(params, states)]
            host["one_fused_launch"], res["one_fused_launch"] = _time_steps(
                lambda: optim_kernels.sgd_step(device, entries, 1e-2, 0.9), steps)
        out[name], out["host_ms"][name], out["host_ms_fresh_grads"][name] = res, host, fresh
    return out


def _training_step_ms(device, blocking: bool, fused: bool, steps: int, batch: int, model_name="cnn",
                      compiled: str | None = None):
    """compiled: None (eager), "torchvk" (torchvk.compile, model and loss) or "torch"
    (torch.compile(backend="tvk") of model and loss)."""
    stream = device.stream
    saved = stream.blocking
    stream.blocking = blocking
    try:
        model, opt, x, y = _mnist_setup(device, batch, model_name, fused)
        if compiled == "torchvk":
            loss_of = torchvk.compile(model, loss_fn=F.cross_entropy)
        elif compiled == "torch":
            # lazy: registering "tvk" with Dynamo loads torch._dynamo, which only this ablation needs
            from torchvk.compile import backend  # noqa: F401  registers "tvk" (a checkout has no entry point)

            torch._dynamo.reset()
            loss_of = torch.compile(lambda x, y: F.cross_entropy(model(x), y), backend="tvk")
        else:
            loss_of = lambda x, y: F.cross_entropy(model(x), y)  # noqa: E731

        def step():  # compiled: step 1 traces, step 2 records, then replays
            opt.zero_grad(set_to_none=True)
            loss_of(x, y).backward()
            opt.step()

        return _time_steps(step, steps)[1]
    finally:
        stream.blocking = saved


def _replay_step_ms(device, steps: int, batch: int, model_name="cnn"):
    """The same training step captured once with torchvk.graph() and replayed (one submit per step)."""
    model, opt, x, y = _mnist_setup(device, batch, model_name)

    def step():
        opt.zero_grad(set_to_none=False)
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss

    step()
    torch.tvk.synchronize()
    with torchvk.graph(device.index) as g:
        step()
    return _time_steps(g.replay, steps)[1], g.dispatches


def _compiled_step_breakdown(device, steps: int, batch: int, model_name="cnn"):
    """Where a compiled training step's time goes: host time to issue it (fw/bw replays and the
    optimizer), the whole step with its sync, and the GPU time of its kernels (timestamps, eager step)."""
    model, opt, x, y = _mnist_setup(device, batch, model_name)
    run = torchvk.compile(model, loss_fn=F.cross_entropy)

    def step(loss_of):
        opt.zero_grad(set_to_none=True)
        loss_of().backward()
        opt.step()

    host_ms, step_ms = _time_steps(lambda: step(lambda: run(x, y)), steps, warmup=3)
    gpu = None
    if device.stream.timestamps:
        eager = lambda: F.cross_entropy(model(x), y)  # noqa: E731
        step(eager)
        with device.stream.profiling() as records:
            step(eager)
        gpu = sum(r[1] for r in records) * 1e3
    st = run.compile_stats()[0]
    return {"host_issue_ms": host_ms, "step_ms": step_ms, "gpu_kernels_ms": gpu,
            "replayed_kernels": (st["forward"]["kernels"] or 0) + (st["backward"]["kernels"] or 0)}


_COMPILE = r"""
import json, time, torch, torchvk, torch.nn.functional as F
from torchvk.experiments import models
from tvk_kernels import get_device
d = get_device(%d)
# torch's own lazy imports, paid by any first training step on any device (model.to() loads
# torch.distributed.tensor, an optimizer torch._dynamo; compiling, AOTAutograd): timed apart
t_imp = time.perf_counter()
import torch.distributed.tensor, torch._dynamo
if COMPILED:
    import torch._functorch.aot_autograd, functorch.compile
torch_imports_s = time.perf_counter() - t_imp
t0 = time.perf_counter()
m = models.build("cnn").to("tvk:%d"); opt = torch.optim.SGD(m.parameters(), lr=0.01, momentum=0.9, fused=True)
x = torch.randn(BATCH, 1, 28, 28).to("tvk:%d"); y = torch.randint(0, 10, (BATCH,)).to("tvk:%d")
run = torchvk.compile(m, loss_fn=F.cross_entropy) if COMPILED else None
opt.zero_grad(); (run(x, y) if COMPILED else F.cross_entropy(m(x), y)).backward(); opt.step(); torch.tvk.synchronize()
pc = d.pipelines  # compile_s sums per-pipeline build times (spirv_s + driver_s); prefetch_wall_s is wall time
print(json.dumps({"first_step_s": time.perf_counter() - t0, "compile_s": pc.compile_seconds,
                  "spirv_s": pc.spirv_seconds, "driver_s": pc.driver_seconds,
                  "prefetch_wall_s": pc.prefetch_wall_seconds,
                  "pipelines": len(pc.pipelines), "torch_lazy_imports_s": torch_imports_s,
                  "trace_s": run.compile_stats()[0]["trace_seconds"] if COMPILED else 0.0}))
"""


def _compile_cold_warm(device, compiled: bool = False, env: dict | None = None, batch: int = 64):
    """First training step (at `batch`) in a fresh process with empty caches, then again with the caches
    it filled; `env` adds settings (TVK_PARALLEL_COMPILE=0, TVK_SPIRV_OPT=0) to both."""
    with tempfile.TemporaryDirectory() as cache:
        env = dict(os.environ, **(env or {}), TVK_CACHE_DIR=cache)
        env.pop("TVK_VALIDATION", None)
        runs = []
        for _ in range(2):
            i = device.index
            code = f"COMPILED = {compiled}\nBATCH = {batch}\n" + _COMPILE % (i, i, i, i)
            p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
            if p.returncode != 0:
                return {"error": p.stderr[-400:]}
            runs.append(json.loads(p.stdout.strip().splitlines()[-1]))
    return {"cold": runs[0], "warm": runs[1]}


def run(device, out_dir, quick=False, progress=True) -> dict:
    steps, batch = (2, 4) if quick else (20, 64)  # quick: tiny steps (lavapipe computes about 2 GFLOP/s)
    if not quick:
        _spin_up(device)
    probe_start = _clock_probe_us(device, 128 if quick else 1024)
    results = {  # kernel timings first, while the clock is up; the host-bound training steps after them
        "tuned_vs_default": _family_tuned_vs_default(device, quick),
        "matmul_precision_and_coopmat": _matmul_variants(device, quick),
        "subgroup_vs_shared_reduction": _reduction_variants(device, quick),
        "deferred_vs_blocking_ms": {"deferred": _training_step_ms(device, False, True, steps, batch),
                                    "blocking": _training_step_ms(device, True, True, steps, batch)},
        "fused_vs_per_tensor_optimizer_ms": {"fused": _training_step_ms(device, False, True, steps, batch),
                                             "per_tensor": _training_step_ms(device, False, False, steps, batch)},
        "torch_optim_step_ms": _optimizer_step_ms(device, steps, quick),
        "pipeline_cache_cold_vs_warm": _compile_cold_warm(device, batch=batch),
        "eager_vs_compiled_ms": {"eager": _training_step_ms(device, False, True, steps, batch),
                                 "compiled": _training_step_ms(device, False, True, steps, batch, compiled="torchvk"),
                                 "torch_compile": _training_step_ms(device, False, True, steps, batch, compiled="torch")},
        "compiled_first_step_cold_vs_warm": _compile_cold_warm(device, compiled=True, batch=batch),
        # quick runs (CI) leave out the two cold-start variants: each is two fresh processes compiling everything
        "compiled_first_step_cold_serial": {} if quick else _compile_cold_warm(device, True, env={"TVK_PARALLEL_COMPILE": "0"}),
        "compiled_first_step_cold_no_spirv_opt": {} if quick else _compile_cold_warm(device, True, env={"TVK_SPIRV_OPT": "0"}),
        # the cold runs above read a wheel's precompiled kernels where this checkout has them (shipped/spirv); this one never does
        "compiled_first_step_cold_no_shipped": {} if quick else _compile_cold_warm(device, True, env={"TVK_USE_SHIPPED_KERNELS": "0"}),
        "compiled_step_breakdown": _compiled_step_breakdown(device, steps, batch),
        "early_submit_overlap": step_overlap_ms(device, steps, batch, _mnist_setup, _time_steps),
        "eager_vs_graph_replay_ms": dict(zip(("replay", "kernels"), _replay_step_ms(device, steps, batch)),
                                         eager=_training_step_ms(device, False, True, steps, batch)),
        "installed_size": installed_size(),
    }
    results["clock_probe_fp32_matmul_us"] = {"n": 128 if quick else 1024, "start": probe_start,
                                             "end": _clock_probe_us(device, 128 if quick else 1024)}
    payload = {"experiment": "ablations", "environment": environment(device), "quick": quick, "results": results,
               "training_workload": f"MNIST CNN, batch {batch}, random inputs, median of {steps} steps"}
    tv = results["tuned_vs_default"]
    geo = float(np.exp(np.mean([np.log(r["speedup"]) for r in tv]))) if tv else None
    rows = [[f"tuned vs default ({r['family']} {r['shape']})", r["default_s"] * 1e6, r["tuned_s"] * 1e6, r["speedup"]]
            for r in tv]
    rows.append(["tuned vs default: geometric mean", None, None, geo])
    d = results["deferred_vs_blocking_ms"]
    rows.append(["blocking vs deferred submission (step ms)", d["blocking"], d["deferred"], d["blocking"] / d["deferred"]])
    f = results["fused_vs_per_tensor_optimizer_ms"]
    rows.append(["per-tensor vs fused optimizer (step ms)", f["per_tensor"], f["fused"], f["per_tensor"] / f["fused"]])
    o = results["torch_optim_step_ms"]
    for name in ("adamw", "sgd"):
        for mode in ("default", "foreach", "fused", "for_loop"):
            rows.append([f"torch.optim {name} {mode} vs one fused launch, {o['tensors']} tensors (step ms)",
                         o[name][mode], o[name]["one_fused_launch"], o[name][mode] / o[name]["one_fused_launch"]])
    for name in ("adamw", "sgd"):  # where a step's time goes: Python issuing it (torch.optim's and TorchVK's)
        h, hf = o["host_ms"][name], o["host_ms_fresh_grads"][name]
        for mode in ("default", "foreach", "fused"):
            rows.append([f"torch.optim {name} {mode} vs one fused launch, {o['tensors']} tensors (host ms per step)",
                         h[mode], h["one_fused_launch"], h[mode] / h["one_fused_launch"]])
            rows.append([f"torch.optim {name} {mode} with new grads each step vs one fused launch (host ms per step)",
                         hf[mode], h["one_fused_launch"], hf[mode] / h["one_fused_launch"]])
    for m in results["matmul_precision_and_coopmat"]:
        rows.append([f"fp32 vs fp16 matmul {m['n']} (us)", m["fp32_s"] * 1e6, m["fp16_s"] * 1e6, m["fp16_over_fp32_speedup"]])
        if m["coopmat_over_tiled_speedup"]:
            rows.append([f"tiled vs cooperative-matrix fp16 matmul {m['n']} (us)", m["fp16_tiled_s"] * 1e6,
                         m["fp16_s"] * 1e6, m["coopmat_over_tiled_speedup"]])
    r = results["subgroup_vs_shared_reduction"]
    if r.get("subgroup"):
        rows.append([f"shared-memory vs subgroup sum of {r['n']} (us)", r["shared_memory"] * 1e6, r["subgroup"] * 1e6,
                     r["subgroup_speedup"]])
    c = results["pipeline_cache_cold_vs_warm"]
    if "cold" in c:
        rows.append(["cold vs warm cache: compile s for an MNIST CNN step", c["cold"]["compile_s"], c["warm"]["compile_s"],
                     c["cold"]["compile_s"] / max(c["warm"]["compile_s"], 1e-9)])
    gr = results["eager_vs_graph_replay_ms"]
    rows.append([f"eager vs graph replay, step ms ({gr['kernels']} kernels, torchvk.graph)", gr["eager"], gr["replay"],
                 gr["eager"] / gr["replay"]])
    ov = results["early_submit_overlap"]
    rows.append(["eager step wall ms, submit at sync vs early submit to an idle GPU", ov["off"]["wall_ms"],
                 ov["on"]["wall_ms"], ov["off"]["wall_ms"] / ov["on"]["wall_ms"]])
    for name in ("off", "on"):
        o = ov[name]
        if o["gpu_ms"] is not None:
            rows.append([f"eager step, early submit {name}: host ms + GPU ms vs wall ms (overlap when wall < sum)",
                         o["host_ms"] + o["gpu_ms"], o["wall_ms"], None])
    ec = results["eager_vs_compiled_ms"]
    rows.append(["eager vs compiled, step ms (torchvk.compile)", ec["eager"], ec["compiled"], ec["eager"] / ec["compiled"]])
    if "torch_compile" in ec:
        rows.append(["eager vs torch.compile(backend='tvk'), step ms", ec["eager"], ec["torch_compile"],
                     ec["eager"] / ec["torch_compile"]])
    b = results["compiled_step_breakdown"]
    rows.append([f"compiled step: host issue ms vs whole step ms ({b['replayed_kernels']} replayed kernels)",
                 b["host_issue_ms"], b["step_ms"], None])
    cc = results["compiled_first_step_cold_vs_warm"]
    if "cold" in cc:
        rows.append(["cold vs warm cache: first compiled MNIST CNN step s (trace + compile + run)",
                     cc["cold"]["first_step_s"], cc["warm"]["first_step_s"],
                     cc["cold"]["first_step_s"] / max(cc["warm"]["first_step_s"], 1e-9)])
        for key, label in (("compiled_first_step_cold_serial", "pipelines built one by one vs in parallel"),
                           ("compiled_first_step_cold_no_spirv_opt", "glslc without -O vs with -O"),
                           ("compiled_first_step_cold_no_shipped", "every module compiled vs precompiled kernels read")):
            other = results.get(key, {})
            if "cold" in other:
                base, full = other["cold"]["first_step_s"], cc["cold"]["first_step_s"]
                rows.append([f"cold first compiled MNIST CNN step s: {label}", base, full, base / max(full, 1e-9)])
    size = results["installed_size"]
    rows.append(["installed size without torch: TorchVK / with numpy, vulkan, cffi, tqdm (MiB)", None,
                 size["torchvk_bytes"] / 2**20, size["total_without_torch_bytes"] / 2**20])
    table = md_table(["ablation (baseline vs full)", "baseline", "full configuration", "speedup"], rows)
    write_result(out_dir, "ablations", payload, table)
    return payload
