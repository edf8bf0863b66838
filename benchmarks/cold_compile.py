"""Cold compile: where the first compiled training step of each `tvk-bench models` model spends its time.

Issue 30 item 7 asks for the first compiled step of each model in at most 2 s on the H200 with empty
caches. Whether that is in our hands or blocked by torch's own tracing shows in the differences of
first steps between these variants, each model x variant in a fresh Python process with empty caches
(TVK_CACHE_DIR, TORCHINDUCTOR_CACHE_DIR, NVIDIA's and Mesa's shader disk caches), so nothing is warm:
  eager_serial     eager tvk ops with TVK_BACKGROUND_BUILDS=0: each pipeline built at its first launch, one
                   after another (the runtime before background builds)
  eager            eager tvk ops: the kernels' pipeline builds (in the background, in parallel), no compile
  dynamo_only      torch.compile(backend="eager"): Dynamo's trace, then eager tvk ops
  dynamo_aot       Dynamo, then AOTAutograd's trace as the tvk backend makes it, its graphs dropped and
                   Dynamo's graph run as eager tvk ops (torch's own backend="aot_eager" cannot run tvk
                   tensors: see aot_trace_backend)
  tvk              torch.compile(backend="tvk"): Dynamo, then ours (AOTAutograd, fusion, programs,
                   pipeline builds, replay)
  torchvk.compile  torchvk.compile(model, loss_fn=...): no Dynamo, our own AOTAutograd trace
Dynamo's share ~ dynamo_only - eager, AOTAutograd's ~ dynamo_aot - dynamo_only, ours ~ tvk - dynamo_aot
(first steps). torch's lazy imports (Dynamo, AOTAutograd, the tvk backend module) are made before the
first step and reported apart, as tvk-bench ablations does. A step is timed to `.item()` of its loss;
the warm step is the median of the 3 steps after the first.

    python benchmarks/cold_compile.py [--models hf_gpt2,timm_resnet18] [--variants eager,tvk]
                                      [--size bench] [--timeout 300] [--out DIR] [--quick]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

VARIANTS = ("eager_serial", "eager", "dynamo_only", "dynamo_aot", "tvk", "torchvk.compile")
TARGET_SECONDS = 2.0  # issue 30 item 7: the first compiled step, cold, on the H200
WARM_STEPS = 3
ERROR_TAIL_CHARS = 800


# ---- the child: one model x variant in a fresh process ---------------------------------------------

aot_traces = []  # the dynamo_aot variant's traces (CompiledGraphs), for their trace seconds


def aot_trace_backend(graph_module, example_inputs):
    """A torch.compile backend: AOTAutograd traces Dynamo's graph as the tvk backend has it traced (the same
    graph preparation, decompositions and partitioner: backend.py's DynamoGraph, trace.py's CompiledGraphs),
    once per input signature on the first call with real inputs, with our compilers (fusion, programs,
    pipelines, replay) left out; the traced graphs are then dropped and Dynamo's graph runs as eager tvk ops,
    as under backend="eager". torch's own "aot_eager" fails on tvk tensors: AOTAutograd sees Dynamo's fake
    inputs as a tensor subclass (FakeTVKTensor) and its wrapper asserts that the real inputs are of that
    class ("expected FakeTVKTensor, got TVKTensor")."""
    from functorch.compile import make_boxed_func  # lazy: imported already, with the tvk backend
    from torchvk.compile.backend import DynamoGraph
    from torchvk.compile.trace import CompiledGraphs, signature

    class TraceOnly(CompiledGraphs):
        def _compiler(self, kind):
            return lambda traced, inputs: make_boxed_func(traced)  # traced, not compiled

    prepared = DynamoGraph(graph_module)  # the tvk backend's copy: devices to CPU, tensor attributes as inputs
    traced_signatures = {}

    def run(*args):
        inputs = list(args + prepared.constants)
        key = signature(inputs)
        if key not in traced_signatures:
            traced_signatures[key] = TraceOnly(prepared.gm, [], inputs)
            aot_traces.append(traced_signatures[key])
        return graph_module(*args)

    return run


def build_step(name: str, variant: str, size: str):
    """(step, compiled): step(x, y) runs one training step of zoo model `name` on tvk and returns the
    loss; compiled is the torchvk.compile module (its compile_stats()), else None. eager and tvk are
    zoo.trainer's own modes; the others mirror its "torch.compile" branch with another compiler, and
    torchvk.compile its "torchvk.compile" one, keeping the module."""
    import torch  # lazy: the child times its imports; the parent never needs torch here
    import torchvk
    from torchvk.experiments import zoo, zoo_models

    if variant in ("eager", "eager_serial"):  # eager_serial: its environment turns background builds off
        return zoo.trainer(name, "tvk", "eager", size)[1], None
    if variant == "tvk":
        return zoo.trainer(name, "tvk", "torch.compile", size)[1], None
    entry = zoo_models.ZOO[name]
    model = zoo_models.build(name, size).to("tvk")
    optimizer = entry.optimizer(model.parameters())
    if variant == "torchvk.compile":
        compiled = loss_of = torchvk.compile(model, loss_fn=entry.loss)
    else:
        torch._dynamo.reset()  # as zoo.trainer: each model from Dynamo's empty caches
        backend = "eager" if variant == "dynamo_only" else aot_trace_backend
        compiled_model = torch.compile(model, backend=backend)
        loss_of = lambda x, y: entry.loss(compiled_model(x), y)  # noqa: E731
        compiled = None

    def step(x, y):
        optimizer.zero_grad(set_to_none=True)
        loss = loss_of(x, y)
        loss.backward()
        optimizer.step()
        return loss

    return step, compiled


def trace_seconds(variant: str, compiled):
    """Seconds our compiled graphs spent tracing (AOTAutograd) and building their programs (dynamo_aot:
    tracing only), summed over the graphs; None for the variants that have none."""
    if variant == "dynamo_aot":
        stats = [graphs.stats() for graphs in aot_traces]
    elif variant == "tvk":
        from torchvk.compile import backend  # lazy: loaded by the first torch.compile(backend="tvk") already

        stats = [s for graph in backend.compiled_graphs for s in graph.compile_stats()]
    elif variant == "torchvk.compile":
        stats = compiled.compile_stats()
    else:
        return None
    return sum(s["trace_seconds"] for s in stats)


def measure_child(name: str, variant: str, size: str) -> dict:
    """One model x variant, in this fresh process: its imports, build, first step and warm step, in seconds."""
    started = time.perf_counter()
    import torch  # lazy: timed here (import_s), in a process that imported nothing before
    import torchvk  # noqa: F401  (registers the tvk device and the "tvk" backend name)
    from torchvk.experiments import zoo_models
    from tvk_kernels import get_device

    imported = time.perf_counter()
    # torch's lazy imports, paid by any first compile (and Dynamo by an optimizer's first step): made here,
    # timed apart, so the first step holds tracing, not imports
    import functorch.compile  # noqa: F401  # lazy: timed apart, as the comment above says
    import torch._dynamo
    import torch._functorch.aot_autograd  # noqa: F401
    import torchvk.compile.backend  # noqa: F401  (the same Dynamo settings for every variant)

    lazy_imported = time.perf_counter()
    step, compiled = build_step(name, variant, size)
    batches = [(x.to("tvk"), y.to("tvk")) for x, y in zoo_models.batches(name, 1 + WARM_STEPS, size)]
    torch.tvk.synchronize()
    built = time.perf_counter()

    pipelines = get_device(0).pipelines
    pipelines_before, build_seconds_before = len(pipelines.pipelines), pipelines.compile_seconds
    x, y = batches[0]
    t0 = time.perf_counter()
    first_loss = float(step(x, y).item())  # .item(): a sync point, the step has really run
    first_step = time.perf_counter() - t0
    result = {"first_step_s": first_step, "first_loss": first_loss,
              "import_s": imported - started, "lazy_imports_s": lazy_imported - imported,
              "build_s": built - lazy_imported,
              "pipelines_built": len(pipelines.pipelines) - pipelines_before,
              # summed over the build threads: more than the wall time where they build in parallel
              "pipeline_build_s": pipelines.compile_seconds - build_seconds_before,
              "trace_s": trace_seconds(variant, compiled)}
    if variant in ("dynamo_only", "dynamo_aot", "tvk"):
        result["dynamo_graphs"] = torch._dynamo.utils.counters["stats"]["unique_graphs"]
        # Dynamo's own timer of its frame compiles (our backends compile on the first call, outside it):
        # a direct number beside the differences of first steps, which pipeline builds make noisy
        frame_compiles = getattr(torch._dynamo.utils, "compilation_time_metrics", {}).get("_compile.compile_inner")
        result["dynamo_compile_s"] = sum(frame_compiles) if frame_compiles else None
    warm = []
    for x, y in batches[1:]:
        t0 = time.perf_counter()
        step(x, y).item()
        warm.append(time.perf_counter() - t0)
    result["warm_step_s"] = statistics.median(warm)
    return result


# ---- the parent: a fresh process with empty caches per model x variant --------------------------------

def child_environment(cache_root: Path, variant: str) -> dict:
    """The parent's environment (PYTHONPATH and the rest) with every compile cache pointed at an empty folder
    (eager_serial: background pipeline builds off)."""
    env = dict(os.environ)
    if variant == "eager_serial":
        env["TVK_BACKGROUND_BUILDS"] = "0"
    env.update(TVK_CACHE_DIR=str(cache_root / "tvk"), TORCHINDUCTOR_CACHE_DIR=str(cache_root / "inductor"),
               __GL_SHADER_DISK_CACHE_PATH=str(cache_root / "nvidia"), __GL_SHADER_DISK_CACHE="0",
               MESA_SHADER_CACHE_DISABLE="1")  # Mesa's (lavapipe, RADV): off, as NVIDIA's
    return env


def _text(output) -> str:
    # TimeoutExpired carries bytes whatever text=True said
    return output.decode(errors="replace") if isinstance(output, bytes) else (output or "")


def failure(what: str, stderr: str) -> dict:
    """A child's failure as a result: what happened and its last line of stderr (a traceback's exception),
    with the tail of its stderr."""
    lines = [line for line in stderr.strip().splitlines() if line.strip()]
    return {"error": f"{what}: {lines[-1] if lines else 'no stderr'}"[:400],
            "stderr_tail": stderr[-ERROR_TAIL_CHARS:]}


def run_child(name: str, variant: str, size: str, timeout: float) -> dict:
    """One model x variant in a fresh process: its result, or {"error": ...} (a failure is a result)."""
    spec = json.dumps({"name": name, "variant": variant, "size": size})
    with tempfile.TemporaryDirectory(prefix="tvk-cold-") as cache_root:
        try:
            done = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--child", spec],
                                  capture_output=True, text=True, timeout=timeout,
                                  env=child_environment(Path(cache_root), variant))
        except subprocess.TimeoutExpired as e:
            return failure(f"timed out after {timeout:g} s", _text(e.stderr))
    if done.returncode != 0:
        return failure(f"exit code {done.returncode}", done.stderr)
    try:
        return json.loads(done.stdout.strip().splitlines()[-1])
    except (IndexError, ValueError):
        return failure("no JSON line on stdout", done.stdout + done.stderr)


def first_step(results: dict, variant: str):
    return results.get(variant, {}).get("first_step_s")


def difference(results: dict, later: str, earlier: str):
    a, b = first_step(results, later), first_step(results, earlier)
    return a - b if a is not None and b is not None else None


def split(results: dict) -> dict:
    """tvk's first step split by the differences between variants (see the module docstring)."""
    tvk = first_step(results, "tvk")
    return {"dynamo_s": difference(results, "dynamo_only", "eager"),
            "aot_autograd_s": difference(results, "dynamo_aot", "dynamo_only"),
            "ours_s": difference(results, "tvk", "dynamo_aot"),
            "tvk_within_target": None if tvk is None else tvk <= TARGET_SECONDS}


def earlier_models(out_dir, size: str) -> dict:
    """The models of a cold_compile.json already in out_dir at the same size: a run of other models adds to them."""
    path = Path(out_dir) / "cold_compile.json" if out_dir else None
    if path is None or not path.exists():
        return {}
    try:
        earlier = json.loads(path.read_text())
    except ValueError:
        return {}  # unreadable: replaced
    return earlier.get("models", {}) if earlier.get("size") == size else {}


def table(models: dict, variants) -> str:
    from tvk_kernels.bench.common import md_table  # lazy: tvk_kernels is found through sys.path set above

    headers = (["model"] + [f"{v} first s" for v in variants] +
               ["Dynamo s", "AOTAutograd s", "ours s", "Dynamo compile s", "AOTAutograd trace s", "tvk trace s",
                "tvk warm step s", "lazy imports s", f"tvk <= {TARGET_SECONDS:g} s", "errors"])
    rows = []
    for name, entry in models.items():
        results, shares = entry["variants"], entry["split"]
        tvk = results.get("tvk", {})
        within = shares["tvk_within_target"]
        errors = "; ".join(f"{v}: {r['error'][:120]}" for v, r in results.items() if "error" in r)
        rows.append([name] + [first_step(results, v) for v in variants] +
                    [shares["dynamo_s"], shares["aot_autograd_s"], shares["ours_s"], tvk.get("dynamo_compile_s"),
                     results.get("dynamo_aot", {}).get("trace_s"), tvk.get("trace_s"),
                     tvk.get("warm_step_s"), tvk.get("lazy_imports_s"),
                     None if within is None else ("yes" if within else "not yet"),
                     errors.replace("|", "/").replace("\n", " ") or None])
    return ("First training step of each model in a fresh process with empty caches, seconds. Dynamo ~ "
            "dynamo_only - eager, AOTAutograd ~ dynamo_aot - dynamo_only, ours ~ tvk - dynamo_aot; torch's "
            "lazy imports made before the first step, apart. Measured directly: Dynamo compile (Dynamo's own "
            "timer, tvk child), AOTAutograd trace (dynamo_aot's trace alone), tvk trace (the same trace with our "
            "compilers, fusion and programs, inside it).\n\n" + md_table(headers, rows))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", help="comma-separated zoo names (default: tvk-bench models' list, the zoo's "
                                         "entries from a third-party library)")
    parser.add_argument("--variants", default=",".join(VARIANTS), help="comma-separated, of " + ", ".join(VARIANTS))
    parser.add_argument("--size", default="bench", choices=("bench", "tiny"),
                        help="the zoo's dims (tvk-bench models': bench)")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per model x variant process")
    parser.add_argument("--out", default=None, help="folder for cold_compile.json and .md (written after every model)")
    parser.add_argument("--quick", action="store_true", help="tiny size (a check of the script)")
    parser.add_argument("--child", help=argparse.SUPPRESS)  # JSON spec: run one model x variant, print one JSON line
    args = parser.parse_args()
    if args.child:
        spec = json.loads(args.child)
        print(json.dumps(measure_child(spec["name"], spec["variant"], spec["size"])), flush=True)
        return
    # not before the child's branch: a child times its own imports
    from torchvk.experiments import zoo_models  # lazy: imports torch and torchvk; a child times them itself

    names = args.models.split(",") if args.models else zoo_models.third_party()  # tvk-bench models' list
    unknown = [n for n in names if n not in zoo_models.ZOO]
    if unknown:
        parser.error(f"--models: no zoo model {', '.join(unknown)}; choose from {', '.join(zoo_models.ZOO)}")
    variants = args.variants.split(",")
    unknown = [v for v in variants if v not in VARIANTS]
    if unknown:
        parser.error(f"--variants: no variant {', '.join(unknown)}; choose from {', '.join(VARIANTS)}")
    size = "tiny" if args.quick else args.size

    from tvk_kernels import get_device  # lazy: after the arguments are checked (a bad name opens no device)
    from tvk_kernels.bench.common import environment, write_result

    device = get_device(0)  # the parent's: environment() names the GPU; each child opens its own
    models = earlier_models(args.out, size)
    for number, name in enumerate(names, 1):
        results = {}
        for variant in variants:
            result = results[variant] = run_child(name, variant, size, args.timeout)
            said = result["error"][:200] if "error" in result else f"first step {result['first_step_s']:.3f} s"
            print(f"cold_compile: {name} ({number}/{len(names)}) {variant}: {said}", flush=True)
        models[name] = {"variants": results, "split": split(results)}
        if args.out:  # after every model: a run cut short keeps what it finished
            payload = {"experiment": "cold_compile", "environment": environment(device), "size": size,
                       "variants": variants, "timeout_s": args.timeout, "target_s": TARGET_SECONDS, "models": models}
            write_result(args.out, "cold_compile", payload, table(models, variants))
    print(table(models, variants))


if __name__ == "__main__":
    os.environ.setdefault("TVK_VALIDATION", "0")
    main()
