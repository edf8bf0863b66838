"""Build attention_coopmat.comp's kernels on this device, each in its own process, and say which the driver
builds and which crash it (a diagnostic: the NVIDIA driver crashed building the backward kernels while they kept two arrays
of matrices, design note 54), with the driver's executable statistics of each (registers, stack: spills show as stack).

    python benchmarks/coopmat_attention_build.py

Each case runs at the tiles the runtime would pick for its head dim (kernels/attention_coopmat.py tiles: the
configured BR/BC halved until they fit the device's shared memory).
"""
import subprocess
import sys

CODE = r"""
import sys
from tvk_kernels import get_device
from tvk_kernels.kernels import attention_coopmat
from tvk_kernels.kernels.launch import family
dev = get_device(0)
kernel, head, vec, br, bc, hsplit = (int(x) for x in sys.argv[1:7])
params = {"BR": br, "BC": bc, "BBR": br, "BBC": bc, "HSPLIT": hsplit}
br, bc = family(dev, attention_coopmat.CoopAttention).tiles(kernel, params, head, None)
defines = {"KERNEL": kernel, "HEAD": head, "BR": br, "BC": bc, "SUBGROUP_SIZE": dev.facts.subgroup_size, "VEC": vec,
           "MASK": 0, "CAUSAL": 0, "DROPOUT": 0, "SEED_BUF": 0, "EMULATE": 0, **({"HSPLIT": hsplit} if hsplit > 1 else {})}
shared = attention_coopmat.shared_bytes(kernel, br, bc, head, dev.facts.subgroup_size, False, hsplit)
pipe = dev.pipelines.get("attention_coopmat.comp", defines, local_size=(br // 16 * dev.facts.subgroup_size, 1, 1),
                         push_size=128, capture_stats=True)
stats = {k: v for k, v in (getattr(pipe, "stats", None) or {}).items() if "Local Memory" not in k}
print("built BR", br, "BC", bc, "shared", shared, stats)
"""
# kernel, head, vec, BR, BC, HSPLIT (dK/dV's split of the head dim)
CASES = [(0, 64, 8, 64, 32, 1), (2, 64, 8, 64, 32, 1), (3, 64, 8, 64, 32, 1), (3, 64, 8, 64, 32, 2),
         (0, 128, 8, 64, 32, 1), (2, 128, 8, 64, 32, 1), (3, 128, 8, 64, 32, 1), (3, 128, 8, 64, 32, 2),
         (3, 128, 8, 64, 32, 4), (0, 80, 8, 64, 32, 1), (2, 80, 8, 64, 32, 1), (3, 80, 8, 64, 32, 1),
         (2, 48, 1, 16, 16, 1), (3, 48, 1, 16, 16, 1)]

for args in CASES:
    done = subprocess.run([sys.executable, "-c", CODE, *map(str, args)], capture_output=True, text=True, timeout=120)
    print("kernel, head, vec, BR, BC, HSPLIT", args, "rc", done.returncode, done.stdout.strip()[-300:],
          done.stderr.strip()[-300:].replace("\n", " | "), flush=True)
