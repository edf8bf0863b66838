"""The roofline probe (tvk_kernels/bench/roofline.py): its kernels compute what they claim, a
wrong result is an error, and the kernel benchmark's fractions of peak are its rates over them."""
import numpy as np
import pytest

from tvk_kernels.bench import roofline
from tvk_kernels.errors import TVKError
from torchvk.experiments.kernels import of_peak


def test_fma_probe_matches_numpy_in_both_precisions(device):
    assert roofline.fma_rate(device, fp16=False, quick=True) > 0  # checks its result against numpy itself
    features = device.facts.features
    if features.get("shader_float16") and features.get("storage_16bit"):
        assert roofline.fma_rate(device, fp16=True, quick=True) > 0


def test_the_expected_fma_result_follows_rounding():
    # fp16 rounds to a spacing of 2 past 2048: the chain stops gaining there, as the hardware's does
    exact = roofline._fma_expected(16, 8, np.float32)
    assert exact[0, 0] == np.float32(sum(range(8)) + 8 * 32)
    rounded = roofline._fma_expected(16, 1024, np.float16)  # 4096 steps: every chain stops at 2048
    assert np.all(rounded == 8 * 2048)


def test_a_probe_that_skipped_work_is_an_error():
    done = roofline._fma_expected(32, 8, np.float32)
    with pytest.raises(TVKError, match="roofline probe fp32 FMA.*would not be a peak"):
        roofline._check("fp32 FMA", roofline._fma_expected(32, 4, np.float32), done)


def test_copy_probe_copies(device):
    rate, nbytes = roofline.copy_bandwidth(device, 4096 + 20)
    assert nbytes == 4096 + 16 and rate > 0


def test_cooperative_matrix_probe_is_absent_without_the_extension(device):
    if "VK_KHR_cooperative_matrix" in getattr(device, "extensions", ()):
        pytest.skip("the device has cooperative matrices: the H200 run measures this probe")
    assert roofline.coopmat_rate(device, quick=True) is None


def test_fractions_of_peak_are_rates_over_the_peak_of_their_kind():
    peaks = {"fp32_fma_tflops": 50.0, "fp16_fma_tflops": 100.0, "coopmat_fp16_tflops": 400.0, "copy_gbps": 4000.0}
    payload = {
        "conv2d": [{"tvk_tflops": 10.0, "tvk_s": 2.0, "cudnn_s": 1.0}],
        "bandwidth": [{"tvk_gbps": 1000.0, "tvk_s": 1.0, "cuda_s": 0.5}],
        "gemm_sweep": {"rows": [{"dtype": "float16", "tvk_tflops": 100.0, "tvk_s": 1.0, "cuda_s": None},
                                {"dtype": "float32", "tvk_tflops": 25.0, "tvk_s": 1.0, "cuda_s": 0.5}]},
        "conv_sweep": {"rows": []},
        "sdpa": [],
        "model_shapes": {"gemm": {"rows": [{"dtype": "float32", "tvk_tflops": 10.0, "tvk_s": 1.0, "cuda_s": 0.25}]},
                         "conv": {"rows": []}},
    }
    means = of_peak(payload, peaks)
    real = payload["model_shapes"]["gemm"]["rows"][0]  # the real-model shapes: their rows too
    assert real["tvk_of_peak"] == pytest.approx(0.2) and real["cuda_of_peak"] == pytest.approx(0.8)
    assert means["real-model GEMM float32"] == {"tvk": pytest.approx(0.2), "cuda": pytest.approx(0.8)}
    assert payload["conv2d"][0]["tvk_of_peak"] == pytest.approx(0.2)
    assert payload["conv2d"][0]["cuda_of_peak"] == pytest.approx(0.4)  # twice as fast: twice the rate
    assert payload["bandwidth"][0]["tvk_of_peak"] == pytest.approx(0.25)
    assert payload["bandwidth"][0]["cuda_of_peak"] == pytest.approx(0.5)
    fp16, fp32 = payload["gemm_sweep"]["rows"]
    assert fp16["tvk_of_peak"] == pytest.approx(0.25) and fp16["cuda_of_peak"] is None  # of the tensor-unit peak
    assert fp32["tvk_of_peak"] == pytest.approx(0.5) and fp32["cuda_of_peak"] == pytest.approx(1.0)
    assert means["gemm_sweep float32"] == {"tvk": pytest.approx(0.5), "cuda": pytest.approx(1.0)}
    assert means["gemm_sweep float16"]["cuda"] is None
