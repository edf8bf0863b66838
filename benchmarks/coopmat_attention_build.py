"""Build attention_coopmat.comp's kernels on this device, each in its own process, and say which the driver
builds and which crash it (a diagnostic: the NVIDIA driver crashes building the backward kernels, design note 54; the
template's BISECT bits leave parts of them out to find the construct it fails on).

    python benchmarks/coopmat_attention_build.py
"""
import os
import subprocess
import sys

CODE = r"""
import sys
from tvk_kernels import get_device
from tvk_kernels.kernels import attention_coopmat
dev = get_device(0)
kernel, head, vec, br, bc, bisect = (int(x) for x in sys.argv[1:7])
defines = {"KERNEL": kernel, "HEAD": head, "BR": br, "BC": bc, "SUBGROUP_SIZE": dev.facts.subgroup_size, "VEC": vec,
           "MASK": 0, "CAUSAL": 0, "DROPOUT": 0, "SEED_BUF": 0, "EMULATE": 0, "BISECT": bisect}
shared = attention_coopmat.shared_bytes(kernel, br, bc, head, dev.facts.subgroup_size, False)
dev.pipelines.get("attention_coopmat.comp", defines, local_size=(br // 16 * dev.facts.subgroup_size, 1, 1),
                  push_size=128)
print("built", shared)
"""
# kernel, head, vec, BR, BC, BISECT (the template's bits that leave parts of a backward kernel out)
CASES = [(0, 64, 8, 64, 64, 0)] + [(k, 64, 8, 64, 32, bits) for k in (2, 3) for bits in (0, 1, 2, 4, 8, 3, 12, 15)] + [
    (2, 64, 1, 16, 16, 0), (3, 64, 1, 16, 16, 15)]

UNOPTIMIZED = [(2, 64, 8, 64, 32, 0), (3, 64, 8, 64, 32, 0)]  # the same kernels without spirv-opt (TVK_SPIRV_OPT=0)

for args, opt in [(c, "1") for c in CASES] + [(c, "0") for c in UNOPTIMIZED]:
    done = subprocess.run([sys.executable, "-c", CODE, *map(str, args)], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "TVK_SPIRV_OPT": opt})
    print("kernel, head, vec, BR, BC, BISECT", args, "spirv-opt", opt, "rc", done.returncode, done.stdout.strip()[-40:],
          done.stderr.strip()[-300:].replace("\n", " | "), flush=True)
