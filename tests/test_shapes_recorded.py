"""`tvk-bench shapes` (issue 31, item 2): the recorder counts every launch of one training step
(forward, loss, backward, optimizer), and the recorded suites weight the tuner's default shapes."""
import json

import pytest
import torch
from torch import nn

import torchvk  # noqa: F401  (the tvk device)
from tvk_kernels.bench import cli
from tvk_kernels.tune import model_suites
from tvk_kernels.tune.model import record_step
from tvk_kernels.tune.targets import MODEL_SHAPES, load_targets


def _mlp_step(steps=1):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 6), nn.ReLU(), nn.Linear(6, 3)).to("tvk")
    x, y = torch.randn(5, 8).to("tvk"), torch.randint(0, 3, (5,)).to("tvk")
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    recorders = [record_step(model, x, lambda out: nn.functional.cross_entropy(out, y), opt) for _ in range(steps)]
    return recorders[-1]


def _by_family(recorder):
    out = {}
    for launch in recorder.launches:
        out.setdefault(launch["family"], []).append(launch)
    return out


def test_the_recorder_finds_the_exact_launches_of_a_training_step():
    launches = _by_family(_mlp_step())
    gemm = {(s["shape"]["M"], s["shape"]["N"], s["shape"]["K"], s["shape"]["layout"]): s["count"]
            for s in launches["matmul"]}
    # forward x @ W1^T, h @ W2^T (bias fused); backward grad @ W2 (h's gradient), grad^T @ h, grad_h^T @ x
    # (the weights'); x needs no gradient, so no grad @ W1
    assert gemm == {(5, 6, 8, "nt"): 1, (5, 3, 6, "nt"): 1, (5, 6, 3, "nn"): 1, (3, 6, 5, "tn"): 1, (6, 8, 5, "tn"): 1}
    assert all(s["dtype"] == "float32" for s in launches["matmul"])
    # the bias gradients: column sums of the two output gradients
    assert sorted((s["shape"]["rows"], s["shape"]["cols"], s["op"]) for s in launches["reduce"]) == \
        [(5, 3, "sum"), (5, 6, "sum")]
    assert sorted((s["op"], s["direction"]) for s in launches["softmax"]) == \
        [("log_softmax", "backward"), ("log_softmax", "forward")]
    assert sorted(s["op"] for s in launches["elementwise_nd"]) == ["relu", "threshold_backward"]
    assert all(s["shape"] == {"n": 30} for s in launches["elementwise_nd"])
    # SGD without momentum: one multi-tensor add over the 4 parameters' 75 elements
    assert [(s["shape"], s["count"]) for s in launches["optim"]] == [({"total_numel": 75, "tensors": 4}, 1)]


def test_a_launch_repeated_is_counted_not_listed_twice():
    torch.manual_seed(0)
    layer = nn.Linear(4, 4).to("tvk")
    x = torch.randn(3, 4).to("tvk")
    recorder = record_step(nn.Sequential(layer, layer), x, lambda out: out.sum())  # the same GEMM twice forward
    forward = [s for s in recorder.launches if s["family"] == "matmul" and s["shape"]["layout"] == "nt"]
    assert [(s["shape"]["M"], s["shape"]["N"], s["shape"]["K"], s["count"]) for s in forward] == [(3, 4, 4, 2)]
    assert recorder.shapes["matmul"].count(forward[0]["shape"]) == 1  # the tuner's view: distinct shapes


def test_tvk_bench_shapes_records_a_users_model(tmp_path, capsys):
    code = cli.main(["shapes", "--model", "tune_model_fixture:build", "--input-shape", "2,3,8,8", "--out",
                     str(tmp_path), "--no-progress"])
    assert code == 0, capsys.readouterr().err
    payload = json.loads((tmp_path / "tune_model_fixture.build.json").read_text())
    assert payload["input"] == [2, 3, 8, 8] and payload["optimizer"] == "adamw"
    conv = [s for s in payload["launches"] if s["family"] == "conv2d"]
    assert sorted(s["shape"]["dir"] for s in conv) == ["bwd_weight", "fwd"]
    # the conv's work from its tuner target: 2 FLOPs per multiply-add of the GEMM it is
    fwd = next(s for s in conv if s["shape"]["dir"] == "fwd")
    assert fwd["flops"] == 2 * fwd["shape"]["M"] * fwd["shape"]["N"] * fwd["shape"]["K"]
    assert payload["families"]["optim"]["launches"] >= 1  # AdamW's step is recorded
    assert "| tune_model_fixture.build | conv2d | 2 | 2 |" in (tmp_path / "shapes.md").read_text()


def test_shapes_options_belong_to_shapes(capsys):
    with pytest.raises(SystemExit):
        cli.main(["zoo", "--model", "tune_model_fixture:build"])
    assert "go with `tvk-bench shapes`" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        cli.main(["shapes", "--model", "tune_model_fixture:build"])
    assert "--model needs --input-shape" in capsys.readouterr().err


def test_suites_rank_shapes_by_their_estimated_time_summed_over_models():
    big = {"M": 1024, "N": 1024, "K": 1024, "batch": 1, "layout": "nt"}
    small = {"M": 64, "N": 64, "K": 64, "batch": 1, "layout": "nt"}
    many = {"M": 128, "N": 128, "K": 128, "batch": 1, "layout": "nt"}

    def launch(shape, count):
        return {"family": "matmul", "shape": shape, "count": count,
                "flops": 2 * shape["M"] * shape["N"] * shape["K"], "bytes": 4 * 3 * shape["M"] * shape["N"]}

    suites = {"a": {"launches": [launch(small, 1), launch(big, 1), launch(many, 400)]},
              "b": {"launches": [launch(many, 400), {"family": "norm", "shape": {"n": 1}, "count": 3}]}}
    # 800 runs of 128^3 (3.4e9 FLOPs, 1.6e8 bytes) outweigh one 1024^3 (2.1e9 FLOPs); one 64^3 weighs least
    assert model_suites.heaviest("matmul", 3, suites) == [many, big, small]
    assert model_suites.heaviest("matmul", 1, suites) == [many]
    assert model_suites.weight(suites["b"]["launches"][1]) == 3.0  # no work known: its count


def test_the_tuners_default_suites_hold_the_shipped_suites_heaviest_shapes():
    targets = load_targets()
    for family, target in targets.items():
        heaviest = model_suites.heaviest(family, MODEL_SHAPES)
        assert all(shape in target.suites["suite"] for shape in heaviest), family
    assert model_suites.load(), "tvk_kernels/tune/suites/ ships the real models' recorded suites"
