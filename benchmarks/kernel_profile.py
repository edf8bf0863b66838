"""Where the GPU time of one training step goes, per kernel, tvk vs torch CUDA (diagnostic).

    python benchmarks/kernel_profile.py [--models a,b] [--modes eager,benchmark,compiled] [--quick] [--out DIR]
Issue #16's target: a training step of a model outside the tuning suite (the zoo's models) takes
at most 1.5x torch CUDA's GPU kernel time; with benchmark mode on, at most 1.2x.

Workloads: every model of the zoo (torchvk/experiments/zoo_models.py) at its "bench" size, with
its own loss and optimizer (torch.optim on either side, as the zoo trains it), and the
experiments' MNIST CNN (batch 256) and CIFAR CNN (batch 128) with SGD (torchvk.optim on tvk, as
the experiments run it). --quick: the zoo's "tiny" sizes, batch 4 for the CNNs, fewer steps.

tvk modes: "eager"; "benchmark" (eager with torchvk.backends.benchmark on, warmed up until a
step times no new shape; its winners kept in a temp dir, so an earlier run's cache does not
decide; the shapes timed and the seconds spent are recorded); "compiled" (torchvk.compile with
the loss, replay off so the stream can time each launch; a replay runs the same kernels).
Each is timed over STEPS steps back to back under the stream's exclusive timestamps, summed by
kernel label: each kernel is charged from the end of the one before, so the labels add up to
the steps' GPU span (barriers and gaps inside a submitted batch included). CUDA: the same step
under torch.profiler in a process without torchvk, kernel durations summed by name.
Writes kernel_profile.json and kernel_profile.md to DIR.
"""
import argparse
import contextlib
import importlib.util
import json
import math
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import torch
import torch.nn.functional as F

EXPERIMENTS = Path(__file__).resolve().parents[1] / "torchvk" / "experiments"
CNNS = {"cnn": (256, (1, 28, 28)), "cifar_cnn": (128, (3, 32, 32))}  # the experiments' models: batch, image
TVK_MODES = ("eager", "benchmark", "compiled")
TARGETS = {"eager": 1.5, "benchmark": 1.2, "compiled": 1.5}  # issue #16: tvk kernel ms / CUDA kernel ms
STEPS, WARMUP = 5, 3  # profiled steps (averaged), and steps before them (compiled: trace, then steady)
QUICK_STEPS, QUICK_WARMUP = 2, 1
MAX_BENCHMARK_WARMUP = 6  # benchmark mode: warm-up steps at most, waiting for a step that times no new shape


def _load(filename: str):
    """A file of torchvk/experiments by path: importing torchvk breaks CUDA backwards in the same
    process (README), and models.py and zoo_models.py import only torch."""
    name = f"kernel_profile_{Path(filename).stem}"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, EXPERIMENTS / filename)
        sys.modules[name] = module = importlib.util.module_from_spec(spec)  # dataclasses look it up there
        spec.loader.exec_module(module)
    return sys.modules[name]


def all_models() -> list[str]:
    return [*_load("zoo_models.py").ZOO, *CNNS]


def workload_batch(name: str, quick: bool) -> int:
    if name in CNNS:
        return 4 if quick else CNNS[name][0]
    entry = _load("zoo_models.py").ZOO[name]
    return (entry.tiny if quick else entry.bench)["batch"]


def workload(name: str, quick: bool, device: str):
    """(model, optimizer, loss_fn, x, target) of `name` on `device`, built on the CPU from
    fixed seeds: the same weights and batch on tvk and on CUDA."""
    if name in CNNS:
        batch, shape = workload_batch(name, quick), CNNS[name][1]
        torch.manual_seed(0)
        model = _load("models.py").build(name).to(device)
        g = torch.Generator().manual_seed(1)
        x, y = torch.randn(batch, *shape, generator=g), torch.randint(0, 10, (batch,), generator=g)
        if device.startswith("tvk"):
            import torchvk  # not at the top: the CUDA side runs without torchvk

            opt = torchvk.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
        else:
            opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
        return model, opt, F.cross_entropy, x.to(device), y.to(device)
    zoo = _load("zoo_models.py")
    entry, size = zoo.ZOO[name], "tiny" if quick else "bench"
    model = zoo.build(name, size).to(device)
    x, y = zoo.batches(name, 1, size)[0]
    return model, entry.optimizer(model.parameters()), entry.loss, x.to(device), y.to(device)


def _optimizer_name(opt) -> str:
    return f"{type(opt).__module__.split('.')[0]}.optim.{type(opt).__name__}"


def _step(loss_of, opt, x, y):
    opt.zero_grad(set_to_none=True)
    loss_of(x, y).backward()
    opt.step()


def _by_label(pairs, steps: int) -> dict:
    per = defaultdict(float)
    for label, ms in pairs:
        per[label] += ms / steps
    return dict(sorted(per.items(), key=lambda kv: -kv[1]))


def _error(e: BaseException) -> str:
    lines = str(e).strip().splitlines()
    return f"{type(e).__name__}: {lines[0] if lines else ''}"[:400]


# ---- tvk ------------------------------------------------------------------------------------------

def _spin_up(device, seconds):
    from torchvk.experiments.ablations import _spin_up  # not at the top: the CUDA side runs without torchvk

    _spin_up(device, seconds)


@contextlib.contextmanager
def fresh_benchmark_cache():
    """Benchmark mode's winners in a temp dir for this run: a winner an earlier run stored (other
    templates' timings, another clock) must not decide, and its first-sight cost is then this run's."""
    from tvk_kernels import benchmark_mode

    saved = benchmark_mode.cache_dir  # benchmark_mode's only use of the cache root: its entries' folder
    with tempfile.TemporaryDirectory(prefix="tvk-kernel-profile-") as tmp:
        benchmark_mode.cache_dir = lambda: Path(tmp)
        try:
            yield
        finally:
            benchmark_mode.cache_dir = saved


def tvk_profile(device, name: str, mode: str, quick: bool) -> dict:
    """{"kernels_ms": per-label GPU ms of one step, "optimizer", and for benchmark mode its
    first-sight cost}. mode: one of TVK_MODES."""
    import torchvk
    import torchvk.backends

    steps, warmup = (QUICK_STEPS, QUICK_WARMUP) if quick else (STEPS, WARMUP)
    model, opt, loss_fn, x, y = workload(name, quick, f"tvk:{device.index}")
    if mode == "compiled":
        loss_of = torchvk.compile(model, loss_fn=loss_fn, replay=False)
    else:
        loss_of = lambda x, y: loss_fn(model(x), y)  # noqa: E731
    result = {"optimizer": _optimizer_name(opt)}
    before = torchvk.backends.benchmark_stats()
    t0 = time.perf_counter()
    torchvk.backends.benchmark = mode == "benchmark"
    try:
        for i in range(MAX_BENCHMARK_WARMUP if mode == "benchmark" else warmup):
            decided = torchvk.backends.benchmark_stats()["decided"]
            _step(loss_of, opt, x, y)
            torch.tvk.synchronize()
            settled = torchvk.backends.benchmark_stats()["decided"] == decided
            if i + 1 >= warmup and settled:
                break  # a step that timed nothing new: what follows is the steady state
        if not settled:  # its timing runs would land in the profile
            raise RuntimeError(f"benchmark mode still timed new shapes after {i + 1} warm-up steps; "
                               "raise MAX_BENCHMARK_WARMUP in kernel_profile.py")
        warm = torchvk.backends.benchmark_stats()
        if mode == "benchmark":
            result["benchmark_shapes"] = warm["decided"] - before["decided"]
            result["benchmark_s"] = warm["seconds"] - before["seconds"]
            result["benchmark_reused_from_disk"] = warm["reused_from_disk"] - before["reused_from_disk"]
        result["warmup_steps"], result["warmup_s"] = i + 1, time.perf_counter() - t0
        if not quick:
            _spin_up(device, 0.5)  # the idle clock again after the host work above (design note 11)
        with device.stream.profiling(exclusive=True) as records:
            for _ in range(steps):  # back to back, as training runs: the GPU stays busy
                _step(loss_of, opt, x, y)
    finally:
        torchvk.backends.benchmark = False
    result["kernels_ms"] = _by_label(((label, s * 1e3) for label, s in records), steps)
    return result


# ---- CUDA -----------------------------------------------------------------------------------------

def cuda_profiles(names, quick: bool) -> dict:
    """{name: {"kernels_ms", "optimizer"} or {"error"}}, from one subprocess without torchvk."""
    proc = subprocess.run([sys.executable, __file__, "--cuda", json.dumps({"names": names, "quick": quick})],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        return {n: {"error": f"CUDA subprocess failed: {proc.stderr.strip()[-600:]}"} for n in names}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _cuda_profile(name: str, quick: bool) -> dict:
    steps, warmup = (QUICK_STEPS, QUICK_WARMUP) if quick else (STEPS, WARMUP)
    model, opt, loss_fn, x, y = workload(name, quick, "cuda")
    loss_of = lambda x, y: loss_fn(model(x), y)  # noqa: E731
    for _ in range(warmup + 1):  # one more: cuBLAS/cuDNN pick their algorithms on first sight
        _step(loss_of, opt, x, y)
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            _step(loss_of, opt, x, y)
        torch.cuda.synchronize()
    kernels = ((e.name[:90], e.device_time / 1e3) for e in prof.events()
               if e.device_type == torch.autograd.DeviceType.CUDA)
    return {"kernels_ms": _by_label(kernels, steps), "optimizer": _optimizer_name(opt)}


def _cuda_in_this_process(names, quick) -> dict:
    out = {}
    for name in names:
        try:
            out[name] = _cuda_profile(name, quick)
        except Exception as e:  # noqa: BLE001  (a model CUDA cannot run is a result, as on tvk)
            out[name] = {"error": _error(e)}
    return out


# ---- the run --------------------------------------------------------------------------------------

def _total(run: dict | None):
    return sum(run["kernels_ms"].values()) if run and "kernels_ms" in run else None


def summary(workloads: list[dict], modes) -> dict:
    """Per tvk mode, over the zoo's models with both totals: geometric mean of tvk/CUDA and how
    many miss issue #16's target."""
    out = {}
    for mode in modes:
        ratios = {w["model"]: w["ratio"][mode] for w in workloads
                  if w["source"] == "zoo" and w["ratio"].get(mode) is not None}
        target = TARGETS[mode]
        out[mode] = {"models": len(ratios),
                     "geomean_ratio": math.exp(sum(map(math.log, ratios.values())) / len(ratios)) if ratios else None,
                     "target": target, "above_target": sorted(m for m, r in ratios.items() if r > target),
                     "above_1.5x": sum(r > 1.5 for r in ratios.values())}
        if mode == "benchmark":
            out[mode]["above_1.2x"] = sum(r > 1.2 for r in ratios.values())
    return out


def profile(names, modes=TVK_MODES, quick: bool = False, out_dir=None, progress=print) -> dict:
    from tvk_kernels import get_device
    from tvk_kernels.bench.common import environment

    device = get_device(0)
    if not device.stream.timestamps:
        raise SystemExit(f"{device.facts.name} has no compute timestamp queries: its kernels cannot be timed "
                         "(kernel_profile.py needs them; run it on another device)")
    unknown = [m for m in modes if m not in TVK_MODES]
    if unknown:
        raise SystemExit(f"unknown mode(s) {unknown}; choose from {', '.join(TVK_MODES)}")
    unknown = [n for n in names if n not in all_models()]
    if unknown:
        raise SystemExit(f"unknown model(s) {unknown}; choose from {', '.join(all_models())}")
    t0 = time.perf_counter()
    cuda = cuda_profiles(names, quick) if torch.cuda.is_available() else {}
    if not quick:
        _spin_up(device, 1.5)  # the H200 idles at a low clock (docs/design-notes.md 11)
    zoo = _load("zoo_models.py").ZOO
    workloads = []
    with fresh_benchmark_cache():
        for name in names:
            w = {"model": name, "source": "zoo" if name in zoo else "experiments",
                 "batch": workload_batch(name, quick), "tvk": {}, "cuda": cuda.get(name)}
            for mode in modes:
                try:
                    w["tvk"][mode] = tvk_profile(device, name, mode, quick)
                except Exception as e:  # noqa: BLE001  (a model x mode that fails is a result: the next one runs)
                    w["tvk"][mode] = {"error": _error(e)}
            cuda_ms = _total(w["cuda"])
            w["tvk_total_ms"] = {m: _total(r) for m, r in w["tvk"].items()}
            w["cuda_total_ms"] = cuda_ms
            w["ratio"] = {m: (t / cuda_ms if t is not None and cuda_ms else None) for m, t in w["tvk_total_ms"].items()}
            workloads.append(w)
            progress(_describe(w))
    result = {"experiment": "kernel_profile", "environment": environment(device), "quick": quick,
              "steps": QUICK_STEPS if quick else STEPS, "modes": list(modes), "targets": TARGETS,
              "wall_s": time.perf_counter() - t0,
              "cuda": "torch.profiler in a process without torchvk, cudnn.benchmark off (torch's default)"
              if torch.cuda.is_available()
              else "not available here: cuda fields and ratios are null",
              "workloads": workloads, "summary": summary(workloads, modes)}
    if out_dir:
        from tvk_kernels.bench.common import write_result

        write_result(out_dir, "kernel_profile", result, _table(result))
    return result


def _ms(x):
    return "-" if x is None else f"{x:.3f}"


def _describe(w: dict) -> str:
    cuda_ms = w["cuda_total_ms"]
    lines = [f"== {w['model']} batch {w['batch']}: CUDA kernels {_ms(cuda_ms)} ms"
             + (f" ({w['cuda']['optimizer']})" if w["cuda"] and "optimizer" in w["cuda"] else "")]
    for mode, r in w["tvk"].items():
        if "error" in r:
            lines.append(f"  tvk {mode}: {r['error']}")
            continue
        ratio = w["ratio"][mode]
        extra = f"; {r['benchmark_shapes']} shapes timed in {r['benchmark_s']:.2f} s" if "benchmark_shapes" in r else ""
        lines.append(f"  tvk {mode} ({r['optimizer']}): {_ms(w['tvk_total_ms'][mode])} ms"
                     + (f", {ratio:.2f}x CUDA" if ratio is not None else "") + extra)
        lines += [f"    {ms:8.3f}  {label}" for label, ms in list(r["kernels_ms"].items())[:6]]
    if w["cuda"] and "error" in w["cuda"]:
        lines.append(f"  cuda: {w['cuda']['error']}")
    lines += [f"  cuda {ms:8.3f}  {label}" for label, ms in list((w["cuda"] or {}).get("kernels_ms", {}).items())[:6]]
    return "\n".join(lines)


def _table(result: dict) -> str:
    from tvk_kernels.bench.common import md_table

    modes = result["modes"]
    rows = []
    for w in result["workloads"]:
        first = next((r for r in w["tvk"].values() if "kernels_ms" in r), {})
        top = "; ".join(f"{label} {ms:.3f}" for label, ms in list(first.get("kernels_ms", {}).items())[:3])
        bench = w["tvk"].get("benchmark", {})
        sight = f"{bench['benchmark_shapes']} in {bench['benchmark_s']:.2f} s" if "benchmark_shapes" in bench else None
        errors = "; ".join(f"{m}: {r['error']}" for m, r in w["tvk"].items() if "error" in r).replace("|", "/")
        rows.append([w["model"], w["batch"], *(w["tvk_total_ms"][m] for m in modes), w["cuda_total_ms"],
                     *(w["ratio"][m] for m in modes), sight, top.replace("|", "/"), errors or None])
    headers = ["model", "batch", *(f"tvk {m} ms" for m in modes), "CUDA ms", *(f"{m} / CUDA" for m in modes),
               "benchmark: shapes timed", "top 3 tvk kernels (" + (modes[0] if modes else "") + ")", "errors"]
    lines = [f"GPU kernel ms of one training step (mean of {result['steps']}); CUDA: {result['cuda']}. "
             "Issue #16's target over the zoo's models: tvk/CUDA <= 1.5, with benchmark mode <= 1.2.", ""]
    for mode, s in result["summary"].items():
        if not s["models"]:
            lines.append(f"- {mode}: no zoo model with both a tvk and a CUDA total")
            continue
        lines.append(f"- {mode}: geometric mean {s['geomean_ratio']:.2f}x over {s['models']} zoo models; above "
                     f"{s['target']}x: {', '.join(s['above_target']) or 'none'}")
    optimizers = []
    for w in result["workloads"]:
        tvk = sorted({r["optimizer"] for r in w["tvk"].values() if "optimizer" in r})
        optimizers.append(f"{w['model']} tvk {'/'.join(tvk) or '-'}, CUDA {(w['cuda'] or {}).get('optimizer', '-')}")
    lines += ["", "Optimizers: " + "; ".join(optimizers), "", md_table(headers, rows)]
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=None, help="folder for kernel_profile.json and kernel_profile.md")
    ap.add_argument("--models", default=None, help="comma-separated (default: all): " + ", ".join(all_models()))
    ap.add_argument("--modes", default=",".join(TVK_MODES), help="tvk modes, comma-separated: " + ", ".join(TVK_MODES))
    ap.add_argument("--quick", action="store_true", help="tiny sizes and few steps (a smoke run)")
    ap.add_argument("--cuda", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.cuda:
        spec = json.loads(args.cuda)
        print(json.dumps(_cuda_in_this_process(spec["names"], spec["quick"])))
        return
    names = args.models.split(",") if args.models else all_models()
    modes = tuple(m for m in args.modes.split(",") if m)
    result = profile(names, modes, args.quick, args.out)
    for mode, s in result["summary"].items():
        print(f"summary {mode}: {s}")


if __name__ == "__main__":
    main()
