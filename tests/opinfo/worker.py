"""One OpInfo worker process (runner.py starts it): checks the ops named on stdin, one a
line, and writes one JSON line per op on stdout (print()s go to stderr).

  python tests/opinfo/worker.py SAMPLES      (with the repo root on PYTHONPATH)

Started as a file, not with `python -m`: op_db's sample_inputs calls inspect.stack(), and
for each frame of runpy's (frozen, no source file) that scans every loaded module, which
made a whole run twice as slow."""
from __future__ import annotations

import json
import os
import sys


def worker_main(samples: int):
    results = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    import torchvk
    from tvk_kernels.runtime.instance import Instance

    from tests.opinfo import selftest_ops
    from tests.opinfo.check import check_op, float32_ops
    from tests.opinfo.runner import FAILING, random_ops

    torchvk.set_cpu_fallback(False)  # TVK_CPU_FALLBACK=1 would make every op "match"
    ops, randoms = dict(selftest_ops.OPS), random_ops()
    results.write(json.dumps({"ready": True}) + "\n")
    results.flush()
    for line in sys.stdin:
        name = line.strip()
        if not name:
            continue
        if name not in ops:
            ops.update(float32_ops())  # op_db on first use: self-tests start faster without it
        print(f"--- {name}", file=sys.stderr, flush=True)
        row = check_op(ops[name], randoms.get(name), samples)
        inst = Instance._singleton
        messages = inst.log.take() if inst is not None else []
        if messages and row["status"] not in FAILING:
            row.update(status="error", phase="validation", detail="Vulkan validation: " + messages[0][:300])
        results.write(json.dumps(row) + "\n")
        results.flush()


if __name__ == "__main__":
    if sys.path[0] == os.path.dirname(__file__):  # run as a file, this folder leads sys.path: its
        del sys.path[0]  # check.py and report.py must not shadow other top-level modules
    worker_main(int(sys.argv[1]))
