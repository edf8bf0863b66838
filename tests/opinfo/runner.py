"""Run the OpInfo check (check.py) over many ops in worker processes, crash-isolated.

A worker process (worker.py) reads op names on stdin, one a line, checks each on tvk
against CPU and writes one JSON line per op. The parent runs `jobs` workers side by side,
each fed the next op from one shared queue. When a worker dies (an abort, a segfault) the op it
was on is recorded as `crash` with the tail of its stderr, and a fresh worker goes on
with the next op; an op that takes longer than `timeout` seconds is killed and recorded
as `timeout`. Every op of the list gets a row: none is skipped.

  python -m tests.opinfo.runner [--jobs 2] [--timeout 60] [--samples 3] [--out rows.jsonl] [OP ...]
"""
from __future__ import annotations

import argparse
import json
import os
import queue
import selectors
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from .check import SAMPLES_PER_OP

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
TIMEOUT_S = 60.0  # a cold shader cache on a loaded 2-core machine: a first conv2d build takes seconds
STARTUP_S = 120.0  # importing torch, op_db and torchvk, on a loaded machine
FAILING = ("mismatch", "error", "crash", "timeout")


def random_ops() -> dict:
    """{op: {"why", "deterministic_when"}}: ops whose values are random or uninitialised
    (data: random_ops.json); see check.values_are_random."""
    data = json.loads((HERE / "random_ops.json").read_text())
    return {**data["random"], **{op: {"why": "uninitialised memory"} for op in data["uninitialised"]}}


# ------------------------------------------------------------------ the parent
class Worker:
    """One worker process, with its stderr in a temp file (the tail explains a crash)."""

    def __init__(self, env, samples: int):
        self.stderr = tempfile.TemporaryFile()
        command = [sys.executable, str(HERE / "worker.py"), str(samples)]  # a file, not -m: see worker.py
        self.proc = subprocess.Popen(command, cwd=ROOT, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self.stderr, text=True, bufsize=1)
        self.sel = selectors.DefaultSelector()
        self.sel.register(self.proc.stdout, selectors.EVENT_READ)

    def read_line(self, timeout: float) -> str | None:
        """The next line, '' when the worker died, None on a timeout."""
        if not self.sel.select(timeout):
            return None
        return self.proc.stdout.readline()

    def stderr_tail(self, n: int = 1200) -> str:
        self.stderr.seek(0, os.SEEK_END)
        size = self.stderr.tell()
        self.stderr.seek(max(0, size - n))
        return self.stderr.read().decode(errors="replace")

    def stop(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        self.sel.close()
        self.proc.stdout.close()
        self.proc.stdin.close()
        self.stderr.close()


def _died(w: Worker, name: str, status: str, seconds: float) -> dict:
    if status == "timeout":
        detail = f"took more than {seconds:.0f} s (killed)"
    else:
        rc = w.proc.wait()
        how = f"signal {-rc}" if rc < 0 else f"exit code {rc}"
        detail = f"worker process died ({how}) while checking {name}"
    tail = w.stderr_tail().split(f"--- {name}\n")[-1].strip()
    return {"op": name, "status": status, "detail": detail, "stderr_tail": tail[-800:], "seconds": round(seconds, 3)}


def _drive(todo: queue.Queue, rows: list, lock, env, timeout: float, samples: int, on_row):
    """One worker slot: take ops from the queue until it is empty, restarting the worker as needed."""
    w = None
    try:
        while True:
            try:
                name = todo.get_nowait()
            except queue.Empty:
                return
            if w is None:
                w = Worker(env, samples)
                ready = w.read_line(STARTUP_S)
                if not ready:
                    raise RuntimeError(f"an OpInfo worker did not start:\n{w.stderr_tail()}")
            start = time.perf_counter()
            w.proc.stdin.write(name + "\n")
            w.proc.stdin.flush()
            line = w.read_line(timeout)
            if line:
                row = json.loads(line)
            else:
                row = _died(w, name, "timeout" if line is None else "crash", time.perf_counter() - start)
                w.stop()
                w = None
            with lock:
                rows.append(row)
            if on_row:
                on_row(row)
    finally:
        if w is not None:
            w.stop()


def run(names, jobs: int = 2, timeout: float = TIMEOUT_S, on_row=None, samples: int = SAMPLES_PER_OP) -> list[dict]:
    """Check every op in names in `jobs` worker processes; one row per op, in names' order."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    todo: queue.Queue = queue.Queue()
    for n in names:
        todo.put(n)
    rows: list = []
    lock = threading.Lock()
    errors: list = []

    def slot():
        try:
            _drive(todo, rows, lock, env, timeout, samples, on_row)
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=slot) for _ in range(max(1, jobs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    order = {n: i for i, n in enumerate(names)}
    return sorted(rows, key=lambda r: order[r["op"]])


def all_op_names() -> list[str]:
    from .check import float32_ops

    return sorted(float32_ops())


def write_rows(rows, path):
    with open(path, "w") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")


def read_rows(path) -> list[dict]:
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("ops", nargs="*", help="op names (OpInfo name[.variant]); default: every float32 op in op_db")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=TIMEOUT_S)
    ap.add_argument("--samples", type=int, default=SAMPLES_PER_OP, help="sample inputs per op (at most)")
    ap.add_argument("--out", help="write the rows here (JSON lines)")
    args = ap.parse_args(argv)
    names = args.ops or all_op_names()
    start = time.perf_counter()

    def show(row):
        if row["status"] != "match":
            print(f"{row['status']:9s} {row['op']}: {row.get('missing') or row.get('detail', '')}"[:240], flush=True)

    rows = run(names, args.jobs, args.timeout, show, args.samples)
    if args.out:
        write_rows(rows, args.out)
    counts = {}
    for r in rows:
        counts[r["status"]] = counts.get(r["status"], 0) + 1
    print(f"{len(rows)} ops in {time.perf_counter() - start:.0f} s: {counts}")


if __name__ == "__main__":
    main()
