"""pytest plugin: this device routed like a GPU without cooperative matrices (RDNA1), every fp16 GEMM the
packed-fp16 kernel can take run there, whatever its size (tuning/matmul_packed_f16.json's device types and
over_tiled set aside). `make zoo-packed` runs the zoo's AMP cases and the fp16 tests with it on lavapipe:
what our first target's AMP training runs, checked against the same criteria as the tiled kernel; it sets
TVK_PACKED_CONV=1, so fp16 convolutions run on packed arithmetic too (opt-in: design note 47), as fused
attention does by default on such a GPU (design note 48)."""
from tvk_kernels.kernels import matmul_packed_f16

matmul_packed_f16.PackedMatmul.routed = lambda self: True
matmul_packed_f16.PackedMatmul.preferred = lambda self, M, N, K, batch: True
