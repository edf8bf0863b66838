"""Run a torch peer (CPU or CUDA) of an experiment in a process that never imports torchvk.

Why a separate process: once the tvk backend is registered, torch's autograd engine takes
PrivateUse1 as the accelerator, and a CUDA backward in the same process fails an internal
assert (`opt_ready_stream && opt_parent_stream`, seen on torch 2.11 with an H200).
So peers run here, loading the experiment modules by file path, not through the package.

    python peer.py '{"task": "train", ...}'   -> prints one JSON line
"""
from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def _load(name: str):
    spec = importlib.util.spec_from_file_location(f"tvk_peer_{name}", HERE / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run_script(script: Path, spec: dict) -> tuple:
    """Run `python script '<spec as JSON>'` in a fresh process that finds tvk_kernels as we do:
    (the JSON of the last line it prints, None), or (None, its stderr) where it failed."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    proc = subprocess.run([sys.executable, str(Path(script).resolve()), json.dumps(spec)], capture_output=True,
                          text=True, env=env)
    if proc.returncode != 0:
        return None, proc.stderr.strip()
    return json.loads(proc.stdout.strip().splitlines()[-1]), None


def run_peer(spec: dict) -> dict:
    """Run `spec` in a fresh process; returns its result, or {"error": ...}."""
    result, error = run_script(Path(__file__), spec)
    return {"error": error[-1500:]} if error is not None else result


def _main(spec: dict) -> dict:
    import torch  # lazy: the parent process only starts peers; torch loads in the peer

    data, models, train = _load("data"), _load("models"), _load("train")
    device = spec["device"]
    if device == "torchvulkan":  # PyPI torchvulkan: renames PrivateUse1 to "vulkan", so never beside torchvk
        import torchvulkan  # noqa: F401  # lazy: an optional peer package, never imported beside torchvk

        device = "vulkan"
    if spec["task"] == "train":
        ds, _ = data.experiment_data(spec["dataset"], spec.get("quick", False), spec.get("cifar_path"))
        return train.train(lambda: models.build(spec["model"]), ds, device, **spec["train"])
    if spec["task"] == "peak":  # peak memory of a few training steps on random inputs
        import torch.nn.functional as F  # lazy: as torch above

        torch.manual_seed(0)
        channels, size = spec["input"]
        model = models.build(spec["model"]).to(device)
        opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
        train.synchronize(device)
        train.reset_peak_memory(device)
        for _ in range(spec["steps"]):
            x = torch.randn(spec["batch"], channels, size, size).to(device)
            y = torch.randint(0, 10, (spec["batch"],)).to(device)
            opt.zero_grad(set_to_none=True)
            F.cross_entropy(model(x), y).backward()
            opt.step()
        train.synchronize(device)
        return {"peak_memory_bytes": train.peak_memory(device)}
    raise ValueError(f"unknown task {spec['task']!r}")


if __name__ == "__main__":
    print(json.dumps(_main(json.loads(sys.argv[1]))))
