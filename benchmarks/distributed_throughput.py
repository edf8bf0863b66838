"""Data-parallel training throughput: torch.distributed on tvk (torchvk/distributed.py) beside NCCL.

    python benchmarks/distributed_throughput.py [--out DIR] [--world 2] [--quick]
WORLD processes share one machine (on a one-GPU machine they share the GPU): each trains an MLP
under DistributedDataParallel on its part of the batch, and the script reports the median step
time and the all_reduce time of a 25 MiB gradient-sized buffer (DDP's default bucket), for the
`tvk` backend and, where CUDA exists, for torch CUDA in processes without torchvk: NCCL with a GPU
per process, else Gloo on CUDA tensors (NCCL refuses two processes on one GPU). Writes
distributed.json and distributed.md to DIR.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

_WORKER = r"""
import json, os, sys, time, statistics
import torch, torch.distributed as dist, torch.nn.functional as F
backend, rank, world, init, width, batch, steps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], int(sys.argv[5]), int(sys.argv[6]), int(sys.argv[7])
if backend == "tvk":
    import torchvk
    dev = "tvk"
    sync = torch.tvk.synchronize
    dist.init_process_group("cpu:gloo,tvk:tvk", init_method="file://" + init, rank=rank, world_size=world)
else:  # NCCL needs a GPU per process; sharing one GPU, torch's peer is Gloo on CUDA tensors
    dev = f"cuda:{rank % torch.cuda.device_count()}"
    torch.cuda.set_device(dev)
    sync = torch.cuda.synchronize
    dist.init_process_group(backend, init_method="file://" + init, rank=rank, world_size=world)
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(width, width), torch.nn.ReLU(), torch.nn.Linear(width, width), torch.nn.ReLU(),
                            torch.nn.Linear(width, 10)).to(dev)
ddp = torch.nn.parallel.DistributedDataParallel(model)
opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
x, y = torch.randn(batch // world, width, device=dev), torch.randint(0, 10, (batch // world,), device=dev)
times = []
for i in range(steps + 2):
    sync(); dist.barrier(); t0 = time.perf_counter()
    opt.zero_grad(); F.cross_entropy(ddp(x), y).backward(); opt.step(); sync()
    if i >= 2:
        times.append(time.perf_counter() - t0)
buf = torch.ones(25 * 2**20 // 4, device=dev)
ar = []
for i in range(steps + 1):
    sync(); dist.barrier(); t0 = time.perf_counter(); dist.all_reduce(buf); sync()
    if i >= 1:
        ar.append(time.perf_counter() - t0)
params = sum(p.numel() for p in model.parameters())
if rank == 0:
    print(json.dumps({"backend": backend, "step_ms": statistics.median(times) * 1e3,
                      "all_reduce_25MiB_ms": statistics.median(ar) * 1e3, "params": params}))
dist.destroy_process_group()
"""


def _run(backend: str, world: int, width: int, batch: int, steps: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        path = os.environ.get("PYTHONPATH")
        env = dict(os.environ, PYTHONPATH=str(ROOT) + (os.pathsep + path if path else ""))  # keep the caller's
        procs = [subprocess.Popen([sys.executable, "-c", _WORKER, backend, str(r), str(world), f"{tmp}/init",
                                   str(width), str(batch), str(steps)], stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True, env=env) for r in range(world)]
        outs = [p.communicate(timeout=600) for p in procs]
    if any(p.returncode for p in procs):
        return {"backend": backend, "error": "".join(o[1] for o in outs)[-600:]}
    return json.loads(outs[0][0].strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="benchmarks/results/local")
    ap.add_argument("--world", type=int, default=2)
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    sys.path.insert(0, str(ROOT))
    from tvk_kernels import get_device
    from tvk_kernels.bench.common import environment, md_table, write_result

    width, batch, steps = (64, 8, 3) if args.quick else (2048, 512, 20)
    runs = [_run("tvk", args.world, width, batch, steps)]
    try:
        import torch

        if torch.cuda.is_available():
            nccl = torch.distributed.is_nccl_available() and torch.cuda.device_count() >= args.world
            runs.append(_run("nccl" if nccl else "gloo", args.world, width, batch, steps))
    except ImportError:
        pass
    payload = {"experiment": "distributed", "environment": environment(get_device(0)), "world": args.world,
               "workload": f"MLP {width}x{width}x{width}x10, global batch {batch}, DDP, SGD; median of {steps} steps",
               "runs": runs}
    table = md_table(["backend", "step ms", "all_reduce 25 MiB ms", "error"],
                     [[r["backend"], r.get("step_ms"), r.get("all_reduce_25MiB_ms"), r.get("error", "")[:80]]
                      for r in runs])
    print(write_result(args.out, "distributed", payload, f"{payload['workload']}, {args.world} processes\n\n{table}"))


if __name__ == "__main__":
    main()
