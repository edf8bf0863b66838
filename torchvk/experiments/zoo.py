"""Experiment: the model zoo (zoo_models.py) trained on tvk in three modes, beside torch.

Modes on tvk: eager; `torchvk.compile(model, loss_fn=...)` (model and loss compiled together);
`torch.compile(model, backend="tvk")` (loss eager). Peers: torch CPU and CUDA eager, and for the
Hugging Face models torch.compile on CUDA (inductor). Every mode runs the same steps from the same
init and batches as torch CPU (and torch CUDA where present, on the same GPU), each peer in a
process without torchvk (see peer.py for why). A model x mode that fails is a result: its error
(the first op without a Vulkan kernel, say) is recorded and the next one runs.

    python zoo.py '{"device": "cuda", "names": ["mlp"], "size": "bench", "steps": 12, "warmup": 3}'
    -> one JSON line, {name: losses and step times, or error} (how run() starts a peer)
"""
from __future__ import annotations

import importlib.util
import json
import sys
import time
from pathlib import Path

import torch
from tqdm import tqdm

HERE = Path(__file__).resolve().parent
MODES = ("eager", "torchvk.compile", "torch.compile")
BENCHMARK = " + benchmark mode"  # a mode with torchvk.backends.benchmark on (full runs only)

if __package__:
    from . import zoo_models
else:  # a peer process: this file runs as a script, without the torchvk package
    if sys.path and Path(sys.path[0] or ".").resolve() == HERE:
        # not this folder on the path: its kernels.py, data.py, models.py would shadow libraries' modules
        # (transformers looks for a `kernels` package and imported ours)
        sys.path.pop(0)
    _spec = importlib.util.spec_from_file_location("tvk_peer_zoo_models", HERE / "zoo_models.py")
    zoo_models = sys.modules[_spec.name] = importlib.util.module_from_spec(_spec)  # dataclasses look it up there
    _spec.loader.exec_module(zoo_models)


def _sync(device: str):
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    elif device.startswith("tvk"):
        torch.tvk.synchronize()


def trainer(name: str, device: str, mode: str = "eager", size: str = "tiny", dtype: torch.dtype = torch.float32):
    """(the model of zoo entry `name` on `device`, built from the zoo's seeded init, and step(x, y): one
    training step in `mode`, returning the loss). "amp": autocast to float16 with a GradScaler, as
    torch.amp's recipe for CUDA. dtype: the parameters' (float64: a CPU referee's)."""
    entry = zoo_models.ZOO[name]
    model = zoo_models.build(name, size).to(device, dtype)  # built on the CPU: the same weights on every device
    opt = entry.optimizer(model.parameters())
    if mode == "torchvk.compile":
        import torchvk  # lazy: this file also runs as a peer script, without torchvk

        loss_of = torchvk.compile(model, loss_fn=entry.loss)
    elif mode == "torch.compile":
        torch._dynamo.reset()  # zoo models share code (nn.Sequential.forward): start each from empty caches
        compiled = torch.compile(model, backend="tvk")
        loss_of = lambda x, y: entry.loss(compiled(x), y)  # noqa: E731
    elif mode in ("eager", "amp"):
        loss_of = lambda x, y: entry.loss(model(x), y)  # noqa: E731
    elif mode == "inductor":  # a torch peer's compiled mode (torch.compile's default backend)
        torch._dynamo.reset()
        compiled = torch.compile(model)
        loss_of = lambda x, y: entry.loss(compiled(x), y)  # noqa: E731
    else:
        raise ValueError(f"unknown zoo mode {mode!r}; one of {MODES + ('amp', 'inductor')}")
    device_type = torch.device(device).type
    # an initial loss scale of 2**8, not torch's 2**16: the zoo's models are small, their gradients large (few
    # samples and classes), and 2**16 overflows float16 in the first steps, which the scaler then skips
    # (on CUDA too); the zoo compares steps that trained
    scaler = torch.amp.GradScaler(device_type, init_scale=2.0 ** 8) if mode == "amp" else None

    def step(x, y):
        opt.zero_grad(set_to_none=True)
        if scaler is None:
            loss = loss_of(x, y)
            loss.backward()
            opt.step()
            return loss
        with torch.autocast(device_type, dtype=torch.float16):
            loss = loss_of(x, y)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        return loss

    return model, step


def train_steps(name: str, device: str, mode: str = "eager", steps: int = 2, size: str = "tiny",
                dtype: torch.dtype = torch.float32):
    """Train zoo model `name` for `steps` steps on `device` in `mode`, from the zoo's seeded init and
    batches, its parameters and float inputs in `dtype`; returns (losses, step seconds, the trained model)."""
    model, step = trainer(name, device, mode, size, dtype)
    losses, seconds = [], []
    for x, y in zoo_models.batches(name, steps, size):
        x, y = (t.to(device, dtype) if t.is_floating_point() else t.to(device) for t in (x, y))
        _sync(device)
        t0 = time.perf_counter()
        loss = step(x, y)
        losses.append(float(loss.item()))  # a sync point: the step has really run
        seconds.append(time.perf_counter() - t0)
    return losses, seconds, model


def _error(e: BaseException) -> str:
    lines = str(e).strip().splitlines()
    return f"{type(e).__name__}: {lines[0] if lines else ''}"[:400]


def _summary(losses, seconds, warmup: int) -> dict:
    timed = sorted(seconds[warmup:] or seconds)
    return {"losses": losses, "step_ms_median": timed[len(timed) // 2] * 1e3, "first_step_ms": seconds[0] * 1e3}


def _run_peer_models(device: str, names, steps: int, size: str, warmup: int, mode: str = "eager") -> dict:
    out = {}
    for name in names:
        try:
            losses, seconds, _ = train_steps(name, device, mode, steps, size)
            out[name] = _summary(losses, seconds, warmup)
        except Exception as e:  # noqa: BLE001  (a peer's failure is recorded, as tvk's)
            out[name] = {"error": _error(e)}
    return out


def run_peer(device: str, names, steps: int, size: str, warmup: int, mode: str = "eager") -> dict:
    """Every model, eager (or "inductor": torch.compile), on a torch device in a fresh process without
    torchvk: {name: result}."""
    from .peer import run_script  # lazy: the package side only (a peer process runs this file as a script)

    spec = {"device": device, "names": list(names), "steps": steps, "size": size, "warmup": warmup, "mode": mode}
    result, error = run_script(Path(__file__), spec)
    if error is not None:
        return {name: {"error": f"torch {device} peer failed: {error[-600:]}"} for name in names}
    return result


def run_tvk(device_str: str, name: str, mode: str, steps: int, size: str, warmup: int) -> dict:
    """mode: one of MODES, or one with BENCHMARK appended: benchmark mode on (torchvk.backends),
    whose first-sight cost (shapes timed, seconds) is reported with the run."""
    import torchvk  # lazy: this file also runs as a peer script, without torchvk
    import torchvk.backends  # lazy: as torchvk

    torchvk.reset_op_counts()
    benchmark = mode.endswith(BENCHMARK)
    base_mode = mode[:-len(BENCHMARK)] if benchmark else mode
    before = torchvk.backends.benchmark_stats()
    torchvk.backends.benchmark = benchmark
    try:
        losses, seconds, _ = train_steps(name, device_str, base_mode, steps, size)
        result = _summary(losses, seconds, warmup)
    except Exception as e:  # noqa: BLE001  (the to-do list: which op or feature each model still needs)
        result = {"error": _error(e)}
        if base_mode == "torch.compile":
            torch._dynamo.reset()
    finally:
        torchvk.backends.benchmark = False
    if benchmark:
        after = torchvk.backends.benchmark_stats()
        result["benchmark_shapes"] = after["decided"] - before["decided"]
        result["benchmark_s"] = after["seconds"] - before["seconds"]
    counts = torchvk.op_counts()
    result["cpu_ops"] = sum(counts["cpu"].values())
    result["cpu_op_names"] = sorted(counts["cpu"])
    return result


def _loss_gap(result: dict, reference: dict | None):
    """Largest |loss - reference loss| over the steps both ran (None: either failed)."""
    if not reference or "losses" not in reference or "losses" not in result:
        return None
    return max(abs(a - b) for a, b in zip(result["losses"], reference["losses"]))


def run(device, out_dir, quick=False, progress=True, names=None) -> dict:
    import torchvk  # lazy: this file also runs as a peer script, without torchvk
    from tvk_kernels.bench.common import environment, md_table, write_result  # lazy: as torchvk

    names = list(names or zoo_models.ZOO)
    size, steps, warmup = ("tiny", 3, 2) if quick else ("bench", 12, 3)  # compiled modes: trace, record, replay
    dev = f"tvk:{device.index}"
    fallback = torchvk.cpu_fallback_enabled()
    peers = {"cpu": run_peer("cpu", names, steps, size, warmup)}
    if torch.cuda.is_available():
        peers["cuda"] = run_peer("cuda", names, steps, size, warmup)
        # torch.compile on CUDA for the Hugging Face models (inductor compiles each for tens of seconds)
        hugging_face = [n for n in names if n.startswith("hf_")]
        if hugging_face and not quick:
            peers["cuda inductor"] = run_peer("cuda", hugging_face, steps, size, warmup, mode="inductor")
    jobs = [(n, m) for n in names for m in MODES + (() if quick else ("torchvk.compile" + BENCHMARK,))]
    if progress:
        jobs = tqdm(jobs, desc="zoo", unit="run")
    runs = []
    for name, mode in jobs:
        r = run_tvk(dev, name, mode, steps, size, warmup)
        r.update(model=name, device="tvk", mode=mode, loss_gap_vs_cpu=_loss_gap(r, peers["cpu"].get(name)))
        runs.append(r)
    for peer, results in peers.items():
        device_name, _, peer_mode = peer.partition(" ")
        for name in results:
            runs.append(dict(results[name], model=name, device=f"torch {device_name}", mode=peer_mode or "eager",
                             loss_gap_vs_cpu=_loss_gap(results[name], peers["cpu"][name])))
    rows = []
    for name in names:
        for r in (x for x in runs if x["model"] == name):
            status = "ok" if "error" not in r else r["error"][:160].replace("|", "/")
            if "benchmark_shapes" in r:
                status += f" ({r['benchmark_shapes']} shapes timed in {r['benchmark_s']:.2f} s)"
            rows.append([name, r["device"], r["mode"], r.get("step_ms_median"), r.get("first_step_ms"),
                         (r.get("losses") or [None])[-1], r.get("loss_gap_vs_cpu"), r.get("cpu_ops"), status])
    trained = [r for r in runs if r["device"] == "tvk" and "error" not in r and r["mode"] in MODES]
    payload = {"experiment": "zoo", "environment": environment(device), "quick": quick, "size": size,
               "steps": steps, "timed_after_steps": warmup, "cpu_fallback": fallback,
               "dims": {n: getattr(zoo_models.ZOO[n], size) for n in names}, "runs": runs,
               "tvk_trained": f"{len(trained)} of {len(names) * len(MODES)} model x mode"}
    table = md_table(["model", "device", "mode", "step ms (median)", "first step ms", "last loss",
                      "max loss gap vs CPU", "CPU ops", "status"], rows)
    table = f"{payload['tvk_trained']} train on tvk; {steps} steps, median after the first {warmup}.\n\n" + table
    write_result(out_dir, "zoo", payload, table)
    return payload


if __name__ == "__main__":
    spec = json.loads(sys.argv[1])
    print(json.dumps(_run_peer_models(spec["device"], spec["names"], spec["steps"], spec["size"], spec["warmup"],
                                      spec.get("mode", "eager"))))
