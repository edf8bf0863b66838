"""Host time per eager op: what Python, torch's dispatcher and our runtime cost per call, not the GPU.

A fixed mix of small ops (16 to 256 floats, so the GPU's share is nil) is timed on tvk beside
the floor of any Python backend: a no-op `__torch_dispatch__` subclass that makes its output
tensor, timed in the same process with its rounds interleaved with the op's (machine noise
hits both alike). Each op: the best of ROUNDS rounds of CALLS calls, in each of 3 processes.
Where CUDA is present, torch CUDA runs the same mix in its own process (no torchvk imported).

    python benchmarks/eager_host_time.py [--compare REV] [--out DIR] [--quick]
    python benchmarks/eager_host_time.py --profile "a + b"   # where one op's microseconds go
    python benchmarks/eager_host_time.py --model hf_gpt2 [--mode amp] [--compare REV]
                                                              # each aten op's share of a model's step

--compare checks REV out in a temporary git worktree (or takes a directory holding an earlier tree:
`git archive REV torchvk tvk_kernels templates tuning tuned_configs shipped | tar -x -C DIR`, and
REV written to DIR/REVISION to name it; the H200 runs of 2026-12-04 named theirs ".base", 1da66bc) and
times it too, its processes alternating with this checkout's. Writes eager_host_time.json (and .md) to DIR when given.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# The op mix, as (name, statement) over the tensors made in _SETUP; backward and optimizer cases
# are one call each (their op count is reported beside them).
MIX = [
    ("a + b", "a + b"),
    ("a * 2", "a * 2"),
    ("relu(a)", "torch.relu(a)"),
    ("x.view(16, 8)", "x.view(16, 8)"),
    ("x.t()", "x.t()"),
    ("a.sum()", "a.sum()"),
    ("F.linear", "F.linear(x, w, bias)"),
    ("F.layer_norm", "F.layer_norm(x, (16,), gamma, beta)"),
    ("softmax", "torch.softmax(x, -1)"),
    ("linear+layer_norm fwd+bwd", "F.layer_norm(F.linear(xg, wg, bg), (16,), gg, betag).sum().backward()"),
    ("SGD step, 4 params", "opt.step()"),
]

_SETUP = r"""
import json, sys, time, cProfile, pstats
import torch
import torch.nn.functional as F
device = sys.argv[1]
if device == "tvk":
    import torchvk
sync = torch.tvk.synchronize if device == "tvk" else torch.cuda.synchronize
mk = lambda *s: torch.randn(*s, device=device)
a, b, x, w, bias = mk(16), mk(16), mk(8, 16), mk(16, 16), mk(16)
gamma, beta = mk(16), mk(16)
xg = mk(8, 16)
wg, bg, gg, betag = [p.requires_grad_() for p in (mk(16, 16), mk(16), mk(16), mk(16))]
opt = torch.optim.SGD([wg, bg, gg, betag], lr=1e-3)
F.layer_norm(F.linear(xg, wg, bg), (16,), gg, betag).sum().backward()


class Noop(torch.Tensor):
    # the floor of a Python backend: torch's dispatch into __torch_dispatch__ and an output wrapper
    @staticmethod
    def __new__(cls, size):
        return torch.Tensor._make_wrapper_subclass(cls, size, dtype=torch.float32, device="cpu")

    __torch_function__ = torch._C._disabled_torch_function_impl

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        return Noop(args[0].shape)


noop_a, noop_b = Noop((16,)), Noop((16,))
"""

_TIMING = _SETUP + r"""
mix, rounds, calls = json.loads(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])


def best_us(fn):
    t = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - t) / calls * 1e6


floor = lambda: noop_a + noop_b
out = {"floor": 1e9}
for name, statement in mix:
    fn = eval("lambda: " + statement)
    for _ in range(max(calls // 10, 20)):
        fn()
    sync()
    best = 1e9
    for _ in range(rounds):
        out["floor"] = min(out["floor"], best_us(floor))
        best = min(best, best_us(fn))
        sync()
    out[name] = best
if device == "tvk":
    counts = {}
    for name, statement in mix:  # how many aten ops one call dispatches
        torchvk.reset_op_counts()
        eval(statement)
        counts[name] = sum(torchvk.op_counts()["vulkan"].values())
    out["ops per call"] = counts
print(json.dumps(out))
"""

_PROFILE = _SETUP + r"""
fn = eval("lambda: " + sys.argv[2])
for _ in range(500):
    fn()
sync()
profile = cProfile.Profile()
profile.enable()
for _ in range(3000):
    fn()
profile.disable()
sync()
pstats.Stats(profile).sort_stats("tottime").print_stats(25)
"""


# Where a real model's eager step spends host time: each top-level aten op's thread time inside
# our dispatcher, summed over steps, and how it repeats (torchvk/_repeat.py)
_MODEL = r"""
import collections, sys, time, torch, torchvk
from torchvk import _dispatch, _glue
from torchvk.experiments import zoo, zoo_models
name, size, steps, mode = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
model, step = zoo.trainer(name, "tvk", mode, size)
x, y = (t.to("tvk") for t in list(zoo_models.batches(name, 1, size))[0])
for _ in range(3):
    step(x, y).item()
cost, calls, depth, dispatch = collections.defaultdict(float), collections.Counter(), [0], _glue.hooks.dispatch


def timed(func, args, kwargs):
    depth[0] += 1
    start = time.thread_time()
    try:
        return dispatch(func, args, kwargs)
    finally:
        depth[0] -= 1
        if depth[0] == 0:
            cost[func] += time.thread_time() - start
            calls[func] += 1


_glue.hooks.dispatch = timed
wall = time.perf_counter()
for _ in range(steps):
    step(x, y).item()
wall = (time.perf_counter() - wall) / steps
_glue.hooks.dispatch = dispatch
kinds = collections.defaultdict(str)
for repeat in _dispatch._repeats.values():
    kinds[repeat.name] = type(repeat).__name__
total = sum(cost.values()) / steps
from tvk_kernels.bench.common import environment
env = environment(torchvk._storage.get_device())
print(f"{env['device']} ({env['driver']} {env['driver_info']}), torch {torch.__version__}, commit {env['commit']}, "
      f"{env['date']}")
print(f"{name} ({size}, {mode}): {wall * 1e3:.1f} ms wall per step, {total * 1e3:.1f} ms of it in {sum(calls.values()) // steps} "
      "aten ops (thread time inside the dispatcher)")
print(f"{'op':60s} {'calls':>6s} {'ms/step':>8s} {'us/call':>8s} repeat")
for func, seconds in sorted(cost.items(), key=lambda kv: -kv[1])[:30]:
    print(f"{str(func):60s} {calls[func] / steps:6.0f} {seconds / steps * 1e3:8.2f} {seconds / calls[func] * 1e6:8.1f} "
          f"{kinds[str(func)] or 'none'}")
"""


@contextmanager
def trees(compare):
    """{"tvk": this checkout, "tvk at REV": the earlier tree} (the latter only with compare): a
    revision checked out in a temporary worktree, or a directory holding a tree (its REVISION file
    names it)."""
    roots = {"tvk": ROOT}
    if not compare:
        yield roots
        return
    with tempfile.TemporaryDirectory() as tmp:
        worktree = not Path(compare).is_dir()
        revision = Path(compare) / "REVISION"  # the tree's commit, written beside it by whoever made it
        label = compare if worktree else revision.read_text().strip() if revision.is_file() else Path(compare).name
        roots[f"tvk at {label}"] = Path(tmp) / "tree" if worktree else Path(compare).resolve()
        if worktree:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "-q", "--detach",
                            str(roots[f"tvk at {label}"]), compare], check=True)
        try:
            yield roots
        finally:
            if worktree:
                subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force",
                                str(roots[f"tvk at {label}"])], check=True)


def _run(script, source_root: Path, *argv) -> str:
    env = dict(os.environ, PYTHONPATH=str(source_root) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    p = subprocess.run([sys.executable, "-c", script, *argv], capture_output=True, text=True, env=env,
                       cwd=source_root)
    if p.returncode != 0:
        raise SystemExit(p.stderr[-3000:])
    return p.stdout


def _time(source_root: Path, device: str, rounds: int, calls: int) -> dict:
    out = _run(_TIMING, source_root, device, json.dumps(MIX), str(rounds), str(calls))
    return json.loads(out.strip().splitlines()[-1])


def _merge(best: dict, run: dict) -> None:
    for name, us in run.items():
        best[name] = us if name == "ops per call" else min(us, best.get(name, us))


def _has_cuda() -> bool:
    probe = "import torch; print(torch.cuda.is_available())"
    p = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    return p.returncode == 0 and p.stdout.strip().endswith("True")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--compare", default=None,
                    help="an earlier git revision, or a directory with an earlier tree, to time beside this checkout")
    ap.add_argument("--out", default=None)
    ap.add_argument("--quick", action="store_true", help="1 process, few calls (a smoke test)")
    ap.add_argument("--profile", default=None, metavar="OP", help="print where one op of the mix spends its time")
    ap.add_argument("--model", default=None, metavar="NAME",
                    help="print the host time of each aten op in an eager training step of a zoo model")
    ap.add_argument("--size", default="bench", help="--model's size: tiny or bench")
    ap.add_argument("--mode", default="eager", choices=("eager", "amp"), help="--model's step: float32 or AMP")
    args = ap.parse_args()
    if args.model:  # with --compare, each tree's table in turn
        with trees(args.compare) as roots:
            for name, root in roots.items():
                print(f"{name}: " + _run(_MODEL, root, args.model, args.size, "5", args.mode))
        return
    if args.profile:
        statement = dict(MIX).get(args.profile)
        if statement is None:
            raise SystemExit(f"--profile: no op {args.profile!r} in the mix; choose from {[n for n, _ in MIX]}")
        print(_run(_PROFILE, ROOT, "tvk", statement))
        return
    processes, rounds, calls = (1, 2, 50) if args.quick else (3, 7, 1000)
    with trees(args.compare) as roots:
        runs = {name: {} for name in roots}
        for _ in range(processes):
            for name, root in roots.items():
                _merge(runs[name], _time(root, "tvk", rounds, calls))
    if _has_cuda():  # torch CUDA in its own process, without torchvk
        runs["torch cuda"] = {}
        for _ in range(processes):
            _merge(runs["torch cuda"], _time(ROOT, "cuda", rounds, calls))
    print(json.dumps(runs, indent=1))
    if args.out:
        _write(args.out, runs, f"best of {processes} process{'es' if processes > 1 else ''} x {rounds} rounds x "
                               f"{calls} calls")


def _write(out_dir, runs, repeats):
    sys.path.insert(0, str(ROOT))
    from tvk_kernels import get_device
    from tvk_kernels.bench.common import environment, md_table, write_result

    names = [n for n, _ in MIX]
    counts = runs["tvk"]["ops per call"]
    columns = [r for r in runs]
    rows = [[n, counts[n]] + [runs[r][n] for r in columns] + [runs["tvk"][n] / runs["tvk"]["floor"]]
            + ([runs["tvk"][n] / runs["torch cuda"][n]] if "torch cuda" in runs else []) for n in names]
    rows.append(["no-op dispatch floor", 1] + [runs[r]["floor"] for r in columns] + [1.0]
                + ([runs["tvk"]["floor"] / runs["torch cuda"]["floor"]] if "torch cuda" in runs else []))
    header = ["op", "aten ops (tvk)"] + [f"{r} us" for r in columns] + ["tvk / floor"] \
        + (["tvk / torch cuda"] if "torch cuda" in runs else [])
    payload = {"experiment": "eager_host_time", "environment": environment(get_device(0)),
               "unit": "us per call (host)", "repeats": repeats, "quick": "1 process" in repeats,
               "floor": "a no-op __torch_dispatch__ subclass making its output, same process, interleaved rounds",
               "mix": dict(MIX), "runs": runs}
    write_result(out_dir, "eager_host_time", payload, md_table(header, rows))


if __name__ == "__main__":
    main()
