"""Experiment: training steps of real third-party models (`tvk-bench models`): the zoo's Hugging Face,
timm and torchvision entries (zoo_models.py, `library` set; random init, nothing downloaded).

On tvk, each model in every mode of MODES: eager, torch.compile(backend="tvk"), torchvk.compile
(model and loss) and AMP (eager under autocast float16 with a GradScaler). The peer is torch on the
machine's own GPU (CUDA or ROCm: eager, inductor, AMP) or, without one, torch CPU (eager), each
model in a fresh process without torchvk. Per model x mode: the median wall time of a step, the GPU
time of one step (tvk: torchvk.profiler's kernel timestamps; torch: torch.profiler's kernel times)
and its top kernels, the step-0 loss beside the peer's. Before the timed steps every case runs steps
for at least SPIN_UP_SECONDS (compiled modes: the trace, record and first replays too), so the GPU's
clocks are up for each case, not once (design note 11). An eager step is host-bound: its kernels
run with the GPU idle between them, at clocks that sink, so each profiled step follows that long of
GPU-bound load (matmuls back to back) and the least GPU time of PROFILED_STEPS such steps is kept,
on both sides (benchmarks/amp_step_ab.py found the same kernel up to 4x slower otherwise).

    python model_bench.py '{"device": "cuda", "names": ["hf_gpt2"], "modes": ["eager"], "size": "bench", "steps": 5}'
    -> one JSON line, {name: {mode: result}} (how run() starts a peer)
"""
from __future__ import annotations

import importlib.util
import json
import sys
import time
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
MODES = ("eager", "torch.compile", "torchvk.compile", "amp")
GPU_PEER_MODES = ("eager", "inductor", "amp")
SPIN_UP_SECONDS = 0.3  # tvk_kernels/bench/cuda_timer.py's: the same spin-up before every case
PROFILED_STEPS = 3  # each after SPIN_UP_SECONDS of GPU-bound load; the least GPU time is kept
TOP_KERNELS = 5

if __package__:
    from . import zoo, zoo_models
else:  # a peer process: this file runs as a script, without the torchvk package (zoo.py, loaded so, drops
    # this folder from sys.path, as its modules would shadow libraries')
    _spec = importlib.util.spec_from_file_location("tvk_peer_zoo", HERE / "zoo.py")
    zoo = sys.modules[_spec.name] = importlib.util.module_from_spec(_spec)
    _spec.loader.exec_module(zoo)
    zoo_models = zoo.zoo_models


def _top(durations: dict) -> list[dict]:
    ranked = sorted(durations.items(), key=lambda kv: -kv[1][0])[:TOP_KERNELS]
    return [{"kernel": k[:80], "gpu_ms": ms, "count": n} for k, (ms, n) in ranked]


def _gpu_step_tvk(step, x, y) -> dict:
    import torchvk.profiler  # lazy: this file also runs as a peer script, without torchvk

    with torchvk.profiler.profile() as prof:
        step(x, y)
        torch.tvk.synchronize()
    durations: dict = {}
    for k in prof.kernels:
        ms, n = durations.get(k.name, (0.0, 0))
        durations[k.name] = (ms + k.duration_us / 1e3, n + 1)
    return {"gpu_ms": sum(k.duration_us for k in prof.kernels) / 1e3, "kernels": len(prof.kernels),
            "top_kernels": _top(durations)}


def _gpu_step_torch(step, x, y, device: str) -> dict:
    if not device.startswith("cuda"):
        return {}  # torch CPU: no GPU time
    from torch.profiler import ProfilerActivity, profile  # lazy: the GPU peer only

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        step(x, y)
        torch.cuda.synchronize()
    durations: dict = {}
    kernels = 0
    for event in prof.events():
        if event.device_type == torch.autograd.DeviceType.CUDA:
            ms, n = durations.get(event.name, (0.0, 0))
            durations[event.name] = (ms + event.time_range.elapsed_us() / 1e3, n + 1)
            kernels += 1
    return {"gpu_ms": sum(ms for ms, _ in durations.values()), "kernels": kernels, "top_kernels": _top(durations)}


def _gpu_load(device: str, seconds: float, n: int) -> None:
    """Matmuls back to back for `seconds` (each batch waited for): the GPU's clocks up, as under a
    GPU-bound workload, before a profiled step."""
    a = torch.randn(n, n, device=device) / n ** 0.5
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        for _ in range(4):
            a = a @ a
        zoo._sync(device)


def _least_gpu_step(step, x, y, device: str, size: str, spin_up: float) -> dict:
    """The GPU time of one step, the least of PROFILED_STEPS steps each after `spin_up` seconds of GPU load
    (one step, without load, where spin_up is 0, as in the quick runs, or the device is the CPU)."""
    loaded = spin_up > 0 and device.startswith(("tvk", "cuda"))
    best = None
    for _ in range(PROFILED_STEPS if loaded else 1):
        if loaded:
            _gpu_load(device, spin_up, 2048 if size == "bench" else 64)
        timed = _gpu_step_tvk(step, x, y) if device.startswith("tvk") else _gpu_step_torch(step, x, y, device)
        if best is None or timed.get("gpu_ms", 0) < best.get("gpu_ms", 0):
            best = timed
    return best


def measure(name: str, device: str, mode: str, size: str, steps: int, spin_up: float) -> dict:
    """One model x mode: losses of the first steps, median wall ms of `steps` steps after the spin-up,
    the GPU time and top kernels of one more step."""
    model, step = zoo.trainer(name, device, mode, size)
    batches = [(x.to(device), y.to(device)) for x, y in zoo_models.batches(name, 3, size)]
    losses, t_end, i = [], time.perf_counter() + spin_up, 0
    first = time.perf_counter()
    while i < 3 or time.perf_counter() < t_end:  # the spin-up (compiled modes: trace, record, replays)
        x, y = batches[i % len(batches)]
        loss = float(step(x, y).item())
        if i < len(batches):
            losses.append(loss)
        if i == 0:
            first = time.perf_counter() - first
        i += 1
    walls = []
    for j in range(steps):
        x, y = batches[j % len(batches)]
        zoo._sync(device)
        t0 = time.perf_counter()
        step(x, y).item()  # a sync point: the step has really run
        walls.append(time.perf_counter() - t0)
    x, y = batches[0]
    gpu = _least_gpu_step(step, x, y, device, size, spin_up)
    walls.sort()
    return {"losses": losses, "step_ms": walls[len(walls) // 2] * 1e3, "first_step_ms": first * 1e3,
            "spin_up_steps": i, **gpu}


def _measure_all(device, names, modes, size, steps, spin_up) -> dict:
    out = {}
    for name in names:
        for mode in modes:
            try:
                out.setdefault(name, {})[mode] = measure(name, device, mode, size, steps, spin_up)
            except Exception as e:  # noqa: BLE001  (a failure is a result: recorded, then the next case)
                out.setdefault(name, {})[mode] = {"error": zoo._error(e)}
    return out


def run_peer(device: str, names, modes, size: str, steps: int, spin_up: float) -> dict:
    """Every model x mode on a torch device, in a fresh process without torchvk: {name: {mode: result}}."""
    from .peer import run_script  # lazy: the package side only (a peer process runs this file as a script)

    spec = {"device": device, "names": list(names), "modes": list(modes), "size": size, "steps": steps,
            "spin_up": spin_up}
    result, error = run_script(Path(__file__), spec)
    if error is not None:
        return {n: {m: {"error": f"torch {device} peer failed: {error[-600:]}"} for m in modes} for n in names}
    return result


def _earlier(out_dir, quick: bool, device_name: str) -> dict:
    """The models.json already in out_dir, if it was measured the same way (size, device): --only adds to it."""
    path = Path(out_dir) / "models.json"
    if not path.exists():
        return {}
    try:
        earlier = json.loads(path.read_text())
    except ValueError:
        return {}  # an unreadable file is replaced, not merged
    same = earlier.get("experiment") == "models" and earlier.get("quick") == quick
    return earlier if same and earlier.get("environment", {}).get("device") == device_name else {}


def _ratio(a, b):
    return a / b if a and b else None


def run(device, out_dir, quick=False, progress=True, names=None) -> dict:
    import torchvk  # lazy: this file also runs as a peer script, without torchvk
    from tvk_kernels.bench.common import environment, md_table, write_result  # lazy: as torchvk

    third_party = zoo_models.third_party()
    unknown = sorted(set(names or ()) - set(third_party))
    if unknown:
        raise ValueError(f"tvk-bench models: no third-party zoo model {unknown}; choose from {', '.join(third_party)}")
    earlier = _earlier(out_dir, quick, device.facts.name) if names else {}  # --only: merged into the models measured before
    names = list(names or (["hf_gpt2", "timm_convnext"] if quick else third_party))
    size, steps, spin_up = ("tiny", 2, 0.0) if quick else ("bench", 9, SPIN_UP_SECONDS)
    gpu_peer = torch.cuda.is_available()
    peer_device, peer_modes = ("cuda", GPU_PEER_MODES) if gpu_peer else ("cpu", ("eager",))
    peer_name = f"torch {'CUDA' if torch.version.hip is None else 'ROCm'}" if gpu_peer else "torch CPU"
    peer = run_peer(peer_device, names, peer_modes, size, steps, spin_up)
    env = environment(device)
    measured_at = {n: {"commit": env["commit"], "date": env["date"]} for n in names}
    tvk = {}
    for k, name in enumerate(names):
        if progress:
            print(f"tvk-bench models: {name} ({k + 1}/{len(names)})", flush=True)
        torchvk.reset_op_counts()
        tvk[name] = _measure_all(f"tvk:{device.index}", [name], MODES, size, steps, spin_up)[name]
        tvk[name]["cpu_ops"] = sum(torchvk.op_counts()["cpu"].values())
    for name in [n for n in earlier.get("tvk", {}) if n not in names]:  # earlier runs' models, kept as they were
        tvk[name], peer[name] = earlier["tvk"][name], earlier["peer_results"].get(name, {})
        measured_at[name] = earlier.get("measured_at", {}).get(name, {"commit": earlier["environment"]["commit"],
                                                                        "date": earlier["environment"]["date"]})
    names = [n for n in third_party if n in tvk] if earlier else names
    tvk, peer = {n: tvk[n] for n in names}, {n: peer[n] for n in names if n in peer}
    rows, summary = [], []
    for name in names:
        reference = peer.get(name, {}).get("eager", {})
        for mode in MODES:
            r = tvk[name][mode]
            peer_mode = {"eager": "eager", "amp": "amp"}.get(mode, "inductor") if gpu_peer else "eager"
            p = peer.get(name, {}).get(peer_mode, {})
            r["vs"] = {"peer_mode": peer_mode, "wall_ratio": _ratio(r.get("step_ms"), p.get("step_ms")),
                       "gpu_ratio": _ratio(r.get("gpu_ms"), p.get("gpu_ms")),
                       "wall_ratio_vs_peer_eager": _ratio(r.get("step_ms"), reference.get("step_ms")),
                       "wall_over_gpu": _ratio(r.get("step_ms"), r.get("gpu_ms")),  # > 1: the host holds the GPU up
                       "step0_loss_gap": (abs(r["losses"][0] - reference["losses"][0])
                                          if r.get("losses") and reference.get("losses") else None)}
            top = ", ".join(f"{t['kernel'][:28]} {t['gpu_ms']:.2f}" for t in r.get("top_kernels", [])[:3])
            rows.append([name, mode, r.get("step_ms"), r.get("gpu_ms"), r["vs"]["wall_over_gpu"], r.get("kernels"),
                         f"{peer_mode}",
                         p.get("step_ms"), p.get("gpu_ms"), r["vs"]["wall_ratio"], r["vs"]["gpu_ratio"],
                         r["vs"]["step0_loss_gap"], r.get("error", top)[:140].replace("|", "/")])
        summary.append([name, zoo_models.ZOO[name].library, tvk[name]["cpu_ops"]] +
                       [tvk[name][m]["vs"]["wall_ratio"] for m in MODES])
    payload = {"experiment": "models", "environment": env, "measured_at": measured_at, "quick": quick, "size": size,
               "steps": steps, "spin_up_s": spin_up, "peer": peer_name, "peer_modes": list(peer_modes),
               "dims": {n: zoo_models.ZOO[n].tiny if quick else zoo_models.ZOO[n].bench for n in names},
               "tvk": tvk, "peer_results": peer,
               "notes": "wall: median of the timed steps, each ending in loss.item(); GPU: one more step, "
                        "tvk from Vulkan timestamps (torchvk.profiler), torch from torch.profiler's kernel times"}
    against = "torch.compile and torchvk.compile against inductor, AMP against AMP" if gpu_peer else "all against eager"
    table = (f"Peer: {peer_name} ({', '.join(peer_modes)}), each model in its own process. tvk / peer wall time of a "
             f"step, per tvk mode ({against}):\n\n"
             + md_table(["model", "library", "tvk CPU ops"] + list(MODES), summary) + "\n\n"
             + md_table(["model", "tvk mode", "tvk ms", "tvk GPU ms", "tvk wall/GPU", "tvk kernels", "peer mode",
                         "peer ms",
                         "peer GPU ms", "wall tvk/peer", "GPU tvk/peer", "step-0 loss gap", "top tvk kernels (GPU ms)"],
                        rows))
    write_result(out_dir, "models", payload, table)
    return payload


if __name__ == "__main__":
    spec = json.loads(sys.argv[1])
    print(json.dumps(_measure_all(spec["device"], spec["names"], spec["modes"], spec["size"], spec["steps"],
                                  spec["spin_up"])))
