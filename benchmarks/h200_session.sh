# One session's measurements on the lent H200 (see ../shared/device-vulkan.md):
#   A: tvk-tune, vector-add, matmul      B: mnist, cifar10, low-vram, ablations (with A's configs)
#   T: the device tests under the machine's torch (2.11)
#   E: issue 28's correctness tests (device limits and big tensors, small integer dtypes, type promotion, memory
#      overlap, bad inputs, Ctrl-C) and the softmax/norm/scan tests, under the machine's torch (junit XML kept)
#   K: tuning of conv2d, pool, norm, then kernel benchmarks vs cuDNN/torch CUDA (tvk-bench kernels)
#   C: compiled-mode tests under the machine's torch   M: mnist, cifar10   L: low-vram, ablations (M + L = B)
#   P: host-time profile of a compiled and an eager MNIST CNN step (printed only)
#   N: tuning of norm into the shipped file (after a norm.comp change), then layer norm backward's row splits
#      (benchmarks/layer_norm_split.py)   G: per-kernel GPU profile vs CUDA
#   pconv: fp16 convs on packed fp16 arithmetic against fp32 arithmetic, cooperative matrices off (RDNA1's stand-in)
#   pattn: the same for fp16 fused attention (benchmarks/packed_attention_ab.py)
#   cattn: fp16 attention on cooperative matrices: its device tests, then beside torch CUDA's SDPA and beside
#      attention.comp's fp16 kernels (benchmarks/attention_vs_torch.py)
#   cgemm: fp16 GEMM on cooperative matrices (subgroup and workgroup scope) per operand layout, beside cuBLAS
#      (benchmarks/coopmat_gemm_layouts.py)
#   cconv: fp16 conv2d on cooperative matrices: its device tests, then beside cuDNN and beside conv2d.comp's
#      fp32-arithmetic kernels (benchmarks/conv_vs_cudnn.py)
#   ctune: tuning of conv2d_coopmat (fp16 conv on cooperative matrices) into the shipped file (TVK_TUNE_BUDGET seconds)
#   cold: the first compiled step with empty caches, split into Dynamo, AOTAutograd and ours (benchmarks/cold_compile.py;
#      TVK_COLD_MODELS: some of tvk-bench models' models, TVK_COLD_VARIANTS: some variants; needs their wheels in .whl)
#   lns: layer norm backward's row chunks (benchmarks/layer_norm_split.py) with the device's own config
#   bw: the kernels experiment's bandwidth section alone (benchmarks/bandwidth_rows.py: reductions, norms, softmax,
#      elementwise, embedding backwards beside torch CUDA)
#   attn: tuning of fused attention (forward and backward tiles) into the shipped file (TVK_TUNE_BUDGET seconds)
#   rank: the static cost model's order against measured times (python -m tvk_kernels.tune.rank_check;
#      TVK_RANK_FAMILIES, TVK_RANK_TRIALS, TVK_RANK_BUDGET: seconds after which no bucket starts, default 240)
#   V: tuning of conv2d alone, longer (40 trials a bucket; TVK_TUNE_BUDGET seconds)   W: kernel benchmarks only
#   H: the cooperative-matrix kernel: its device tests, its tuning (fp16), the matmul table, and the A/B of its split-K
#   F: the A/B of the tiled matmul's PREFETCH (each config run with it off and on, interleaved); TVK_AB_PARTS names
#      other parts of benchmarks/ab_tile_fit_split_k.py ("frag convfrag": matmul's and conv2d's FRAG)
#   U: the matmul kernels' device-only tests (cooperative matrix, prefetch) and the packed-fp16 tests
#   S: after a reduce/softmax/norm template change: their tuning into the shipped file (TVK_TUNE_OPS: fewer), the subgroup check
#      (tests/subgroup_worker.py: those ops and three trainings against the CPU at the device's subgroup size), coopmat tests
#   R: real-model tests (Hugging Face models under torch.compile and torchvk.compile, the zoo's HF entries in every
#      mode, generate(), the trainers, torch.accelerator), fork safety and launch plans, under the machine's torch
#      (needs transformers', accelerate's and lightning's wheels in .whl)
#   I: the real-model shape suites (tvk-bench shapes into tvk_kernels/tune/suites, copied to suites/)
#   O: real models' training steps vs torch CUDA eager/inductor/AMP (tvk-bench models; TVK_MODELS: some, merged)
#   J: host time per eager op vs torch CUDA and the no-op dispatch floor (TVK_BASE: an earlier tree beside it, a
#      directory carried with the run, see benchmarks/eager_host_time.py; with it, eager_step_ab.py's model steps)
#   X: tuning of matmul alone (its layout and batched buckets)   Y: tuning of gemv and conv2d_depthwise   Z: the model zoo (tvk-bench zoo)   D: data-parallel throughput, tvk backend vs torch CUDA (2 processes)
# Pass TVK_COMMIT from the checkout: the copy on the device may carry an older .git HEAD.
# Usage there: TVK_COMMIT=<sha> bash benchmarks/h200_session.sh A B   (results land in $OUT/results.tgz
# after every step, so a run cut short still returns what it finished)
set -u
source benchmarks/device_setup.sh
export TVK_CONFIG_DIR=/tmp/tvk-configs TVK_MNIST_NPZ=$PWD/.data/mnist.npz TVK_VALIDATION=0
R=/tmp/results/h200; mkdir -p $R
save() { mkdir -p $R/configs; cp $TVK_CONFIG_DIR/*.json $R/configs/ 2>/dev/null; tar czf $OUT/results.tgz -C /tmp/results h200; }
step() { echo "=== $* ($(date +%T))" | tee -a $R/steps.log; "$@" || echo "!!! failed: $*"; save; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
# the SM clock through the run, every 200 ms (the driver idles the H200 at a low clock: design note 11)
nvidia-smi --query-gpu=timestamp,clocks.sm,utilization.gpu --format=csv,noheader -lms 200 >> $R/clocks.csv 2>/dev/null &
for phase in "$@"; do
  case $phase in
    T) step python3 -m pytest -q -p no:cacheprovider tests/test_torchvk_device.py tests/test_torchvk_train.py tests/test_runtime.py ;;
    E) mkdir -p $R/correctness
       python3 -c "import datetime, json, torch, tvk_kernels.runtime.device as d; f = d.get_device().facts; print(json.dumps(
         {'date': datetime.datetime.now().isoformat(), 'commit': '${TVK_COMMIT:-}', 'torch': torch.__version__,
          'device': f.name, 'driver': f.driver_info}))" > $R/correctness/environment.json
       step bash -c "python3 -m pytest -q -p no:cacheprovider --junitxml=$R/correctness/junit.xml tests/test_device_limits.py \
         tests/test_small_int_dtypes.py tests/test_type_promotion.py tests/test_memory_overlap.py tests/test_bad_inputs.py \
         tests/test_interrupts.py tests/test_softmax.py tests/test_norm.py tests/test_sort_scan.py 2>&1 | tail -40 > $R/correctness/pytest.txt" ;;
    A) step python3 -m tvk_kernels.tune.cli --device 0 --ops elementwise,matmul,reduce,softmax --trials 25 --time-budget 150 --out $TVK_CONFIG_DIR --no-progress
       step python3 -m tvk_kernels.bench.cli vector-add --sizes 1000,10000,100000,1000000,10000000,100000000 --out $R --no-progress
       step python3 -m tvk_kernels.bench.cli matmul --out $R --no-progress ;;
    B) for e in mnist cifar10 low-vram ablations; do step python3 -m tvk_kernels.bench.cli $e --out $R --no-progress; done ;;
    C) step python3 -m pytest -q -p no:cacheprovider tests/test_compile.py tests/test_compile_fusion.py tests/test_torch_compile.py tests/test_parallel_compile.py ;;
    M) for e in mnist cifar10; do step python3 -m tvk_kernels.bench.cli $e --out $R --no-progress; done ;;
    P) step python3 benchmarks/step_profile.py --batch 64 --steps 50; step python3 benchmarks/step_profile.py --batch 64 --steps 30 --eager ;;
    Q) step python3 -m tvk_kernels.bench.cli ablations --out $R --no-progress ;;
    L) for e in low-vram ablations; do step python3 -m tvk_kernels.bench.cli $e --out $R --no-progress; done ;;
    N) mkdir -p $TVK_CONFIG_DIR; cp -n tuned_configs/hopper--*.json $TVK_CONFIG_DIR/
       step python3 -m tvk_kernels.tune.cli --device 0 --ops norm --trials 20 --time-budget 90 --out $TVK_CONFIG_DIR --no-progress
       step python3 benchmarks/layer_norm_split.py --out $R ;;
    pconv) step python3 benchmarks/packed_conv_ab.py --out $R ;;
    pattn) step python3 benchmarks/packed_attention_ab.py --out $R ;;
    cattn) step python3 -m pytest -q -p no:cacheprovider tests/test_attention_coopmat.py -k "real_route or routing" \
             tests/test_attention.py
       step python3 benchmarks/attention_vs_torch.py --out $R ;;
    cgemm) step python3 benchmarks/coopmat_gemm_layouts.py --tiles --out $R/ab ;;
    cconv) step python3 -m pytest -q -p no:cacheprovider tests/test_conv_coopmat.py -k "real_route or route_off"
       step python3 benchmarks/conv_vs_cudnn.py --out $R ;;
    ctune) mkdir -p $TVK_CONFIG_DIR; cp -n tuned_configs/hopper--*.json $TVK_CONFIG_DIR/
       step python3 -m tvk_kernels.tune.cli --device 0 --ops conv2d_coopmat --trials 12 --time-budget ${TVK_TUNE_BUDGET:-200} \
         --out $TVK_CONFIG_DIR --no-progress ;;
    bw) step python3 benchmarks/bandwidth_rows.py --out $R ;;
    lns) step python3 benchmarks/layer_norm_split.py --out $R ;;
    cold) step python3 benchmarks/cold_compile.py --timeout 150 --out $R ${TVK_COLD_MODELS:+--models $TVK_COLD_MODELS} \
         ${TVK_COLD_VARIANTS:+--variants $TVK_COLD_VARIANTS} ;;
    attn) mkdir -p $TVK_CONFIG_DIR; cp -n tuned_configs/hopper--*.json $TVK_CONFIG_DIR/
       step python3 -m tvk_kernels.tune.cli --device 0 --ops attention --trials 16 --time-budget ${TVK_TUNE_BUDGET:-150} \
         --out $TVK_CONFIG_DIR --no-progress ;;
    rank) step python3 -m tvk_kernels.tune.rank_check --out $R ${TVK_RANK_FAMILIES:+--families $TVK_RANK_FAMILIES} \
         --trials ${TVK_RANK_TRIALS:-16} --time-budget ${TVK_RANK_BUDGET:-240} ;;
    G) step python3 benchmarks/kernel_profile.py --out $R ;;
    V) mkdir -p $TVK_CONFIG_DIR; cp -n tuned_configs/hopper--*.json $TVK_CONFIG_DIR/
       step python3 -m tvk_kernels.tune.cli --device 0 --ops conv2d --trials 40 --time-budget ${TVK_TUNE_BUDGET:-360} --out $TVK_CONFIG_DIR --no-progress ;;
    W) step python3 -m tvk_kernels.bench.cli kernels --out $R --no-progress ;;
    J) step bash -c "python3 benchmarks/eager_host_time.py --out $R ${TVK_BASE:+--compare $TVK_BASE} \
         || python3 benchmarks/eager_host_time.py --out $R"
       for m in ${TVK_PROFILE_MODELS:-hf_gpt2 timm_resnet18 hf_llama}; do  # each aten op's host time in a step
         step bash -c "python3 benchmarks/eager_host_time.py --model $m 2>&1 | grep -v '^.transformers' >> $R/eager_host_profile.txt"
       done
       if [ -n "${TVK_BASE:-}" ]; then  # eager steps beside the earlier tree, interleaved processes (TVK_AB_MODELS)
         step python3 benchmarks/eager_step_ab.py --compare $TVK_BASE --out $R ${TVK_AB_MODELS:+--models $TVK_AB_MODELS} \
           --rounds ${TVK_AB_ROUNDS:-4}
       fi ;;
    R) mkdir -p $R/correctness  # real models (transformers carried in .whl), fork safety, launch plans under torch 2.11
       step bash -c "python3 -m pytest -q -p no:cacheprovider --junitxml=$R/correctness/real-models-junit.xml \
         tests/test_hf_models.py tests/test_compile_calling.py tests/test_fork.py tests/test_launch_plans.py \
         tests/test_generate.py tests/test_trainers.py tests/test_accelerator_api.py \
         'tests/test_zoo.py::test_zoo_model_trains_like_torch_cpu' \
         -k 'hf or gpt2 or llama or t5 or argument or fork or plan or generate or trainer or accelerator' \
         2>&1 | tail -30 | tee $R/correctness/real-models-pytest.txt" ;;
    F) parts=${TVK_AB_PARTS:-prefetch}  # e.g. "frag convfrag"
       step python3 benchmarks/ab_tile_fit_split_k.py $parts; mkdir -p $R/ab; mv $OUT/ab2.json $R/ab/${parts// /-}-$TVK_COMMIT.json; save ;;
    U) step python3 -m pytest -q -p no:cacheprovider tests/test_matmul.py -k "coopmat or prefetch"
       step python3 -m pytest -q -p no:cacheprovider tests/test_matmul_packed_f16.py ;;
    X) mkdir -p $TVK_CONFIG_DIR; cp -n tuned_configs/hopper--*.json $TVK_CONFIG_DIR/  # the layout and batched buckets join the shipped file
       step python3 -m tvk_kernels.tune.cli --device 0 --ops matmul --trials 25 --time-budget ${TVK_TUNE_BUDGET:-360} --out $TVK_CONFIG_DIR --no-progress ;;
    Z) step python3 -m tvk_kernels.bench.cli zoo --out $R --no-progress ;;
    H) mkdir -p $TVK_CONFIG_DIR; cp -n tuned_configs/hopper--*.json $TVK_CONFIG_DIR/
       step python3 -m pytest -q -p no:cacheprovider tests/test_matmul.py -k coopmat
       step python3 -m tvk_kernels.tune.cli --device 0 --ops matmul_coopmat --trials 25 --time-budget ${TVK_TUNE_BUDGET:-240} --out $TVK_CONFIG_DIR --no-progress
       step python3 -m tvk_kernels.bench.cli matmul --out $R --no-progress
       step python3 benchmarks/ab_tile_fit_split_k.py coop; mkdir -p $R/ab; mv $OUT/ab2.json $R/ab/coop-split-k.json; save ;;
    Y) mkdir -p $TVK_CONFIG_DIR; cp -n tuned_configs/hopper--*.json $TVK_CONFIG_DIR/  # new families join the shipped file
       step python3 -m tvk_kernels.tune.cli --device 0 --ops gemv,conv2d_depthwise --trials 20 --time-budget ${TVK_TUNE_BUDGET:-120} --out $TVK_CONFIG_DIR --no-progress ;;
    D) step python3 benchmarks/distributed_throughput.py --out $R ;;
    S) mkdir -p $TVK_CONFIG_DIR; cp -n tuned_configs/hopper--*.json $TVK_CONFIG_DIR/  # after a reduce/softmax/norm template change
       step python3 -m tvk_kernels.tune.cli --device 0 --ops ${TVK_TUNE_OPS:-reduce,softmax,norm} --trials 20 --time-budget ${TVK_TUNE_BUDGET:-240} --out $TVK_CONFIG_DIR --no-progress
       step sh -c "python3 tests/subgroup_worker.py > $R/subgroup-check.json"
       step python3 -m pytest -q -p no:cacheprovider tests/test_matmul.py -k coopmat ;;
    I) step python3 -m tvk_kernels.bench.cli shapes --out tvk_kernels/tune/suites --no-progress  # the real-model suites
       mkdir -p $R/suites; cp tvk_kernels/tune/suites/* $R/suites/; save ;;
    O) cp -n benchmarks/results/h200/models.json $R/ 2>/dev/null  # TVK_MODELS (comma-separated): these, merged in
       step python3 -m tvk_kernels.bench.cli models --out $R --no-progress ${TVK_MODELS:+--only $TVK_MODELS} ;;
    K) mkdir -p $TVK_CONFIG_DIR; cp -n tuned_configs/hopper--*.json $TVK_CONFIG_DIR/  # new families merge into the shipped file
       step python3 -m tvk_kernels.tune.cli --device 0 --ops conv2d,pool,norm --trials 20 --time-budget 240 --out $TVK_CONFIG_DIR --no-progress
       step python3 -m tvk_kernels.bench.cli kernels --out $R --no-progress ;;
  esac
done
kill %1 2>/dev/null; save
