# Diagnostic: GPU time of a 2048^2 fp32 matmul, fresh and after a CUDA context. Usage: python benchmarks/clock_check.py [cuda]
# (on the H200: after a host-bound training step in the same process the driver stayed at its idle SM clock).
import sys, time, json, numpy as np
from tvk_kernels import get_device
from tvk_kernels.kernels.matmul import matmul
d = get_device(0)
n = 2048
A = d.upload(np.random.rand(n, n).astype(np.float32)); B = d.upload(np.random.rand(n, n).astype(np.float32))
C = d.allocator.alloc(4 * n * n)
def t(reps=10, sync_each=True):
    matmul(d, A.address, B.address, C.address, n, n, n); d.synchronize()
    with d.stream.profiling() as rec:
        for _ in range(reps):
            matmul(d, A.address, B.address, C.address, n, n, n)
            if sync_each: d.synchronize()
    return float(np.median([x for _, x in rec])) * 1e3
out = {"no_cuda_sync_each_ms": t(), "no_cuda_batched_ms": t(sync_each=False)}
if len(sys.argv) > 1:
    import torch; x = torch.ones(1, device="cuda"); torch.cuda.synchronize()
    out["after_cuda_init_sync_each_ms"] = t(); out["after_cuda_init_batched_ms"] = t(sync_each=False)
print(json.dumps(out))
