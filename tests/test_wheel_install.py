"""The wheel as a user installs it: built from this checkout, installed into a fresh venv, run with
no GLSL compiler on PATH and an empty cache. The MNIST MLP and CNN train eagerly and compiled,
every op on tvk, from the precompiled kernels the wheel ships (shipped/kernels.json)."""
import os
import re
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.xdist_group("wheel")


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """(python of a fresh venv with the wheel installed, its environment without a compiler)."""
    tmp = tmp_path_factory.mktemp("wheel")
    subprocess.run([sys.executable, "-m", "pip", "wheel", str(ROOT), "--no-deps", "--no-build-isolation", "-q",
                    "-w", str(tmp / "dist")], check=True, capture_output=True)
    wheel = next((tmp / "dist").glob("torchvk-*.whl"))
    venv = tmp / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "--no-index", "-q",
                    str(wheel)], check=True, capture_output=True)
    # the dependencies (torch, numpy, vulkan, ...) from this venv, but not its editable torchvk: a
    # plain path line adds the folder without running the .pth files in it
    site = subprocess.check_output([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                   text=True).strip()
    Path(site, "test-dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    env = {k: v for k, v in os.environ.items() if k not in ("TVK_GLSLC", "TVK_GLSLANG", "VULKAN_SDK", "PYTHONPATH")}
    env.update(PATH=str(venv / "bin"), TVK_CACHE_DIR=str(tmp / "cache"), TVK_VALIDATION="0")
    return wheel, python, env, tmp


def test_the_wheel_ships_a_precompiled_module_for_every_listed_kernel(installed):
    wheel = installed[0]
    from tvk_kernels import shipped_kernels

    names = zipfile.ZipFile(wheel).namelist()
    shipped = [n for n in names if n.startswith("tvk_kernels/shipped/spirv/") and n.endswith(".spv")]
    assert len(shipped) == len(shipped_kernels.load()) > 0
    assert "tvk_kernels/shipped/kernels.json" in names


def test_mnist_trains_from_the_wheel_without_a_compiler(installed):
    """The MLP and the CNN, eagerly and compiled, in one process (their kernels' pipelines shared)."""
    _, python, env, tmp = installed
    where = subprocess.run([str(python), "-c", "import torchvk, shutil; print(torchvk.__file__, shutil.which('glslc'))"],
                           env=env, cwd=tmp, capture_output=True, text=True, check=True).stdout.split()
    assert where[0].startswith(str(tmp / "venv")) and where[1] == "None"  # the installed copy, no compiler
    runs = [[m, "--subset", "128", "--test-images", "256", *c] for m in ("mlp", "cnn") for c in ([], ["--compiled"])]
    code = f"import sys, torchvk.demo as demo\nfor argv in {runs!r}:\n    assert demo.main(['--model', *argv]) == 0\n"
    proc = subprocess.run([str(python), "-c", code], env=env, cwd=tmp, capture_output=True, text=True)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    assert len(re.findall(r"ops on CPU\s+: 0\b", out)) == 4, out[-3000:]
    vulkan_ops = re.findall(r"ops on Vulkan\s+: (\d+)", out)
    assert len(vulkan_ops) == 4 and all(int(n) > 0 for n in vulkan_ops), out[-3000:]
    assert len(re.findall(r"Training the MNIST (MLP|CNN) \((eager|compiled)\)", out)) == 4
    assert "runs its graphs unfused" in out  # the one notice: fusing needs a compiler
