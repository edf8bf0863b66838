"""Knock pieces out of attention_coopmat.comp's dQ kernel, build each on the device in its own process."""
import subprocess, sys
from pathlib import Path
src = Path("templates/attention_coopmat.comp").read_text()
K2 = src.index("#elif KERNEL == 2")
K3 = src.index("#elif KERNEL == 3")
kernel2 = src[K2:K3]
kos = {
    "none": [],
    "no_dq_update": [("        HALVES_BY_TILE(dq, sP, sK, 0u, HB)\n    }\n", "    }\n")],
    "no_write": [("    WRITE_ROWS(dq, p.scale, p.x0, SDQ, h, i0, p.lq)\n", "")],
    "no_dp": [("        ROWS_BY_TILE_T(sS, KEPT_DO, sV)\n", "")],
    "no_keep_do": [("            KEEP_ROWS(KEPT_DO, sV, sg * 16u - c0)\n", "")],
    "write_direct": [("    WRITE_ROWS(dq, p.scale, p.x0, SDQ, h, i0, p.lq)\n",
                      "    barrier();\n    [[unroll]] for (uint db = 0u; db < HB; ++db) coopMatStore(dq[db], sS, sg * 16u * SST + 0u, SST, ROWMAJOR);\n    barrier();\n    if (i < p.lq) SBuf(p.x0).v[i] = STYPE(sS[r * SST + t]);\n")],
    "acc_in_loop": [("    ACC_ARRAY(dq)\n", ""), ("        HALVES_BY_TILE(dq, sP, sK, 0u, HB)\n    }\n",
                     "        ACC_ARRAY(dq)\n        HALVES_BY_TILE(dq, sP, sK, 0u, HB)\n        barrier();\n        [[unroll]] for (uint db = 0u; db < HB; ++db) STORE_BLOCK(dq, db, 0u)\n    }\n"),
                    ("    WRITE_ROWS(dq, p.scale, p.x0, SDQ, h, i0, p.lq)\n", "    if (i < p.lq) SBuf(p.x0).v[i] = STYPE(sS[r * SST + t]);\n")],
}
CODE = r"""
import sys
from tvk_kernels import get_device
dev = get_device(0)
name = sys.argv[1]
defines = {"KERNEL": 2, "HEAD": 64, "BR": 16, "BC": 16, "SUBGROUP_SIZE": 32, "VEC": 8, "MASK": 0, "CAUSAL": 0,
           "DROPOUT": 0, "SEED_BUF": 0, "EMULATE": 0}
pipe = dev.pipelines.get(name, defines, local_size=(32, 1, 1), push_size=128)
print("built")
"""
for name, edits in kos.items():
    k2 = kernel2
    ok = True
    for a, b in edits:
        if a not in k2:
            print(name, "edit not found:", a[:60]); ok = False
        k2 = k2.replace(a, b)
    if not ok:
        continue
    fname = f"attention_coopmat_ko_{name}.comp"
    Path("templates", fname).write_text(src[:K2] + k2 + src[K3:])
    done = subprocess.run([sys.executable, "-c", CODE, fname], capture_output=True, text=True, timeout=120)
    print(name, "rc", done.returncode, done.stdout.strip()[-40:], done.stderr.strip()[-400:].replace("\n", " | "), flush=True)

import os
for opt in ("0",):
    env = dict(os.environ, TVK_SPIRV_OPT=opt)
    done = subprocess.run([sys.executable, "-c", CODE, "attention_coopmat_ko_none.comp"], capture_output=True, text=True,
                          timeout=120, env=env)
    print("none TVK_SPIRV_OPT=0", "rc", done.returncode, done.stdout.strip()[-40:], done.stderr.strip()[-300:].replace("\n", " | "), flush=True)
