"""Where the host microseconds of one eager op go, layer by layer (issue 27, item 1).

Each case of eager_host_time.py's mix runs once with the dispatcher's entry point wrapped, which
collects the aten calls it makes (autograd's backward calls included). Then, per case, the best
of ROUNDS rounds of CALLS calls of:

- torch:              the statement, through torch (what a user pays);
- our dispatcher:     those aten calls handed to our dispatcher directly, without torch's entry;
- our op code:        the same calls' repeats (_repeat.py) called directly, without the dispatcher's
                      key, lookup and checks (calls that have no repeat count in the dispatcher's row);
each with the Vulkan commands recorded, and again with them discarded (the stream's dry run, so
that only Python runs). The differences are the layers: torch's entry, the dispatcher, our op
code's Python, and recording plus submitting the Vulkan commands. A last table times one
a + b under each early-submit interval (TVK_EARLY_SUBMIT: how often the stream submits while
the GPU is idle) and the cost of one submit.

    python benchmarks/eager_host_stages.py [--quick] [--out DIR]
"""
import argparse
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from eager_host_time import MIX, _SETUP  # noqa: E402  (the one op mix, set up the one way)

_STAGES = _SETUP + r"""
from torchvk import _dispatch, _glue
from torchvk._checks import call_key
from torchvk._storage import get_device
mix, rounds, calls = json.loads(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
stream = get_device().stream
dispatch = _glue.hooks.dispatch


def best_us(fn):
    best = 1e9
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        best = min(best, (time.perf_counter() - start) / calls * 1e6)
        sync()
    return best


def collected(statement):
    # the top-level aten calls one run of the statement makes (nested dispatches are the op's own)
    seen, depth = [], [0]

    def collect(func, args, kwargs):
        if depth[0] == 0:
            seen.append((func, args, kwargs))
        depth[0] += 1
        try:
            return dispatch(func, args, kwargs)
        finally:
            depth[0] -= 1

    _glue.hooks.dispatch = collect
    try:
        eval(statement)
    finally:
        _glue.hooks.dispatch = dispatch
    return seen


def layers(statement):
    fn = eval("lambda: " + statement)
    for _ in range(20):
        fn()
    seen = collected(statement)
    repeats = [_dispatch._repeats.get(call_key(f, a, k)) for f, a, k in seen]

    def dispatched():
        for func, args, kwargs in seen:
            dispatch(func, args, kwargs)

    def repeated():  # a call without a repeat is dispatched: its whole cost lands in the op-code row
        for (func, args, kwargs), repeat in zip(seen, repeats):
            if repeat is None:
                dispatch(func, args, kwargs)
            else:
                repeat(args, kwargs)

    row = {"aten calls": len(seen), "with a repeat": sum(r is not None for r in repeats)}
    for dry in (False, True):
        stream.dry = dry
        suffix = ", commands discarded" if dry else ""
        row["torch" + suffix] = best_us(fn)
        row["our dispatcher" + suffix] = best_us(dispatched)
        row["our op code" + suffix] = best_us(repeated)
    stream.dry = False
    return row


out = {"cases": {name: layers(statement) for name, statement in mix}}
add = lambda: a + b
submits = {}
saved = stream.early_submit
for every in (0, 4, 16, 64):
    stream.early_submit = every
    submits[str(every)] = best_us(add)
stream.early_submit = saved
out["a + b by early-submit interval"] = submits


def submit_one():
    add()
    stream.submit()


out["one a + b and a submit"] = best_us(submit_one)
out["floor"] = best_us(lambda: noop_a + noop_b)

# each Vulkan call of a dispatch alone (cffi, the loader and the driver), recorded into the stream's
# command buffer: a barrier, the last pipeline's push constants, and a grid of no workgroups
from tvk_kernels.runtime import stream as stream_module
add()
pipeline, push = stream._last_pipeline, bytes(16)
with stream_module.runtime_lock:
    def cmd():  # the command buffer being recorded, with the pipeline bound (each round's sync ends one)
        if not stream.recording:
            stream_module._vkCmdBindPipeline(stream._begin(), stream_module._COMPUTE, pipeline.handle)
            stream._last_pipeline = pipeline
        return stream.cmd

    out["one Vulkan call"] = {
        "vkCmdPipelineBarrier": best_us(lambda: stream_module._vkCmdPipelineBarrier(
            cmd(), stream_module._BARRIER_STAGES, stream_module._BARRIER_STAGES, 0, 1, stream._barrier, 0,
            stream_module.NULL, 0, stream_module.NULL)),
        "vkCmdPushConstants": best_us(lambda: stream_module._vkCmdPushConstants(
            cmd(), pipeline.layout, stream_module._STAGE, 0, len(push), push)),
        "vkCmdDispatch": best_us(lambda: stream_module._vkCmdDispatch(cmd(), 0, 1, 1)),
    }
print(json.dumps(out))
"""


def run(rounds: int, calls: int) -> dict:
    p = subprocess.run([sys.executable, "-c", _STAGES, "tvk", json.dumps(MIX), str(rounds), str(calls)],
                       capture_output=True, text=True, cwd=ROOT)
    if p.returncode != 0:
        raise SystemExit(p.stderr[-3000:])
    return json.loads(p.stdout.strip().splitlines()[-1])


def tables(result: dict) -> str:
    from tvk_kernels.bench.common import md_table

    header = ["case", "aten calls", "torch us", "torch (entry, autograd, optimizer)", "our dispatcher",
              "our op code (Python)", "Vulkan recording and submits", "all Python (commands discarded)"]
    rows = []
    for name, c in result["cases"].items():
        vulkan = c["torch"] - c["torch, commands discarded"]
        rows.append([name, c["aten calls"], c["torch"], c["torch"] - c["our dispatcher"],
                     c["our dispatcher, commands discarded"] - c["our op code, commands discarded"],
                     c["our op code, commands discarded"], vulkan, c["torch, commands discarded"]])
    text = md_table(header, rows)
    submits = result["a + b by early-submit interval"]
    text += "\n\n" + md_table(["early-submit interval (dispatches; 0 = off)", "a + b us"],
                              [[every, us] for every, us in submits.items()])
    text += (f"\n\nOne a + b followed by a submit: {result['one a + b and a submit']:.1f} us. "
             f"No-op dispatch floor: {result['floor']:.2f} us. Each Vulkan call of a dispatch alone (the "
             "stream's cffi call, the loader and the driver): "
             + ", ".join(f"{name} {us:.2f} us" for name, us in result["one Vulkan call"].items()) + ".\n")
    return text


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="few calls (a smoke test)")
    ap.add_argument("--out", default=None, help="write eager_host_stages.json (and .md) there")
    args = ap.parse_args()
    rounds, calls = (2, 20) if args.quick else (7, 1000)
    result = run(rounds, calls)
    sys.path.insert(0, str(ROOT))
    text = tables(result)
    print(text)
    if args.out:
        from tvk_kernels import get_device
        from tvk_kernels.bench.common import environment, write_result

        payload = {"experiment": "eager_host_stages", "environment": environment(get_device(0)),
                   "unit": "us per call (host)", "repeats": f"best of {rounds} rounds x {calls} calls",
                   "quick": args.quick, "mix": dict(MIX), "result": result}
        write_result(args.out, "eager_host_stages", payload, text)


if __name__ == "__main__":
    main()
