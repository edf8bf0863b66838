# One session's measurements on the lent H200, in two phases (the machine stays warm between):
#   A: torch-2.11 check of the device tests, tvk-tune, vector-add, matmul
#   B: mnist, cifar10, low-vram, ablations (with the configs tuned in A)
# Usage there: TVK_COMMIT=<sha> bash benchmarks/h200_session.sh A|B   (everything lands in $OUT)
set -u
source benchmarks/device_setup.sh
export TVK_CONFIG_DIR=/tmp/tvk-configs TVK_MNIST_NPZ=$PWD/.data/mnist.npz TVK_VALIDATION=0
R=/tmp/results/h200; mkdir -p $R
step() { echo "=== $* ($(date +%T))"; "$@" || echo "!!! failed: $*"; }
if [ "$1" = A ]; then
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  step python3 -m pytest -q -p no:cacheprovider -x tests/test_torchvk_device.py tests/test_torchvk_train.py tests/test_runtime.py
  step python3 -m tvk_kernels.tune.cli --device 0 --ops elementwise,matmul,reduce,softmax --trials 25 --time-budget 150 --out $TVK_CONFIG_DIR --no-progress
  step python3 -m tvk_kernels.bench.cli vector-add --sizes 1000,10000,100000,1000000,10000000,100000000 --out $R --no-progress
  step python3 -m tvk_kernels.bench.cli matmul --out $R --no-progress
else
  for e in mnist cifar10 low-vram ablations; do step python3 -m tvk_kernels.bench.cli $e --out $R --no-progress; done
fi
cp -r $TVK_CONFIG_DIR $R/configs 2>/dev/null
tar czf $OUT/results-$1.tgz -C /tmp/results h200
