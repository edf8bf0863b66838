"""Build the README's Results section from benchmarks/results/<device>/*.json and the
shipped RDNA1 configs: every number comes from a result file, none is typed by hand.

    python -m tvk_kernels.bench.report [--results benchmarks/results] [--write README.md]
"""
from __future__ import annotations

import argparse
import json
import math
import re
import sys
from pathlib import Path

from ..paths import data_dir
from .plots import plot

START, END = "<!-- results:start -->", "<!-- results:end -->"


def _load(folder: Path) -> dict:
    return {p.stem: json.loads(p.read_text()) for p in sorted(folder.glob("*.json"))}


def _fmt(x, digits=3):
    return "-" if x is None else (f"{x:.{digits}g}" if isinstance(x, float) else str(x))


def _where(r: dict) -> str:
    e = r["environment"]
    return f"{e['device']}, {e['driver']} {e['driver_info']}, torch {e['torch_version']}"


def _stamp(r: dict) -> str:
    e = r["environment"]
    quick = "quick (tiny sizes), " if r.get("quick") else ""
    return f"_({quick}commit {e['commit']}, {e['date'][:16].replace('T', ' ')})_"


def vector_add(r) -> list[str]:
    rows = {x["n"]: x for x in r["results"]}
    out = []
    ratios = [rows[n]["tvk_vs_cuda_bandwidth"] for n in (10_000_000, 100_000_000) if n in rows]
    if ratios and all(x is not None for x in ratios):
        verdict = "yes" if all(x >= 0.9 for x in ratios) else "not yet"
        out.append(f"**{verdict}**: " + "; ".join(
            f"{n // 1_000_000}M floats at {rows[n]['tvk_gbps']:.0f} GB/s, {rows[n]['tvk_vs_cuda_bandwidth']:.2f}x torch "
            f"CUDA's {rows[n]['torch_cuda_gbps']:.0f} GB/s" for n in (10_000_000, 100_000_000) if n in rows)
            + f"; all {len(rows)} sizes equal numpy: {all(x['correct'] for x in r['results'])}.")
    if not out and 10_000_000 in rows:
        x = rows[10_000_000]
        out.append(f"10M floats at {x['tvk_gbps']:.1f} GB/s (no CUDA peer on this machine); all {len(rows)} sizes equal "
                   f"numpy: {all(y['correct'] for y in r['results'])}.")
    h, c = r["host_cost"], r["cold_start"]
    out.append(f"Host cost of one queued dispatch: {h['raw_dispatch_us']:.1f} us raw, {h['add_call_us']:.1f} us "
               f"through `add()` (target 5 us). Cold start to a verified add: {c.get('warm_cache_s', float('nan')):.2f} s "
               "with a warm cache (target 1 s).")
    return out


def matmul(r) -> list[str]:
    rows = {(x["dtype"], x["n"]): x for x in r["results"]}
    parts = []
    for dt, n in (("float32", 2048), ("float32", 4096), ("float16", 4096)):
        x = rows.get((dt, n))
        if x and x.get("tvk_vs_cuda") is not None:
            parts.append(f"{dt} {n}: {x['tflops']:.1f} TFLOP/s ({x['kernel']}), {x['tvk_vs_cuda']:.2f}x cuBLAS")
    if not parts:
        return ["no CUDA peer in this run."]
    f32 = [rows[("float32", n)]["tvk_vs_cuda"] for n in (2048, 4096) if ("float32", n) in rows]
    f16 = rows.get(("float16", 4096), {}).get("tvk_vs_cuda")
    verdict = "yes" if f32 and min(f32) >= 0.9 and f16 and f16 >= 0.7 else "not yet"
    errs = max(x["rel_err"] for x in r["results"])
    return [f"**{verdict}** (targets: fp32 0.9x, fp16 0.7x cuBLAS): " + "; ".join(parts)
            + f". Largest relative error vs float64: {errs:.2g}."]


def _peer(runs, model, batch, peer):
    return next((x for x in runs if x.get("model", model) == model and x["batch"] == batch and x["peer"] == peer), None)


def mnist(r) -> list[str]:
    out = []
    runs = r["runs"]
    t, c = _peer(runs, "cnn", 64, "tvk"), _peer(runs, "cnn", 64, "cuda")
    if t and c and len(t["epochs"]) >= 3:
        acc_t, acc_c = t["epochs"][-1]["test_accuracy"], c["epochs"][-1]["test_accuracy"]
        acc_ok = acc_t >= 0.985 and abs(acc_t - acc_c) <= 0.003
        speed = t["epochs"][-1]["seconds"] / c["epochs"][-1]["seconds"]
        out.append(f"Answer: accuracy **{'yes' if acc_ok else 'not yet'}** (target 98.5% after 3 epochs, within "
                   f"0.3 points of torch); epoch time **{'yes' if speed <= 1.5 else 'not yet'}** "
                   f"({speed:.1f}x torch CUDA eager, target 1.5x); zero CPU ops: "
                   f"**{'yes' if all(x.get('cpu_ops') == 0 for x in runs if x['peer'] == 'tvk') else 'no'}**.")
        k = _peer(runs, "cnn", 64, "tvk-compiled")
        if k and "epochs" in k:
            out.append(f"Compiled (torchvk.compile, model and loss): CNN batch 64 step {k['step_ms_median']:.2f} ms vs "
                       f"torch CUDA eager {c['step_ms_median']:.2f} ms: at most CUDA eager's time **"
                       f"{'yes' if k['step_ms_median'] <= c['step_ms_median'] else 'not yet'}**; "
                       f"{t['step_ms_median'] / k['step_ms_median']:.1f}x faster than eager (target 2x); accuracy "
                       f"{k['epochs'][-1]['test_accuracy'] * 100:.2f}%.")
    for model in ("cnn", "mlp"):
        for batch in (64, 256):
            t, c = _peer(runs, model, batch, "tvk"), _peer(runs, model, batch, "cuda")
            if not t:
                continue
            line = (f"{model.upper()} batch {batch}: tvk {t['epochs'][-1]['test_accuracy'] * 100:.2f}% after "
                    f"{len(t['epochs'])} epoch(s), {t['epochs'][-1]['seconds']:.1f} s/epoch, {t['cpu_ops']} CPU ops")
            if c:
                line += (f"; torch CUDA {c['epochs'][-1]['test_accuracy'] * 100:.2f}%, {c['epochs'][-1]['seconds']:.1f} "
                         f"s/epoch ({t['epochs'][-1]['seconds'] / c['epochs'][-1]['seconds']:.1f}x slower); peak memory "
                         f"{t['peak_memory_bytes'] / 2**20:.0f} MiB vs {c['peak_memory_bytes'] / 2**20:.0f} MiB")
            k = _peer(runs, model, batch, "tvk-compiled")
            if k and "epochs" in k:
                line += (f"; compiled (torchvk.compile) {k['epochs'][-1]['test_accuracy'] * 100:.2f}%, "
                         f"{k['epochs'][-1]['seconds']:.1f} s/epoch, step {k['step_ms_median']:.2f} ms vs eager "
                         f"{t['step_ms_median']:.2f} ms")
                if c:
                    line += f" and torch CUDA {c['step_ms_median']:.2f} ms"
            v = _peer(runs, model, batch, "torchvulkan")
            if v and "epochs" in v:
                line += (f"; PyPI torchvulkan {v['epochs'][-1]['test_accuracy'] * 100:.2f}%, step "
                         f"{v['step_ms_median']:.1f} ms vs tvk {t['step_ms_median']:.1f} ms")
            out.append(line)
    for x in runs:
        if x["peer"] == "tvk-compiled" and "error" in x:
            out.append(f"Compiled {x['model'].upper()} batch {x['batch']} failed: {x['error']}.")
    return out


def cifar10(r) -> list[str]:
    t = next((x for x in r["runs"] if x["peer"] == "tvk"), None)
    c = next((x for x in r["runs"] if x["peer"] == "cuda"), None)
    failed = next((x for x in r["runs"] if "error" in x), None)
    out = [f"Data: {r['dataset'].split(':')[0]}."]
    if t and c:
        speed = t["epochs"][-1]["seconds"] / c["epochs"][-1]["seconds"]
        mem = t["peak_memory_bytes"] / c["peak_memory_bytes"]
        out.append(f"Answer: trains GPU-only **yes**; epoch time **{'yes' if speed <= 1.5 else 'not yet'}**; "
                   f"peak memory **{'yes' if mem <= 1.2 else 'not yet'}**.")
        out.append(f"Epoch {t['epochs'][-1]['seconds']:.2f} s vs torch CUDA {c['epochs'][-1]['seconds']:.2f} s "
                   f"({t['epochs'][-1]['seconds'] / c['epochs'][-1]['seconds']:.1f}x, target 1.5x); peak memory "
                   f"{t['peak_memory_bytes'] / 2**20:.0f} MiB vs {c['peak_memory_bytes'] / 2**20:.0f} MiB "
                   f"({t['peak_memory_bytes'] / c['peak_memory_bytes']:.2f}x, target 1.2x); accuracy "
                   f"{t['epochs'][-1]['test_accuracy']:.3f} vs {c['epochs'][-1]['test_accuracy']:.3f}; {t['cpu_ops']} CPU ops.")
    k = next((x for x in r["runs"] if x["peer"] == "tvk-compiled" and "epochs" in x), None)
    if t and k:
        line = (f"Compiled (torchvk.compile): epoch {k['epochs'][-1]['seconds']:.2f} s, step {k['step_ms_median']:.2f} ms "
                f"vs eager {t['step_ms_median']:.2f} ms")
        if c and c.get("step_ms_median"):
            line += f" and torch CUDA {c['step_ms_median']:.2f} ms ({k['step_ms_median'] / c['step_ms_median']:.1f}x)"
        out.append(line + f"; accuracy {k['epochs'][-1]['test_accuracy']:.3f}, {k.get('cpu_ops')} CPU ops.")
    if failed:
        out.append(f"{failed['peer']} failed: {failed['error']}.")
    return out


def low_vram(r) -> list[str]:
    out = []
    if r["results"]:
        clear = all(e["oom_errors_clear"] and e["usable_after_every_oom"] for e in r["results"])
        fits = all(e["smallest_cap_that_trains"] for e in r["results"])
        out.append(f"Answer: every setup trains under the caps tried (from {r['caps_tried'][0]}) **{'yes' if fits else 'no'}**; "
                   f"a too-small cap gives a clear error and the runtime keeps working **{'yes' if clear else 'no'}**.")
    for e in r["results"]:
        line = f"{e['model']} batch {e['batch']}: trains under a {e['smallest_cap_that_trains']} cap"
        if e.get("peak_vs_cuda"):
            line += f", peak {e['tvk_peak_bytes'] / 2**20:.0f} MiB = {e['peak_vs_cuda']:.2f}x torch CUDA's"
        line += (f"; {sum(1 for c in e['caps'] if not c['trained'])} smaller caps gave a clear torch.OutOfMemoryError "
                 f"(clear: {e['oom_errors_clear']}, runtime usable after: {e['usable_after_every_oom']})")
        out.append(line)
    return out


def _percent(fraction: float) -> str:
    return f"{100 * fraction:.2g}%"


def kernels(r) -> list[str]:
    out = []
    peaks = r.get("roofline")  # absent from results older than the roofline probe
    if peaks:
        kinds = [f"fp32 FMA {peaks['fp32_fma_tflops']:.1f} TFLOP/s"]
        if peaks.get("fp16_fma_tflops"):
            kinds.append(f"fp16 FMA {peaks['fp16_fma_tflops']:.1f}")
        if peaks.get("coopmat_fp16_tflops"):
            kinds.append(f"cooperative matrices fp16 -> fp32 {peaks['coopmat_fp16_tflops']:.0f}")
        kinds.append(f"copy {peaks['copy_gbps']:.0f} GB/s")
        line = "Measured peaks (our probe kernels, `tvk-bench roofline`): " + ", ".join(kinds) + "."
        shares = [f"{key} {_percent(v['tvk'])}" + (f" (CUDA {_percent(v['cuda'])})" if v.get("cuda") else "")
                  for key, v in r.get("of_peak", {}).items() if v.get("tvk")]
        if shares:
            line += " Fraction of the peak of its kind, geometric mean of the rows: " + ", ".join(shares) + "."
        out.append(line)
    conv = [x for x in r["conv2d"] if x.get("tvk_over_cudnn_time")]
    if conv:
        worst = max(conv, key=lambda x: x["tvk_over_cudnn_time"])
        geo = math.exp(sum(math.log(x["tvk_over_cudnn_time"]) for x in conv) / len(conv))
        out.append(f"conv2d on the CIFAR CNN layers: {geo:.2f}x cuDNN's time (geometric mean over forward and both "
                   f"backwards; worst {worst['tvk_over_cudnn_time']:.2f}x, {worst['layer']} {worst['direction']}; target 1.5x).")
    else:
        out.append(f"conv2d on {len(r['conv2d'])} CIFAR CNN layer/direction pairs all match torch CPU "
                   f"(max relative error {max(x['max_rel_err'] for x in r['conv2d']):.1g}); no cuDNN here to compare.")
    bw = [x for x in r["bandwidth"] if x.get("tvk_over_cuda_bandwidth")]
    if bw:
        out.append("Bandwidth vs torch CUDA: " + ", ".join(f"{x['op']} {x['tvk_over_cuda_bandwidth']:.2f}x" for x in bw)
                   + " (target 0.85x).")
    g = r.get("graph_replay", {}).get("kernels_to_replay_us")
    if g:
        out.append("Replaying a captured graph costs " + ", ".join(f"{us:.0f} us for {n} kernels" for n, us in g.items())
                   + " of host time (compiled-mode target: under 50 us, independent of op count).")
    sweep = r.get("gemm_sweep")
    if sweep:
        parts = []
        for dtype, sm in sweep["summary"].items():
            g = sm["geomean_tvk_over_cuda_time"]
            parts.append(f"{dtype} {g:.2f}x cuBLAS's time (geometric mean of {sm['count']})" if g else
                         f"{dtype}: {sm['count']} GEMMs match numpy (max relative error {sm['max_rel_err']:.1g})")
        line = "GEMM sweep (seeded, all layouts, batched and not, none in the tuning suites): " + "; ".join(parts)
        if sweep["worst"]:
            line += "; worst " + ", ".join(f"{w['label']} {w['dtype']} {w['tvk_over_cuda_time']:.1f}x"
                                           for w in sweep["worst"][:3])
        out.append(line + ".")
    conv_sweep = r.get("conv_sweep")  # absent from results older than the sweep
    if conv_sweep:
        sm = conv_sweep["summary"]["float32"]  # the sweep is fp32 only
        g = sm["geomean_tvk_over_cudnn_time"]
        line = ("conv sweep (ResNet, VGG, MobileNetV2, UNet layers, forward and both backwards, none in the tuning "
                "suites): " + (f"fp32 {g:.2f}x cuDNN's time (geometric mean of {sm['count']})" if g else
                               f"fp32: {sm['count']} layer/direction pairs match torch CPU "
                               f"(max relative error {sm['max_rel_err']:.1g})"))
        if conv_sweep["worst"]:
            line += "; worst " + ", ".join(f"{w['label']} {w['direction']} {w['tvk_over_cudnn_time']:.1f}x"
                                           for w in conv_sweep["worst"][:3])
        out.append(line + ".")
    real = r.get("model_shapes")  # absent from results older than the recorded suites
    if real:
        parts = [f"{key} {v['weighted']:.2f}x ({v['count']} rows)" for key, v in real["summary"].items() if v.get("weighted")]
        if parts:
            split = ", ".join(f"{key} {_fmt(v['tuned'])}x / {_fmt(v['untuned'])}x" for key, v in real["summary"].items()
                              if v.get("weighted"))
            out.append("At the shapes real models spend their training steps in (the heaviest GEMMs and convolutions of "
                       "the recorded suites, tvk_kernels/tune/suites/), tvk's time over cuBLAS's / cuDNN's, geometric mean "
                       "weighted by each shape's share of a step: " + ", ".join(parts) + "; shapes in the tuner's default "
                       "suite / not in it: " + split + ".")
    for a in r.get("sdpa", []):
        if a.get("tvk_over_cuda_fwd_bwd"):
            out.append(f"Fused attention (SDPA, batch {a['batch']}, {a['heads']} heads, seq {a['seq']}, head {a['head']}, "
                       f"{a['dtype']}): forward {a['tvk_fwd_s'] * 1e3:.2f} ms ({a['tvk_over_cuda_fwd']:.1f}x torch CUDA's), "
                       f"forward+backward {a['tvk_fwd_bwd_s'] * 1e3:.1f} ms ({a['tvk_over_cuda_fwd_bwd']:.1f}x).")
    ls = r.get("attention_long_sequence")
    if ls and ls.get("step_s"):
        out.append(f"A TransformerEncoderLayer training step at seq {ls['seq']} runs under a "
                   f"{ls['memory_limit_bytes'] >> 20} MiB cap in {ls['step_s'] * 1e3:.1f} ms, peak "
                   f"{ls['peak_bytes'] / 2**20:.0f} MiB (its fp32 scores alone would be "
                   f"{ls['scores_bytes_if_materialised'] >> 20} MiB).")
    o = r["per_op_overhead"]
    line = f"Host time per small eager op: tvk {o['tvk_us']:.0f} us"
    if o.get("torch_cuda_us"):
        line += f", torch CUDA {o['torch_cuda_us']:.1f} us ({o['tvk_over_cuda']:.1f}x, target 1.5x)"
    out.append(line + ".")
    return out


def models(r) -> list[str]:
    modes = [m for m in next(iter(r["tvk"].values())) if m != "cpu_ops"]
    against = ("torch.compile and torchvk.compile against inductor, AMP against torch's AMP"
               if "inductor" in r.get("peer_modes", []) else "every mode against eager")
    out = [f"Training steps of {len(r['tvk'])} third-party models (Hugging Face transformers, timm, torchvision; random "
           f"init, bench sizes in torchvk/experiments/zoo_models.py) on tvk beside {r['peer']}, each in its own process "
           f"(`tvk-bench models`). tvk's wall time of a step over the peer's ({against}; GPU time over the peer's GPU "
           "time in brackets, both from kernel timestamps):", "",
           "| model | " + " | ".join(modes) + " | tvk CPU ops |", "|---|" + "---|" * (len(modes) + 1)]
    ratios = []
    for name, res in r["tvk"].items():
        cells = []
        for mode in modes:
            x = res[mode]
            if "error" in x:
                cells.append("fails: " + x["error"][:60].replace("|", "/"))
                continue
            vs = x["vs"]
            cells.append(f"{_fmt(vs['wall_ratio'])}x ({_fmt(vs['gpu_ratio'])}x)")
            if vs.get("wall_ratio"):
                ratios.append(vs["wall_ratio"])
        out.append(f"| {name} | " + " | ".join(cells) + f" | {res.get('cpu_ops')} |")
    if ratios:
        out += ["", f"tvk is slower than the peer in {sum(v > 1 for v in ratios)} of {len(ratios)} model x mode runs "
                    f"(from {min(ratios):.2f}x to {max(ratios):.2f}x its wall time)."]
    return out


def eager_host_time(r) -> list[str]:
    runs = r["runs"]
    tvk = runs["tvk"]
    others = [name for name in runs if name not in ("tvk", "torch cuda")]
    header = ["op", "tvk us", "tvk / no-op floor"] + [f"{name} us" for name in others] + \
        (["torch CUDA us", "tvk / torch CUDA"] if "torch cuda" in runs else [])
    out = [f"Host time per small eager op (`python benchmarks/eager_host_time.py`: {r.get('repeats', 'best of 3 processes x 7 rounds x 1000 calls')}), "
           f"beside the floor of any Python backend, a no-op `__torch_dispatch__` subclass making "
           f"its output ({_fmt(tvk['floor'])} us, same process):", "",
           "| " + " | ".join(header) + " |", "|---|" + "---|" * (len(header) - 1)]
    for op in r["mix"]:
        cells = [_fmt(tvk[op]), f"{_fmt(tvk[op] / tvk['floor'])}x"] + [_fmt(runs[name][op]) for name in others]
        if "torch cuda" in runs:
            cells += [_fmt(runs["torch cuda"][op]), f"{_fmt(tvk[op] / runs['torch cuda'][op])}x"]
        out.append(f"| {op} ({tvk['ops per call'][op]} aten op{'s' if tvk['ops per call'][op] > 1 else ''}) | "
                   + " | ".join(cells) + " |")
    return out


def eager_host_stages(r) -> list[str]:
    res = r["result"]
    calls = ", ".join(f"{name} {_fmt(us)} us" for name, us in res["one Vulkan call"].items())
    submits = ", ".join(f"{every} {_fmt(us)} us" for every, us in res["a + b by early-submit interval"].items())
    lines = [f"Where an eager op's host time goes (`python benchmarks/eager_host_stages.py`: {r['repeats']}; "
             "the statement through torch, its aten calls handed to our dispatcher directly, and their repeats "
             "called directly, each with the Vulkan commands recorded and discarded). Each Vulkan call of a dispatch "
             f"alone: {calls}. a + b by early-submit interval (dispatches; 0 = off): {submits}; one submit with its "
             f"op {_fmt(res['one a + b and a submit'])} us; no-op dispatch floor {_fmt(res['floor'])} us.", "",
             "| case | aten calls | torch us | torch (entry, autograd, optimizer) | our dispatcher | our op code "
             "(Python) | Vulkan recording and submits |", "|---|---|---|---|---|---|---|"]
    for name, c in res["cases"].items():
        cells = [c["torch"], c["torch"] - c["our dispatcher"],
                 c["our dispatcher, commands discarded"] - c["our op code, commands discarded"],
                 c["our op code, commands discarded"], c["torch"] - c["torch, commands discarded"]]
        lines.append(f"| {name} | {c['aten calls']} | " + " | ".join(_fmt(x) for x in cells) + " |")
    return lines


def eager_step_ab(r) -> list[str]:
    this, other = r["trees"][:2]
    cuda = "torch cuda" in r["trees"]  # --cuda: torch CUDA's eager step in each round too

    def run(x):  # a run's step, and the SM clock over its steps where --clocks sampled it
        return _fmt(x["median_ms"]) + (f" ({x['sm_mhz']:.0f} MHz)" if x.get("sm_mhz") else "")

    lines = [f"Eager training steps (`python benchmarks/eager_step_ab.py`: {r['rounds']} runs per tree, the trees "
             f"alternating, each run a fresh process and the median of its steps 5 to {r['steps']}), {this} beside "
             f"{other}{' and torch CUDA' if cuda else ''}: {r['unit']}", "",
             f"| model | {this} runs | {other} runs |{' torch cuda runs |' if cuda else ''} {this} median (min) | "
             f"{other} median (min) | median ratio |{' median / torch cuda |' if cuda else ''}",
             "|---|---|---|---|---|---|" + ("---|---|" if cuda else "")]
    for model in r["runs"][this]:
        trees = (this, other, "torch cuda") if cuda else (this, other)
        runs = [", ".join(run(x) for x in r["runs"][tree][model]) for tree in trees]
        med = [f"{_fmt(r['summary'][t][model]['median_ms'])} ({_fmt(r['summary'][t][model]['min_ms'])})"
               for t in (this, other)]
        ratio = r["summary"][this][model]["median_ms"] / r["summary"][other][model]["median_ms"]
        row = f"| {model} | {' | '.join(runs)} | {med[0]} | {med[1]} | {_fmt(ratio)}x |"
        if cuda:
            row += f" {_fmt(r['summary'][this][model]['median_ms'] / r['summary']['torch cuda'][model]['median_ms'])}x |"
        lines.append(row)
    return lines


def amp_step_ab(r) -> list[str]:
    this, other = r["trees"]
    lines = [f"AMP (autocast float16 + GradScaler) and float32 eager training steps of zoo models at {r.get('size', 'bench')} size "
             f"(`python benchmarks/amp_step_ab.py`: {r['rounds']} run(s) per tree, each a fresh process; GPU ms of one "
             f"profiled step, wall ms the median of {r['steps']}), {this} beside {other}. The issue's target: the AMP "
             "step at most 0.6x the float32 one.", "",
             f"| model | tree | fp32 GPU ms | AMP GPU ms | AMP / fp32 GPU | AMP / fp32 wall | AMP kernels | AMP copy kernels "
             "(GPU ms) |", "|---|---|---|---|---|---|---|---|"]
    for model in r["models"]:
        for tree in (this, other):
            s = r["summary"][tree][model]
            lines.append(f"| {model} | {tree} | {_fmt(s['eager']['gpu_ms'])} | {_fmt(s['amp']['gpu_ms'])} | "
                         f"{_fmt(s['amp']['gpu_ms'] / s['eager']['gpu_ms'])}x | "
                         f"{_fmt(s['amp']['wall_ms'] / s['eager']['wall_ms'])}x | {s['amp']['kernels']:.0f} | "
                         f"{s['amp']['copies']:.0f} ({s['amp']['copy_ms']:.2f}) |")
    return lines


def sdpa_dtypes(r) -> list[str]:
    lines = [f"Fused attention (causal, forward + backward) in float16 beside float32, GPU time of its kernels "
             f"(`python benchmarks/sdpa_dtypes.py`: median of {r['repeats']} profiled repeats after a spin-up):", ""]
    rows = {}
    for x in r["results"]:
        rows.setdefault((tuple(x["shape"]), x["strided"]), {})[x["dtype"]] = x["attention_ms"]
    for (shape, strided), ms in rows.items():
        lines.append(f"- {shape} (batch, heads, length, head), q/k/v {'views of one projection' if strided else 'contiguous'}: "
                     f"float32 {_fmt(ms.get('float32'))} ms, float16 {_fmt(ms.get('float16'))} ms "
                     f"({_fmt(ms['float16'] / ms['float32']) if ms.get('float16') and ms.get('float32') else '-'}x)")
    return lines


def zoo(r) -> list[str]:
    ok = [x for x in r["runs"] if x["device"] == "tvk" and "error" not in x]
    out = [f"{r['tvk_trained']} train on tvk with 0 CPU ops (eager, torchvk.compile, torch.compile)."
           if all(x.get("cpu_ops") == 0 for x in ok) else f"{r['tvk_trained']} train on tvk."]
    peer = {(x["model"], x["mode"]): x for x in r["runs"] if x["device"] == "torch cuda" and x.get("step_ms_median")}
    ratios = []
    for x in ok:
        p = peer.get((x["model"], "eager"))
        if p and x.get("step_ms_median"):
            ratios.append((x["model"], x["mode"], x["step_ms_median"] / p["step_ms_median"]))
    for mode in dict.fromkeys(m for _, m, _ in ratios):
        rs = [(n, q) for n, m, q in ratios if m == mode]
        geo = math.exp(sum(math.log(q) for _, q in rs) / len(rs))
        worst = max(rs, key=lambda t: t[1])
        out.append(f"{mode}: step time {geo:.2f}x torch CUDA eager's (geometric mean over {len(rs)} models; "
                   f"worst {worst[0]} {worst[1]:.1f}x).")
    inductor = {x["model"]: x for x in r["runs"] if x["device"] == "torch cuda" and x["mode"] == "inductor"
                and x.get("step_ms_median")}
    if inductor:  # the Hugging Face models: torch.compile on both sides
        parts = []
        for name, peer_run in inductor.items():
            mine = next((x for x in ok if x["model"] == name and x["mode"] == "torch.compile"), None)
            eager = peer.get((name, "eager"))
            if mine and mine.get("step_ms_median"):
                parts.append(f"{name} {mine['step_ms_median']:.1f} ms vs inductor {peer_run['step_ms_median']:.1f} ms "
                             f"({mine['step_ms_median'] / peer_run['step_ms_median']:.1f}x; CUDA eager "
                             f"{eager['step_ms_median']:.1f} ms)" if eager else "")
        out.append("Hugging Face models under torch.compile (tvk backend vs inductor on CUDA, step wall time, "
                   "median): " + "; ".join(p for p in parts if p) + ".")
    timed = [x for x in ok if x.get("benchmark_shapes")]
    if timed:
        shapes, seconds = sum(x["benchmark_shapes"] for x in timed), sum(x["benchmark_s"] for x in timed)
        out.append(f"Benchmark mode's first sight: {shapes} shapes timed in {seconds:.1f} s over {len(timed)} models "
                   f"({seconds / shapes:.2f} s a shape, compiles included).")
    return out


def kernel_profile(r) -> list[str]:
    if "summary" not in r:  # the format before the zoo's models (up to 7607cdc)
        return []
    names = {"eager": "eager", "benchmark": "eager with benchmark mode", "compiled": "torchvk.compile"}
    out = []
    for mode, s in r["summary"].items():
        if s.get("geomean_ratio") is None:
            continue
        ratios = {w["model"]: w["ratio"][mode] for w in r["workloads"] if (w.get("ratio") or {}).get(mode)}
        worst = sorted((n for n in ratios if n in s["above_target"]), key=ratios.get, reverse=True)[:3]
        out.append(f"{names.get(mode, mode)}: {s['geomean_ratio']:.2f}x torch CUDA's GPU kernel time (geometric mean "
                   f"over {s['models']} zoo models; target {s['target']}x: "
                   f"**{'yes' if s['geomean_ratio'] <= s['target'] else 'not yet'}**; "
                   f"{len(s['above_target'])} above it, worst "
                   + ", ".join(f"{n} {ratios[n]:.1f}x" for n in worst) + ").")
    return ["GPU kernel time of one training step, per model (kernel_profile.py)."] + out if out else []


def distributed(r) -> list[str]:
    runs = {x["backend"]: x for x in r["runs"]}
    t = runs.get("tvk", {})
    if "error" in t:
        return [f"DDP on the tvk backend failed: {t['error'][:120]}"]
    line = (f"DDP, {r['world']} processes, {r['workload']}: tvk backend {t['step_ms']:.1f} ms a step, "
            f"25 MiB all_reduce {t['all_reduce_25MiB_ms']:.1f} ms")
    peer = next((x for k, x in runs.items() if k != "tvk" and "step_ms" in x), None)
    if peer:
        line += (f"; torch CUDA with {peer['backend']} {peer['step_ms']:.1f} ms and "
                 f"{peer['all_reduce_25MiB_ms']:.1f} ms")
    return [line + "."]


def ablations(r, matmul_result=None) -> list[str]:
    res = r["results"]
    tv = res["tuned_vs_default"]
    fams = sorted({x["family"] for x in tv})
    per = []
    for f in fams:
        xs = [x["speedup"] for x in tv if x["family"] == f]
        per.append(f"{f} {math.exp(sum(math.log(s) for s in xs) / len(xs)):.2f}x")
    out = ["Tuned vs default, geometric mean per family: " + ", ".join(per) + "."]
    d, f = res["deferred_vs_blocking_ms"], res["fused_vs_per_tensor_optimizer_ms"]
    out.append(f"Deferred submission: {d['blocking'] / d['deferred']:.2f}x faster training step than blocking "
               f"({d['deferred']:.1f} vs {d['blocking']:.1f} ms); fused optimizer {f['per_tensor'] / f['fused']:.2f}x "
               f"faster step than per-tensor ({f['fused']:.1f} vs {f['per_tensor']:.1f} ms).")
    for m in res["matmul_precision_and_coopmat"]:
        line = f"matmul {m['n']}: fp16 {m['fp16_over_fp32_speedup']:.1f}x faster than fp32 ({m['fp16_kernel']})"
        if m.get("coopmat_over_tiled_speedup"):
            line += f"; cooperative matrix {m['coopmat_over_tiled_speedup']:.1f}x faster than the tiled fp16 kernel"
        out.append(line + ".")
    s = res["subgroup_vs_shared_reduction"]
    if s.get("subgroup_speedup"):
        out.append(f"Subgroup vs shared-memory sum of {s['n']} floats: {s['subgroup_speedup']:.2f}x.")
    c = res["pipeline_cache_cold_vs_warm"]
    if "cold" in c:
        out.append(f"Compiling every pipeline of an MNIST CNN training step: {c['cold']['compile_s']:.2f} s cold "
                   f"({c['cold']['pipelines']} pipelines), {c['warm']['compile_s']:.3f} s warm (targets 2 s / 0.2 s).")
    if "eager_vs_graph_replay_ms" in res:
        g = res["eager_vs_graph_replay_ms"]
        out.append(f"Whole-step replay (torchvk.graph, {g['kernels']} kernels): {g['replay']:.2f} ms per step vs "
                   f"{g['eager']:.2f} ms eager ({g['eager'] / g['replay']:.2f}x).")
    if "eager_vs_compiled_ms" in res:
        e = res["eager_vs_compiled_ms"]
        speed = e["eager"] / e["compiled"]
        out.append(f"Eager vs compiled (torchvk.compile, fused and replayed): {e['compiled']:.2f} ms per step vs "
                   f"{e['eager']:.2f} ms eager: **{speed:.2f}x** (target 2x at batch 64: "
                   f"**{'yes' if speed >= 2 else 'not yet'}**).")
        if "torch_compile" in e:
            out.append(f"The same step through torch.compile(backend='tvk') (Dynamo in front of the same compiled "
                       f"path): {e['torch_compile']:.2f} ms ({e['eager'] / e['torch_compile']:.2f}x eager).")
        b = res.get("compiled_step_breakdown")
        if b:
            gpu = f", GPU kernel time {b['gpu_kernels_ms']:.2f} ms" if b.get("gpu_kernels_ms") else ""
            out.append(f"Compiled step breakdown: {b['host_issue_ms']:.2f} ms of host time to issue it "
                       f"({b['replayed_kernels']} kernels replayed from two recordings, loss and optimizer eager), "
                       f"{b['step_ms']:.2f} ms with its sync{gpu}.")
        cc = res.get("compiled_first_step_cold_vs_warm", {})
        if "cold" in cc:
            line = (f"First compiled MNIST CNN step (trace, compile, run): {cc['cold']['first_step_s']:.2f} s with "
                    f"empty caches, {cc['warm']['first_step_s']:.2f} s warm (target 2 s cold: "
                    f"**{'yes' if cc['cold']['first_step_s'] <= 2 else 'not yet'}**)")
            c = cc["cold"]
            if c.get("prefetch_wall_s"):  # pipelines built in parallel: compile_s sums over threads
                line += (f"; of the cold step, tracing {c['trace_s']:.2f} s and building {c['pipelines']} pipelines "
                         f"{c['prefetch_wall_s']:.2f} s (wall time), torch's lazy imports "
                         f"({c['torch_lazy_imports_s']:.2f} s) timed apart")
            elif "trace_s" in c:
                line += (f"; of the cold step, tracing {c['trace_s']:.2f} s and compiling "
                         f"{c['pipelines']} pipelines {c['compile_s']:.2f} s, torch's lazy imports "
                         f"({c['torch_lazy_imports_s']:.2f} s) timed apart")
            out.append(line + ".")
            if "spirv_s" in cc["cold"]:  # runs before parallel pipeline builds lack these
                out.append(_cold_compile_split(cc, res))
    else:
        out.append(f"Eager vs compiled: {res['eager_vs_compiled']}.")
    if "installed_size" in res:
        z = res["installed_size"]
        out.append(f"Installed size without torch: TorchVK {z['torchvk_bytes'] / 2**20:.2f} MiB (target 5 MiB), "
                   f"{z['total_without_torch_bytes'] / 2**20:.1f} MiB with numpy, vulkan, cffi and tqdm.")
    probe = res.get("clock_probe_fp32_matmul_us")
    if probe:
        ref = None
        if matmul_result:
            ref = next((x["gpu_s"] * 1e6 for x in matmul_result["results"]
                        if x["n"] == probe["n"] and x["dtype"] == "float32" and x.get("gpu_s")), None)
        line = (f"Clock probe (fp32 {probe['n']}^3 matmul): {probe['start']:.0f} us at the start of this run, "
                f"{probe['end']:.0f} us at its end")
        if ref:
            line += f"; experiment 2 timed it at {ref:.0f} us"
            if probe["start"] > 2 * ref:
                line += (" - the GPU ran this run's kernels at a reduced clock (the H200 idle-clock effect in "
                         "docs/design-notes.md, 11), so its kernel-time rows understate the kernels; its step-time "
                         "ratios compare like with like")
            elif probe["end"] > 2 * ref:
                line += (" - full clock at the start, a reduced one by the end (the H200 idle-clock effect, "
                         "docs/design-notes.md 11); kernel rows are timed before the training-step ablations "
                         "(in runs before this check they were not, and understate the kernels)")
        out.append(line + ".")
    elif r["environment"].get("gpu_clocks") is None and "NVIDIA" in r["environment"]["device"]:
        out.append("Caveat: this run did not record GPU clocks; later checks on the same H200 found the driver at its "
                   "idle clock after host-bound training steps, which slows the kernels timed afterwards (the fp32 "
                   "matmul rows above disagree with experiment 2 for that reason). Rerun before relying on them.")
    return out


def _cold_compile_split(cc: dict, res: dict) -> str:
    """Where the cold first compiled step's pipeline time went, and the serial / unoptimized-SPIR-V runs."""
    c = cc["cold"]
    line = (f"Its pipeline builds, summed over the build threads: {c['compile_s']:.2f} s (glslc {c['spirv_s']:.2f} s, "
            f"driver {c['driver_s']:.2f} s)")
    serial = res.get("compiled_first_step_cold_serial", {})
    if "cold" in serial:
        line += f"; built one by one, the cold step took {serial['cold']['first_step_s']:.2f} s"
    plain = res.get("compiled_first_step_cold_no_spirv_opt", {})
    if "cold" in plain:
        line += (f"; without glslc -O (TVK_SPIRV_OPT=0) it took {plain['cold']['first_step_s']:.2f} s "
                 f"(glslc {plain['cold']['spirv_s']:.2f} s, driver {plain['cold']['driver_s']:.2f} s)")
    unshipped = res.get("compiled_first_step_cold_no_shipped", {})
    if "cold" in unshipped:
        line += (f"; the cold step above read the wheel's precompiled kernels (shipped/spirv); compiling every "
                 f"module instead (TVK_USE_SHIPPED_KERNELS=0) it took {unshipped['cold']['first_step_s']:.2f} s "
                 f"(glslc {unshipped['cold']['spirv_s']:.2f} s)")
    return line + "."


SECTIONS = [("vector-add", "1. Vector add", vector_add), ("matmul", "2. Matmul", matmul),
            ("mnist", "3. MNIST classifier", mnist), ("cifar10", "4. CIFAR-10 CNN", cifar10),
            ("low-vram", "5. Little GPU memory", low_vram), ("ablations", "6. Ablations", ablations),
            ("kernels", "Kernels beside torch CUDA", kernels), ("models", "Real models: training steps", models),
            ("eager_host_time", "Host time per eager op", eager_host_time),
            ("eager_host_stages", "Eager host time by layer", eager_host_stages),
            ("eager_step_ab", "Eager steps beside an earlier tree", eager_step_ab),
            ("amp_step_ab", "AMP steps beside float32 and an earlier tree", amp_step_ab),
            ("sdpa_dtypes", "Fused attention by dtype", sdpa_dtypes),
            ("zoo", "Model zoo", zoo),
            ("kernel_profile", "Training-step GPU time", kernel_profile),
            ("distributed", "Data-parallel training (torch.distributed)", distributed)]


# experiments whose script writes its own table beside its JSON (NAME.md): the README shows that table under a
# title, with the command that made it; "summary" shows only the table's last line (a long sweep's verdict)
OWN_TABLES = [("packed_attention_ab", "Packed fp16 attention against fp32 arithmetic, cooperative matrices off "
               "(RDNA1's stand-in)", "benchmarks/packed_attention_ab.py", "table"),
              ("packed_conv_ab", "Packed fp16 convolutions against fp32 arithmetic, cooperative matrices off",
               "benchmarks/packed_conv_ab.py", "summary"),
              ("bandwidth_rows", "Memory-bound kernels beside torch CUDA", "benchmarks/bandwidth_rows.py", "table"),
              ("attention_vs_torch", "fp16 fused attention beside torch CUDA's SDPA, cooperative matrices and not",
               "benchmarks/attention_vs_torch.py", "table"),
              ("conv_vs_cudnn", "fp16 conv2d beside cuDNN's, cooperative matrices and not", "benchmarks/conv_vs_cudnn.py",
               "table"),
              ("cold_compile", "First step with empty caches", "benchmarks/cold_compile.py", "table"),
              ("rank_check", "The static cost model's order against measured times",
               "python -m tvk_kernels.tune.rank_check", "table")]


def own_table(device_dir: Path, name: str, how: str) -> list[str]:
    """The experiment's own table (NAME.md without its title and environment lines)."""
    lines = (device_dir / f"{name}.md").read_text().strip().splitlines()
    body = [line for line in lines[1:] if not line.startswith(("NVIDIA", "llvmpipe", "Null", "AMD")) or "|" in line]
    while body and not body[0].strip():
        body.pop(0)
    return [body[-1]] if how == "summary" else body


def rdna1_table(configs: Path) -> list[str]:
    lines = ["| driver | family | bucket | params | VGPRs | LDS B | waves/SIMD | spills |", "|---|---|---|---|---|---|---|---|"]
    for path in sorted(configs.glob("rdna1--*.json")):
        data = json.loads(path.read_text())
        for fam, entry in sorted(data["families"].items()):
            for bucket, b in sorted(entry["buckets"].items()):
                st = b["provenance"]["compiler_stats"]
                params = ", ".join(f"{k}={v}" for k, v in b["params"].items())
                lines.append(f"| {data['device']['driver']} | {fam} | {bucket} | {params} | {st['VGPRs']} | {st['LDS size']} "
                             f"| {b['provenance']['occupancy_waves_per_simd']} | {st['Spilled VGPRs'] + st['Spilled SGPRs']} |")
    return lines if len(lines) > 2 else []


def build(results: Path, configs: Path) -> str:
    out = [START, "## Results", "",
           "Generated by `python -m tvk_kernels.bench.report --write README.md` from `benchmarks/results/`. "
           "Rerun an experiment with `tvk-bench NAME --device 0 --out benchmarks/results/<device>`.", ""]
    for device_dir in sorted(p for p in results.iterdir() if p.is_dir()):
        found = _load(device_dir)
        if not found:
            continue
        first = next(iter(found.values()))
        out += [f"### {device_dir.name}: {_where(first)}", ""]
        for key, title, fn in SECTIONS:
            if key in found:
                lines = fn(found[key], found.get("matmul")) if key == "ablations" else fn(found[key])
                if key in ("mnist", "low-vram"):
                    out += [f"**{title}.** {_stamp(found[key])}"] + [f"- {line}" for line in lines]
                elif key in ("models", "eager_host_time", "eager_host_stages", "eager_step_ab", "amp_step_ab", "sdpa_dtypes"):
                    # a paragraph, then its table or list
                    out += [f"**{title}.** {lines[0]} {_stamp(found[key])}"] + lines[1:]
                else:
                    out.append(f"**{title}.** " + " ".join(lines) + f" {_stamp(found[key])}")
                out.append("")
        for key, title, command, how in OWN_TABLES:
            if key in found and (device_dir / f"{key}.md").exists():
                out += [f"**{title}.** (`{command}`) {_stamp(found[key])}", ""] + own_table(device_dir, key, how) + [""]
    table = rdna1_table(configs)
    if table:
        out += ["### RDNA1 (RX 5600 XT) configs shipped, statically tuned and model-ranked", "",
                "Compiled for Navi 10 by ACO on Mesa's null RADV device, ranked by the cost model in "
                "`tvk_kernels/tune/cost_model.py` with the card's numbers (`tuning/machines.json`); never run on the "
                "card. An owner replaces them with measured ones: `tvk-tune --device 0`. "
                "`python -m tvk_kernels.tune.rank_check` checks the model's order against measured times on a GPU "
                "at hand.", ""] + table + [""]
    out.append(END)
    return "\n".join(out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tvk_kernels.bench.report", description=__doc__)
    ap.add_argument("--results", default="benchmarks/results")
    ap.add_argument("--write", default=None, help="replace the Results section of this markdown file")
    ap.add_argument("--plots", action="store_true", help="redraw every result's PNG from its JSON")
    args = ap.parse_args(argv)
    if args.plots:
        for folder in sorted(p for p in Path(args.results).iterdir() if p.is_dir()):
            for name, payload in _load(folder).items():
                plot(payload, folder)
    text = build(Path(args.results), data_dir("tuned_configs"))
    if args.write:
        path = Path(args.write)
        doc = path.read_text()
        if START in doc:
            doc = re.sub(re.escape(START) + ".*?" + re.escape(END), lambda _: text, doc, flags=re.S)
        else:
            doc = doc.rstrip() + "\n\n" + text + "\n"
        path.write_text(doc)
    else:
        print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
