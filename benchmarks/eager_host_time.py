"""Host time per small eager op on tvk (what Python and the runtime cost, not the GPU), best of 5
rounds of 2000 calls each in each of 3 processes, optionally beside an earlier commit of this
repository (its processes alternate with this checkout's, so machine noise hits both alike):

    python benchmarks/eager_host_time.py [--compare REV] [--out DIR]
--compare checks REV out in a temporary git worktree and runs the same timing there in its own
process (same machine, same run). Writes eager_host_time.json (and .md) to DIR when given.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

_TIMING = r"""
import json, time, torch, torchvk
x = torch.randn(8, 16, device="tvk"); w = torch.randn(16, 16, device="tvk"); a = torch.ones(16, device="tvk")
ops = {"a + a (16 floats)": lambda: a + a, "torch.relu(a)": lambda: torch.relu(a),
       "torch.mm 8x16 @ 16x16": lambda: torch.mm(x, w), "x.view(16, 8)": lambda: x.view(16, 8),
       "a.sum()": lambda: a.sum()}
out = {}
for name, fn in ops.items():
    for _ in range(300):
        fn()
    torch.tvk.synchronize()
    best = 1e9
    for _ in range(5):
        t = time.perf_counter()
        for _ in range(2000):
            fn()
        best = min(best, (time.perf_counter() - t) / 2000 * 1e6)
        torch.tvk.synchronize()
    out[name] = best
print(json.dumps(out))
"""


def _time_at(source_root: Path) -> dict:
    env = dict(os.environ, PYTHONPATH=str(source_root) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    p = subprocess.run([sys.executable, "-c", _TIMING], capture_output=True, text=True, env=env, cwd=source_root)
    if p.returncode != 0:
        raise SystemExit(p.stderr[-2000:])
    return json.loads(p.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--compare", default=None, help="an earlier git revision to time beside this checkout")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        roots = {"this checkout": ROOT}
        if args.compare:
            roots[args.compare] = Path(tmp) / "tree"
            subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "-q", "--detach", str(roots[args.compare]),
                            args.compare], check=True)
        try:
            runs = {name: {} for name in roots}
            for _ in range(3):
                for name, root in roots.items():
                    for op, us in _time_at(root).items():
                        runs[name][op] = min(us, runs[name].get(op, us))
        finally:
            if args.compare:
                subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(roots[args.compare])],
                               check=True)
    print(json.dumps(runs, indent=1))
    if args.out:
        sys.path.insert(0, str(ROOT))
        from tvk_kernels import get_device
        from tvk_kernels.bench.common import environment, md_table, write_result

        names = list(runs["this checkout"])
        payload = {"experiment": "eager_host_time", "environment": environment(get_device(0)),
                   "unit": "us per op, best of 3 processes x 5 rounds x 2000 calls", "runs": runs}
        table = md_table(["op"] + list(runs), [[n] + [runs[r][n] for r in runs] for n in names])
        write_result(args.out, "eager_host_time", payload, table)


if __name__ == "__main__":
    main()
