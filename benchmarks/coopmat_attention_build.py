"""Build each attention_coopmat.comp kernel variant in its own process; print which crash the driver (diagnostic)."""
import subprocess, sys, itertools
CODE = r"""
import sys
from tvk_kernels import get_device
from tvk_kernels.kernels import attention_coopmat
from tvk_kernels.kernels.launch import family
dev = get_device(0)
fam = family(dev, attention_coopmat.CoopAttention)
kernel, head, vec, mask, causal, drop = (int(x) for x in sys.argv[1:7])
params = {"BR": int(sys.argv[7]), "BC": int(sys.argv[8]), "BBR": int(sys.argv[7]), "BBC": int(sys.argv[8])}
pipe, _ = fam.pipeline(kernel, params, head, {0: None, 1: "bool", 2: "float"}[mask], causal, drop, False, vec, None)
pipe.wait() if hasattr(pipe, "wait") else None
print("built")
"""
for args in [(0, 64, 8, 0, 0, 0, 64, 64), (0, 64, 1, 0, 0, 0, 64, 64), (0, 48, 1, 0, 1, 0, 64, 64), (0, 64, 8, 0, 0, 0, 16, 16),
             (2, 64, 8, 0, 0, 0, 64, 32), (3, 64, 8, 0, 0, 0, 64, 32), (2, 64, 8, 0, 0, 0, 16, 16), (3, 64, 8, 0, 0, 0, 16, 16),
             (0, 128, 8, 2, 1, 1, 64, 64), (3, 128, 8, 0, 0, 0, 64, 32)]:
    done = subprocess.run([sys.executable, "-c", CODE, *map(str, args)], capture_output=True, text=True, timeout=120)
    print(args, "rc", done.returncode, done.stdout.strip()[-80:], done.stderr.strip()[-300:].replace("\n", " | "), flush=True)
