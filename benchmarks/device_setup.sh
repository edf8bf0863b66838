# Sourced at the start of a run on the lent GPU machine (see ../shared/device-vulkan.md):
# unpacks the carried Vulkan loader, installs carried wheels, puts the carried glslc on PATH.
for f in .gl/*.deb; do dpkg -x "$f" /; done; ldconfig
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD
export PATH=$PWD/.gl/glslc:$PATH LD_LIBRARY_PATH=$PWD/.gl/glslc:$PWD/.gl/glslang/lib:${LD_LIBRARY_PATH:-}
export TVK_GLSLANG=$PWD/.gl/glslang/glslangValidator  # glslang 13 for cooperative-matrix kernels
# glslang >= 15 where carried (.gl/bin, built from source: benchmarks/README.md) for the workgroup-scope one
if [ -x "$PWD/.gl/bin/glslangValidator" ]; then export TVK_GLSLANG=$PWD/.gl/bin/glslangValidator; fi
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json XDG_RUNTIME_DIR=/tmp
export __EGL_VENDOR_LIBRARY_FILENAMES=/usr/local/nvidia/share/glvnd/egl_vendor.d/10_nvidia.json
export TVK_CACHE_DIR=/tmp/tvk-cache TVK_COMMIT=${TVK_COMMIT:-unknown} PYTHONUNBUFFERED=1
