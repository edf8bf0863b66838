"""The conv sweep of `tvk-bench kernels` (torchvk/experiments/conv_sweep.py)."""
from torchvk.experiments import conv_sweep
from tvk_kernels.bench import report


def test_layers_are_untuned_bounded_and_varied():
    tuned = conv_sweep.tuned_keys()
    assert tuned and 25 <= len(conv_sweep.LAYERS)
    for layer in conv_sweep.LAYERS:
        assert conv_sweep._key(layer) not in tuned, layer  # the sweep measures what tuning did not see
        assert conv_sweep.flops(layer) <= 2e9, layer
        assert layer["x"][0] in (1, 8, 32)
    kinds = {(layer["w"][2], layer["stride"], layer["dilation"], layer["groups"] > 1) for layer in conv_sweep.LAYERS}
    for kind in ((7, 2, 1, False), (3, 1, 1, False), (3, 2, 1, False), (1, 1, 1, False), (1, 2, 1, False),
                 (3, 1, 1, True), (3, 2, 1, True), (3, 1, 2, False)):
        assert kind in kinds, kind


def test_quick_run_checks_every_direction_and_reports(device):
    layers = [conv_sweep._layer("odd", 2, 6, 4, 9, 3, stride=2, groups=2), conv_sweep._layer("1x1", 1, 5, 3, 4, 1)]
    section, md = conv_sweep.run(device, quick=True, layers=layers)
    assert [(r["name"], r["direction"]) for r in section["rows"]] == [
        (layer["name"], d) for layer in layers for d in conv_sweep.DIRECTIONS]
    for r in section["rows"]:
        assert r["tvk_s"] > 0 and r["rel_err"] < 1e-5 and r["cudnn_s"] is None
    assert section["summary"]["float32"]["count"] == 6 and section["worst"] == []
    assert "Conv sweep" in md and "odd: 3x3 6->4 9px b2 s2 g2" in md
    line = report.kernels({"conv2d": [{"max_rel_err": 0.0}], "bandwidth": [], "per_op_overhead": {"tvk_us": 1.0},
                           "conv_sweep": section})
    assert any(x.startswith("conv sweep") and "6 layer/direction pairs match torch CPU" in x for x in line)
    # results from before the sweep have no "conv_sweep": no line, no error
    older = report.kernels({"conv2d": [{"max_rel_err": 0.0}], "bandwidth": [], "per_op_overhead": {"tvk_us": 1.0}})
    assert not any(x.startswith("conv sweep") for x in older)
