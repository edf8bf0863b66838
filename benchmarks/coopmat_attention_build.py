"""Build attention_coopmat.comp's kernels on this device, each in its own process, and say which the driver
builds and which crash it (a diagnostic: the NVIDIA driver crashed building the backward kernels while they kept two arrays
of matrices, design note 54).

    python benchmarks/coopmat_attention_build.py
"""
import subprocess
import sys

CODE = r"""
import sys
from tvk_kernels import get_device
from tvk_kernels.kernels import attention_coopmat
dev = get_device(0)
kernel, head, vec, br, bc = (int(x) for x in sys.argv[1:6])
defines = {"KERNEL": kernel, "HEAD": head, "BR": br, "BC": bc, "SUBGROUP_SIZE": dev.facts.subgroup_size, "VEC": vec,
           "MASK": 0, "CAUSAL": 0, "DROPOUT": 0, "SEED_BUF": 0, "EMULATE": 0}
shared = attention_coopmat.shared_bytes(kernel, br, bc, head, dev.facts.subgroup_size, False)
dev.pipelines.get("attention_coopmat.comp", defines, local_size=(br // 16 * dev.facts.subgroup_size, 1, 1),
                  push_size=128)
print("built", shared)
"""
# kernel, head, vec, BR, BC
CASES = [(0, 64, 8, 64, 64), (2, 64, 8, 64, 32), (3, 64, 8, 64, 32), (2, 128, 8, 64, 32), (3, 128, 8, 64, 32),
         (2, 48, 1, 16, 16), (3, 48, 1, 16, 16)]

for args in CASES:
    done = subprocess.run([sys.executable, "-c", CODE, *map(str, args)], capture_output=True, text=True, timeout=120)
    print("kernel, head, vec, BR, BC", args, "rc", done.returncode, done.stdout.strip()[-40:],
          done.stderr.strip()[-300:].replace("\n", " | "), flush=True)
