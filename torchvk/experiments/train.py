"""One training loop for every device: same seed, same batches, same metrics."""
from __future__ import annotations

import time

import numpy as np
import torch
import torch.nn.functional as F


def _backend(device: str):
    """The module with synchronize / memory stats for a device string (None: the CPU)."""
    if device.startswith("cuda"):
        return torch.cuda
    if device.startswith("tvk"):
        import torchvk  # lazy: peer processes load this file and must not import torchvk (peer.py)

        return torchvk
    if device.startswith("vulkan"):  # the PyPI torchvulkan peer
        import torchvulkan  # lazy: an optional peer package, never imported beside torchvk

        return torchvulkan
    return None


def synchronize(device: str):
    backend = _backend(device)
    if backend is not None:
        backend.synchronize()


def reset_peak_memory(device: str):
    backend = _backend(device)
    if backend is not None:
        backend.reset_peak_memory_stats()


def peak_memory(device: str):
    backend = _backend(device)
    return backend.max_memory_allocated() if backend is not None else None


def evaluate(model, x, y, device: str, batch: int = 1000) -> float:
    model.eval()
    correct = 0
    with torch.no_grad():
        for i in range(0, len(x), batch):
            xb = torch.from_numpy(x[i:i + batch]).to(device)
            pred = model(xb).argmax(dim=1).cpu()
            correct += int((pred == torch.from_numpy(y[i:i + batch])).sum())
    model.train()
    return correct / max(len(x), 1)


def train(model_fn, data, device: str, epochs: int = 1, batch: int = 64, lr: float = 0.01, seed: int = 0,
          optimizer: str = "sgd", max_steps: int | None = None, eval_limit: int | None = None, progress=None,
          fused_optimizer: bool = True, compiled: bool = False) -> dict:
    """Train `model_fn()` on data=(x, y, xt, yt); returns losses, accuracy per epoch, times, peak memory.
    compiled=True (tvk only): model and loss run through torchvk.compile(model, loss_fn=F.cross_entropy)
    (the first steps trace and record); evaluation stays eager."""
    x, y, xt, yt = data
    if eval_limit:
        xt, yt = xt[:eval_limit], yt[:eval_limit]
    torch.manual_seed(seed)
    model = model_fn().to(device)
    fused = {"fused": True} if device.startswith("tvk") and fused_optimizer else {}  # one dispatch for all parameters
    opt = (torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9, **fused) if optimizer == "sgd"
           else torch.optim.Adam(model.parameters(), lr=lr, **fused))
    if compiled:
        import torchvk  # lazy: peer processes load this file and must not import torchvk (peer.py)

        model_and_loss = torchvk.compile(model, loss_fn=F.cross_entropy)
    order_rng = np.random.default_rng(seed)
    losses, step_times, epochs_out = [], [], []
    synchronize(device)
    reset_peak_memory(device)
    steps = 0
    for epoch in range(epochs):
        perm = order_rng.permutation(len(x))
        t_epoch = time.perf_counter()
        for i in range(0, len(x) - batch + 1, batch):
            idx = perm[i:i + batch]
            xb = torch.from_numpy(x[idx]).to(device)
            yb = torch.from_numpy(y[idx]).to(device)
            t0 = time.perf_counter()
            opt.zero_grad(set_to_none=True)
            loss = model_and_loss(xb, yb) if compiled else F.cross_entropy(model(xb), yb)
            loss.backward()
            opt.step()
            if steps % 50 == 0 or max_steps:
                losses.append(float(loss.item()))  # a sync point: the step has really run
            else:
                synchronize(device)
            step_times.append(time.perf_counter() - t0)
            steps += 1
            if progress is not None:
                progress.update(1)
            if max_steps and steps >= max_steps:
                break
        synchronize(device)
        epoch_s = time.perf_counter() - t_epoch
        acc = evaluate(model, xt, yt, device)
        epochs_out.append({"epoch": epoch + 1, "seconds": epoch_s, "test_accuracy": acc, "steps": steps})
        if max_steps and steps >= max_steps:
            break
    return {"device": device, "losses": losses, "epochs": epochs_out,
            "step_ms_median": float(np.median(step_times[len(step_times) // 5:]) * 1e3) if step_times else None,
            "peak_memory_bytes": peak_memory(device), "steps": steps, "batch": batch,
            **({"compile_stats": model_and_loss.compile_stats()} if compiled else {})}
