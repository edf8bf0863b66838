"""RDNA1's rule for every kernel (AMD's Windows driver on Navi 10): compiled by RDNA1's own
compiler (Mesa's null Navi 10 device), no spilled registers or scratch, at most 32 KiB of
shared memory. The kernel tests run a script printing {name: compiler stats} as JSON here."""
import json
import subprocess
import sys

import pytest

LDS_LIMIT = 32768


def navi10_stats(script: str, tmp_path) -> dict:
    """Run `script` on the null Navi 10 device (own shader cache in tmp_path); its last stdout line."""
    from tvk_kernels.tune import rdna1

    icd = rdna1.radv_icd()
    if icd is None:
        pytest.skip("Mesa RADV driver not installed")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         env=rdna1.null_navi10_env(icd, TVK_CACHE_DIR=str(tmp_path)))
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def assert_fits_rdna1(stats: dict):
    for name, s in stats.items():
        assert s["Spilled VGPRs"] == 0 and s["Spilled SGPRs"] == 0 and s.get("Scratch size", 0) == 0, name
        assert s.get("LDS size", 0) <= LDS_LIMIT and s["VGPRs"] > 0, name
