"""PNG plots of each experiment's JSON (matplotlib, optional): one function per experiment.
`write_result` calls `plot(payload, folder)`; `python -m tvk_kernels.bench.report --plots`
redraws every committed result."""
from __future__ import annotations

import math
from pathlib import Path


def _plt():
    import matplotlib  # lazy: matplotlib is optional (pip install torchvk[bench]): without it, no plots

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # lazy: as above, after choosing the Agg backend

    return plt


def _title(ax, payload, text):
    env = payload["environment"]
    ax.set_title(f"{text}\n{env['device']}, commit {env['commit']}", fontsize=9)


def vector_add(payload, ax):
    rs = payload["results"]
    ax.loglog([r["n"] for r in rs], [r["tvk_gbps"] for r in rs], "o-", label="tvk (Vulkan)")
    if any(r.get("torch_cuda_gbps") for r in rs):
        ax.loglog([r["n"] for r in rs], [r["torch_cuda_gbps"] for r in rs], "s--", label="torch CUDA")
    ax.set_xlabel("elements")
    ax.set_ylabel("GB/s")
    _title(ax, payload, "vector add bandwidth")


def matmul(payload, ax):
    for dtype in sorted({r["dtype"] for r in payload["results"]}):
        rs = [r for r in payload["results"] if r["dtype"] == dtype]
        ax.semilogx([r["n"] for r in rs], [r["tflops"] for r in rs], "o-", label=f"tvk {dtype}")
        if any(r.get("torch_cuda_tflops") for r in rs):
            ax.semilogx([r["n"] for r in rs], [r["torch_cuda_tflops"] for r in rs], "s--", label=f"torch CUDA {dtype}")
    ax.set_xlabel("n (square)")
    ax.set_ylabel("TFLOP/s")
    _title(ax, payload, "matmul")


def _training(payload, ax, runs, what):
    for r in runs:
        label = f"{r.get('model', '')} b{r['batch']} {r['peer']}".strip()
        ax.plot([e["epoch"] for e in r["epochs"]], [e["test_accuracy"] for e in r["epochs"]], "o-", label=label)
    ax.set_xlabel("epoch")
    ax.set_ylabel("test accuracy")
    _title(ax, payload, what)


def mnist(payload, ax):
    _training(payload, ax, payload["runs"], "MNIST test accuracy")


def cifar10(payload, ax):
    _training(payload, ax, payload["runs"], "CIFAR-10 CNN (" + payload["dataset"].split(":")[0] + ")")


def low_vram(payload, ax):
    rs = payload["results"]
    labels = [f"{r['model']} b{r['batch']}" for r in rs]
    x = range(len(rs))
    ax.bar([i - 0.2 for i in x], [(r["tvk_peak_bytes"] or 0) / 2**20 for r in rs], 0.4, label="tvk peak")
    if any(r.get("torch_cuda_peak_bytes") for r in rs):
        ax.bar([i + 0.2 for i in x], [(r["torch_cuda_peak_bytes"] or 0) / 2**20 for r in rs], 0.4, label="torch CUDA peak")
    ax.set_xticks(list(x), labels, rotation=20, fontsize=8)
    ax.set_ylabel("MiB")
    _title(ax, payload, "peak memory of a training step")


def ablations(payload, ax):
    res = payload["results"]
    names, values = [], []
    fams = sorted({x["family"] for x in res["tuned_vs_default"]})
    for f in fams:
        xs = [x["speedup"] for x in res["tuned_vs_default"] if x["family"] == f]
        names.append(f"tuned {f}")
        values.append(math.exp(sum(math.log(s) for s in xs) / len(xs)))
    d, o = res["deferred_vs_blocking_ms"], res["fused_vs_per_tensor_optimizer_ms"]
    names += ["deferred submit", "fused optimizer"]
    values += [d["blocking"] / d["deferred"], o["per_tensor"] / o["fused"]]
    ax.barh(names, values)
    ax.axvline(1.0, color="k", lw=0.8)
    ax.set_xlabel("speedup of the full configuration")
    _title(ax, payload, "ablations")


def kernels(payload, ax):
    rows = [r for r in payload["conv2d"]]
    ax.barh([f"{r['layer']} {r['direction']}" for r in rows], [r["tvk_tflops"] for r in rows], label="tvk")
    ax.set_xlabel("TFLOP/s")
    _title(ax, payload, "conv2d, CIFAR CNN layers")


def zoo(payload, ax):
    """Median step ms per model, one bar per device and mode (a run that failed has no bar)."""
    runs = [r for r in payload["runs"] if r.get("step_ms_median")]
    models = list(dict.fromkeys(r["model"] for r in payload["runs"]))
    series = list(dict.fromkeys(f"{r['device']} {r['mode']}" for r in payload["runs"]))
    width = 0.8 / max(len(series), 1)
    for i, label in enumerate(series):
        ms = {r["model"]: r["step_ms_median"] for r in runs if f"{r['device']} {r['mode']}" == label}
        ax.bar([m + i * width for m, name in enumerate(models) if name in ms], [ms[n] for n in models if n in ms],
               width, label=label)
    ax.set_xticks([m + 0.4 - width / 2 for m in range(len(models))], models, rotation=30, fontsize=7)
    if runs:  # a log axis needs a bar
        ax.set_yscale("log")
    ax.set_ylabel("step ms (median)")
    _title(ax, payload, "model zoo: training step time")


def models(payload, ax):
    """tvk's step wall time over the peer's, per model, one bar per tvk mode (1: as fast; a failed run has no bar)."""
    names = list(payload["tvk"])
    modes = [m for m in next(iter(payload["tvk"].values()), {}) if m != "cpu_ops"]
    width = 0.8 / max(len(modes), 1)
    drawn = False
    for i, mode in enumerate(modes):
        ratios = {n: payload["tvk"][n][mode].get("vs", {}).get("wall_ratio") for n in names}
        ratios = {n: r for n, r in ratios.items() if r}
        drawn = drawn or bool(ratios)
        ax.bar([k + i * width for k, n in enumerate(names) if n in ratios], list(ratios.values()), width,
               label=f"tvk {mode}")
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_xticks([k + 0.4 - width / 2 for k in range(len(names))], names, rotation=30, fontsize=7)
    if drawn:
        ax.set_yscale("log")
    ax.set_ylabel(f"step wall time, tvk / {payload['peer']}")
    _title(ax, payload, "real models: training step, tvk / peer")


PLOTS = {"vector-add": vector_add, "matmul": matmul, "mnist": mnist, "cifar10": cifar10, "low-vram": low_vram,
         "ablations": ablations, "kernels": kernels, "zoo": zoo,
         "models": models}


def plot(payload: dict, folder: Path) -> Path | None:
    """Write <folder>/<experiment>.png; None where matplotlib is missing or the experiment has no plot."""
    if payload["experiment"] not in PLOTS:
        return None
    try:
        plt = _plt()
    except ImportError:
        return None
    fig, ax = plt.subplots(figsize=(7, 4.5))
    PLOTS[payload["experiment"]](payload, ax)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7)
    fig.tight_layout()
    path = Path(folder) / f"{payload['experiment']}.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
