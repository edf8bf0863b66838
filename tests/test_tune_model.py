"""tvk-tune --model: the shapes one training step launches are recorded and tuned (issue #16)."""
import json

import numpy as np
import pytest

from tvk_kernels.kernels import launch
from tvk_kernels.kernels.conv_family import tune_shape
from tvk_kernels.kernels.matmul import matmul
from tvk_kernels.search_space import bucket_of
from tvk_kernels.tune import cli
from tvk_kernels.tune.model import record_training_step
from tvk_kernels.tune.record import ShapeRecorder

MODEL = "tune_model_fixture:build"  # tests/ is on sys.path under pytest
INPUT = (2, 3, 8, 8)


def gemms(shapes):
    return {(s["M"], s["N"], s["K"], s["batch"]) for s in shapes}


def test_recorded_shapes_are_what_the_training_step_launches():
    shapes = record_training_step(MODEL, INPUT).shapes
    # the conv's forward and weight gradient; its input needs no gradient, so no bwd_input launch
    conv = [tune_shape(d, INPUT, (4, 3, 3, 3)) for d in ("fwd", "bwd_weight")]
    assert sorted(shapes["conv2d"], key=json.dumps) == sorted(conv, key=json.dumps)
    # the linear layer: x @ W^T (M=batch, N=out, K=in), grad @ W (the input gradient), grad^T @ x (the weight's)
    assert gemms(shapes["matmul"]) == {(2, 5, 144, 1), (2, 144, 5, 1), (5, 144, 2, 1)}
    assert {s["layout"] for s in shapes["matmul"] if (s["M"], s["N"]) == (2, 5)} == {"nt"}
    # cross_entropy's softmax over the 5 classes; the linear bias gradient sums the batch (dim 0)
    assert shapes["softmax"] == [{"rows": 2, "cols": 5, "dim": -1, "n": 10}]
    assert {"rows": 2, "cols": 5, "dim": 0, "n": 10} in shapes["reduce"]
    for fam, recorded in shapes.items():  # every recorded shape is one its family's tuner buckets
        assert all(bucket_of(fam, s) for s in recorded)


def test_recorder_is_off_outside_its_context(device):
    a = device.upload(np.ones((6, 4), "float32"))
    b = device.upload(np.ones((4, 5), "float32"))
    out = device.allocator.alloc(4 * 30)
    matmul(device, a.address, b.address, out.address, 3, 5, 4)  # before: not recorded; memoizes the call
    with ShapeRecorder() as rec:
        matmul(device, a.address, b.address, out.address, 3, 5, 4)  # the memoized fast path records too
        with pytest.raises(RuntimeError, match="do not nest"):
            ShapeRecorder().__enter__()
    matmul(device, a.address, b.address, out.address, 6, 5, 4)  # after: not recorded
    device.stream.synchronize()
    assert launch._recorder is None
    assert rec.shapes == {"matmul": [{"M": 3, "N": 5, "K": 4, "batch": 1, "layout": "nn"}]}
    for buf in (a, b, out):
        buf.free()


@pytest.mark.parametrize("spec, words", [
    ("no_such_module_xyz:build", ["no_such_module_xyz", "pkg.module:factory"]),
    ("tune_model_fixture:missing", ["no attribute 'missing'", "tune_model_fixture", "pkg.module:factory"]),
    ("tune_model_fixture", ["pkg.module:factory"]),
    ("tune_model_fixture:not_a_factory", ["not callable"]),
])
def test_bad_model_string_says_what_is_missing(spec, words, capsys):
    assert cli.main(["--model", spec, "--input-shape", "2,3,8,8", "--no-progress"]) == 1
    err = capsys.readouterr().err
    assert all(w in err for w in words), err


def test_bad_input_shape_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as e:
        cli.main(["--model", MODEL, "--input-shape", "2,x"])
    assert e.value.code == 2 and "--input-shape" in capsys.readouterr().err


def test_cli_tunes_the_models_buckets(config_dir, tmp_path, capsys):
    rc = cli.main(["--model", MODEL, "--input-shape", "2,3,8,8", "--trials", "2", "--ops", "matmul,conv2d",
                   "--storage", f"sqlite:///{tmp_path}/t.db", "--out", str(config_dir), "--no-progress"])
    out = capsys.readouterr().out
    assert rc == 0, out
    recorded = record_training_step(MODEL, INPUT).shapes
    (path,) = config_dir.glob("*.json")
    families = json.loads(path.read_text())["families"]
    for fam in ("matmul", "conv2d"):
        want = {bucket_of(fam, s) for s in recorded[fam]}
        assert want <= set(families[fam]["buckets"]), (fam, want, families[fam]["buckets"])
        tuned = [s for b in want for s in families[fam]["buckets"][b]["provenance"]["shapes"]]
        assert sorted(tuned, key=json.dumps) == sorted(recorded[fam], key=json.dumps)
        assert f"recorded {len(recorded[fam])} {fam} shapes" in out
    assert set(families) == {"matmul", "conv2d"}  # --ops: the other recorded families are only printed
