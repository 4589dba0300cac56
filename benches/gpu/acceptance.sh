#!/usr/bin/env bash
# The GPU acceptance run, as one script for a short lease on a GPU machine:
#   1. the machine: nvidia-smi, `tessera devices`;
#   1b. (hopper-gpu) the Hopper cases the PTX emulator checks (wgmma, TMA, producer,
#      ping-pong, clusters; backends/tests/cuda.rs), launched on the GPU against the f64
#      reference, when the test binary `cuda-test` is there; then 150 random schedules
#      (the emulator's draws: tiles, warps, stages, stagings, sm_90a and sm_80, ragged
#      shapes) the same way;
#   2. every @kernel and @jit function of tests/corpus/valid and examples/ through
#      `tessera run --device gpu --json` (checked against the f64 reference), one JSON
#      object per line in corpus.jsonl;
#   3. bf16 GEMM 4096^3 and causal flash attention (B*H=32, S=4096, D=128): autotuned on
#      timings alone (`--check none`: a sampled f64 check of every candidate at these sizes
#      takes minutes), then the winner run and checked against the f64 reference, beside torch.matmul and scaled_dot_product_attention (benches/gpu/torch_peer.py);
#   3b. (tune-hopper) the same GEMM over the Hopper choices (benches/gpu/gemm_hopper.tsr):
#      autotuned, then the winner run and checked;
#   3c. (tune-auto) the @kernel.auto GEMM of the corpus, whose sm_90 space holds the
#      Hopper paths, autotuned at 4096^3 and its winner run and checked;
#   4. every flash-attention candidate alone at that size, under a launch time limit;
#   5. NCCL's one-rank all-reduce and the backend's every-candidate GPU test, when their
#      prebuilt test binaries are there;
#   6. (hopper) GEMM 4096^3 on the Hopper path: mma="wgmma" with cp.async, with TMA
#      copies (copy="tma"), with a producer warpgroup (producer="warpgroup", 8 consumer
#      warps, 4 stages) and with it in clusters of 2x1 and 2x2 (TMA multicast), and the
#      fp8 GEMM ([K, N] B, transposing stage), each checked against the f64 reference and
#      timed.
# Usage: benches/gpu/acceptance.sh BINDIR OUTDIR [ARCHIVE]
#   With ARCHIVE, OUTDIR is packed into it after every step (a lease's copy-back takes few
#   files, and a step that runs out of time must not lose the ones before it).
#   BINDIR holds `tessera` (built without LLVM: `cargo build --release -p tessera
#   --features nccl`) and optionally the test binaries `cuda-test` and `nccl-test`.
set -u
BIN=$(cd "$1" && pwd)
OUT=$2
mkdir -p "$OUT"
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
T=$BIN/tessera
ARCHIVE=${3:-}
# STEPS picks steps by name (default: all of them).
STEPS=${STEPS:-machine hopper-gpu peers hopper untuned sweep tune tune-hopper tune-auto candidates nccl cuda-test}
want() { [[ " $STEPS " == *" $1 "* ]]; }
log() {
    echo "== $(date +%T) $*" | tee -a "$OUT/steps.log"
    if [ -n "$ARCHIVE" ]; then tar czf "$ARCHIVE.tmp" -C "$OUT" . && mv "$ARCHIVE.tmp" "$ARCHIVE"; fi
}

# NCCL ships as libnccl.so.2 in the PyTorch wheels; the probe looks for libnccl.so.
nccl=$(find / -name 'libnccl.so.2' -not -path '/proc/*' 2>/dev/null | head -1)
if [ -n "$nccl" ]; then
    mkdir -p /tmp/nccl-link && ln -sf "$nccl" /tmp/nccl-link/libnccl.so
    export LD_LIBRARY_PATH=/tmp/nccl-link:$(dirname "$nccl")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
fi

if want machine; then
log "machine"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv | tee "$OUT/machine.txt"
echo "nccl: ${nccl:-none}" | tee -a "$OUT/machine.txt"
"$T" devices 2>&1 | tee -a "$OUT/machine.txt"

fi
if want hopper-gpu && [ -x "$BIN/cuda-test" ]; then
    log "the emulator's Hopper cases on the GPU against the f64 reference (backends/tests/cuda.rs)"
    built_at=$(cat "$BIN/cuda-test.root" 2>/dev/null)
    if [ -n "$built_at" ] && [ ! -e "$built_at" ]; then mkdir -p "$(dirname "$built_at")" && ln -s "$ROOT" "$built_at"; fi
    # A launch that deadlocks (a staging protocol wrong on hardware) fails in 10 s.
    TESSERA_GPU_TIMEOUT=10 TESSERA_REQUIRE_GPU=1 timeout "${HOPPER_GPU_SECONDS:-150}" "$BIN/cuda-test" \
        hopper_schedules --nocapture > "$OUT/hopper_gpu.txt" 2>&1
    echo "hopper-gpu rc=$?"; grep -E '^== |Hopper launches|failures' "$OUT/hopper_gpu.txt" | head -40; tail -30 "$OUT/hopper_gpu.txt"
    log "random schedules on the GPU against the f64 reference (the emulator's draws, backends/tests/hopper_cases/random.rs)"
    TESSERA_RANDOM_SCHEDULES=${RANDOM_SCHEDULES:-150} TESSERA_GPU_TIMEOUT=10 TESSERA_REQUIRE_GPU=1 \
        timeout "${RANDOM_GPU_SECONDS:-120}" "$BIN/cuda-test" random_schedules --nocapture > "$OUT/random_gpu.txt" 2>&1
    echo "random-gpu rc=$?"; grep -E '^FAIL|random schedules on the GPU' "$OUT/random_gpu.txt" | head -20
fi
if want peers; then
log "peers (torch)"
timeout 120 python3 benches/gpu/torch_peer.py > "$OUT/torch_peer.json" 2> "$OUT/torch_peer.err"
cat "$OUT/torch_peer.json"

fi
if want hopper; then
log "GEMM 4096^3 on WGMMA, staged by cp.async, by TMA, by TMA from a producer warpgroup (128x128 and 128x256 tiles, ping-pong consumers), and multicast in clusters of 2x1 and 2x2"
for variant in cp.async:BM=128,BN=128,warps=4,stages=3,copy=cp.async tma:BM=128,BN=128,warps=4,stages=3,copy=tma \
    producer:BM=128,BN=128,warps=8,stages=4,copy=tma,producer=warpgroup \
    producer256:BM=128,BN=256,warps=8,stages=4,copy=tma,producer=warpgroup \
    producer256s5:BM=128,BN=256,warps=8,stages=5,copy=tma,producer=warpgroup \
    producer256x128:BM=256,BN=128,warps=8,stages=4,copy=tma,producer=warpgroup \
    pingpong:BM=128,BN=128,warps=8,stages=4,copy=tma,producer=pingpong \
    pingpong256:BM=128,BN=256,warps=8,stages=3,copy=tma,producer=pingpong \
    cluster2x1:BM=128,BN=128,warps=8,stages=4,copy=tma,producer=warpgroup,cluster_x=2 \
    cluster2x1_256:BM=128,BN=256,warps=8,stages=4,copy=tma,producer=warpgroup,cluster_x=2 \
    cluster2x1_256x128:BM=256,BN=128,warps=8,stages=4,copy=tma,producer=warpgroup,cluster_x=2 \
    cluster2x2:BM=128,BN=128,warps=8,stages=4,copy=tma,producer=warpgroup,cluster_x=2,cluster_y=2; do
    name=${variant%%:*}
    timeout 60 "$T" run examples/gemm.tsr --kernel gemm --dims M=4096,N=4096,K=4096 --device gpu --check sampled \
        --schedule BK=64,mma=wgmma,${variant#*:} --repeat 30 --json \
        > "$OUT/gemm_wgmma_$name.json" 2> "$OUT/gemm_wgmma_$name.err"
    echo "$name rc=$?"; grep -A3 '"time_ms"' "$OUT/gemm_wgmma_$name.json"; tail -5 "$OUT/gemm_wgmma_$name.err"
done
# FP8 with B as [K, N]: QGMMA through the transposing stage, its sums promoted to f32
# every 128 elements of K, with TMA copies (a producer cannot run the transposing stage).
for variant in tma:copy=tma; do
    name=${variant%%:*}
    timeout 60 "$T" run examples/fp8_gemm.tsr --kernel fp8_gemm --dims M=4096,N=4096,K=4096 --device gpu --check sampled \
        --schedule mma=wgmma,${variant#*:} --repeat 30 --json > "$OUT/fp8_gemm_wgmma_$name.json" 2> "$OUT/fp8_gemm_wgmma_$name.err"
    echo "fp8 $name rc=$?"; grep -A3 '"time_ms"' "$OUT/fp8_gemm_wgmma_$name.json"; tail -5 "$OUT/fp8_gemm_wgmma_$name.err"
done
# Causal attention (B·H=32, S=4096, D=128) on WGMMA: TMA only, a producer warpgroup, and
# FlashAttention-3's ping-pong consumers (the SDPA peer is in step "peers").
for variant in tma:warps=8,copy=tma producer:warps=8,copy=tma,producer=warpgroup \
    pingpong:warps=8,copy=tma,producer=pingpong; do
    name=${variant%%:*}
    timeout 90 "$T" run examples/flash_attention.tsr --kernel flash_attention --dims BH=32,S=4096,D=128 \
        --arg causal=true --device gpu --check sampled \
        --schedule BM=128,BN=64,stages=2,mma=wgmma,${variant#*:} --repeat 20 --json \
        > "$OUT/fa_wgmma_$name.json" 2> "$OUT/fa_wgmma_$name.err"
    echo "attention $name rc=$?"; grep -A3 '"time_ms"' "$OUT/fa_wgmma_$name.json"; tail -5 "$OUT/fa_wgmma_$name.err"
done

fi
if want untuned; then
log "GEMM and attention at the benchmark sizes, untuned (the first configuration)"
timeout 60 "$T" run examples/gemm.tsr --kernel gemm --dims M=4096,N=4096,K=4096 --device gpu --check sampled --json \
    > "$OUT/gemm_untuned.json" 2> "$OUT/gemm_untuned.err"
echo "rc=$?"; grep -A3 '"time_ms"' "$OUT/gemm_untuned.json"; tail -5 "$OUT/gemm_untuned.err"
timeout 60 "$T" run examples/flash_attention.tsr --kernel flash_attention --dims BH=32,S=4096,D=128 \
    --arg causal=true --device gpu --check sampled --json > "$OUT/fa_untuned.json" 2> "$OUT/fa_untuned.err"
echo "rc=$?"; grep -A3 '"time_ms"' "$OUT/fa_untuned.json"; tail -5 "$OUT/fa_untuned.err"

fi
if want sweep; then
log "corpus and examples on the GPU (${SWEEP_DIRS:-tests/corpus/valid examples})"
SWEEP_END=$((SECONDS + ${SWEEP_SECONDS:-170}))
python3 - "$ROOT" ${SWEEP_DIRS:-tests/corpus/valid examples} > "$OUT/functions.txt" <<'PY'
# Lines "FILE FUNCTION DIMS ARGS": every @kernel/@jit function of the folders given.
# Kernels take the tool's default dims ("-"); graph functions get small ones (every
# symbol 128, a batch B of 4), since their f64 reference holds every intermediate.
import re, sys, pathlib
root = pathlib.Path(sys.argv[1])
for d in sys.argv[2:]:
    for f in sorted((root / d).glob("*.tsr")):
        lines = f.read_text().splitlines()
        decorators = []
        for i, line in enumerate(lines):
            s = line.strip()
            if s.startswith("@"):
                decorators.append(s)
                continue
            m = re.match(r"def (\w+)\(", s)
            if m and not line[0].isspace() and any(("kernel" in x or "jit" in x) for x in decorators):
                dims, args = "-", "-"
                if not any("kernel" in x for x in decorators):
                    sig = ""
                    for l in lines[i:]:
                        sig += l
                        if l.rstrip().endswith(":"):
                            break
                    symbols = sorted({t for q in re.findall(r'"([^"]+)"', " ".join(re.findall(r"\[([^\]]*)\]", sig))) for t in re.findall(r"[A-Za-z_]\w*", q)})
                    size = lambda t: 4 if t == "B" else 256 if "max" in t else 128
                    dims = ",".join(f"{t}={size(t)}" for t in symbols) or "-"
                    extra = [a for a, v in (("heads", "heads=2"), ("p", "p=0.0")) if re.search(rf"\b{a}\s*:", sig)]
                    args = ",".join(v for a, v in (("heads", "heads=2"), ("p", "p=0.0")) if a in extra) or "-"
                print(f"{d}/{f.name} {m.group(1)} {dims} {args}")
            # A top-level line other than a decorator ends them (their arguments'
            # continuation lines are indented).
            if s and not s.startswith("#") and not line[0].isspace() and not s.startswith(")"):
                decorators = []
PY
: > "$OUT/corpus.jsonl"
while read -r file fn dims args; do
    [ $SECONDS -lt $((SWEEP_END)) ] || { echo "$file $fn skipped: the sweep's time is up" | tee -a "$OUT/steps.log"; continue; }
    start=$(date +%s%N)
    extra=()
    [ "$dims" = - ] || extra+=(--dims "$dims")
    [ "$args" = - ] || extra+=(--arg "$args")
    json=$(timeout 30 "$T" run "$file" --kernel "$fn" --device "${DEVICE:-gpu}" --repeat 20 --warmup 3 --json "${extra[@]}" 2> /tmp/run.err)
    rc=$?
    secs=$(( ($(date +%s%N) - start) / 1000000 ))e-3
    err=$(tail -c 600 /tmp/run.err)
    python3 - "$file" "$fn" "$rc" "$secs" "$err" "$json" >> "$OUT/corpus.jsonl" <<'PY'
import json, sys
file, fn, rc, secs, err, text = sys.argv[1:7]
try:
    report = json.loads(text)
except Exception:
    report = {"unparsed": text[-600:]}
print(json.dumps({"file": file, "function": fn, "rc": int(rc), "seconds": float(secs), "stderr": err, "report": report}))
PY
    echo "$file $fn $dims rc=$rc ${secs}s"
done < "$OUT/functions.txt"

fi
if want tune; then
log "GEMM 4096^3: autotune, then run"
timeout ${TUNE_SECONDS:-90} "$T" autotune examples/gemm.tsr --kernel gemm --dims M=4096,N=4096,K=4096 --device gpu --check none \
    --repeat 30 --json > "$OUT/gemm_autotune.json" 2> "$OUT/gemm_autotune.err"
echo "rc=$?"; tail -c 3000 "$OUT/gemm_autotune.json"; tail -5 "$OUT/gemm_autotune.err"
timeout 60 "$T" run examples/gemm.tsr --kernel gemm --dims M=4096,N=4096,K=4096 --device gpu --check sampled --json \
    > "$OUT/gemm_run.json" 2> "$OUT/gemm_run.err"
tail -c 1500 "$OUT/gemm_run.json"; cat "$OUT/gemm_run.err"

log "flash attention BH=32 S=4096 D=128 causal: autotune, then run"
timeout ${TUNE_SECONDS:-90} "$T" autotune examples/flash_attention.tsr --kernel flash_attention --dims BH=32,S=4096,D=128 \
    --arg causal=true --device gpu --check none --repeat 30 --json > "$OUT/fa_autotune.json" 2> "$OUT/fa_autotune.err"
echo "rc=$?"; tail -c 3000 "$OUT/fa_autotune.json"; tail -5 "$OUT/fa_autotune.err"
timeout 60 "$T" run examples/flash_attention.tsr --kernel flash_attention --dims BH=32,S=4096,D=128 \
    --arg causal=true --device gpu --check sampled --json > "$OUT/fa_run.json" 2> "$OUT/fa_run.err"
tail -c 1500 "$OUT/fa_run.json"; cat "$OUT/fa_run.err"

fi
if want tune-hopper; then
log "GEMM 4096^3 over the Hopper choices (benches/gpu/gemm_hopper.tsr): autotune, then run"
timeout ${TUNE_SECONDS:-90} "$T" autotune benches/gpu/gemm_hopper.tsr --kernel gemm_hopper --dims M=4096,N=4096,K=4096 \
    --device gpu --check none --repeat 30 --json > "$OUT/gemm_hopper_autotune.json" 2> "$OUT/gemm_hopper_autotune.err"
echo "rc=$?"; tail -c 3000 "$OUT/gemm_hopper_autotune.json"; tail -5 "$OUT/gemm_hopper_autotune.err"
timeout 60 "$T" run benches/gpu/gemm_hopper.tsr --kernel gemm_hopper --dims M=4096,N=4096,K=4096 --device gpu \
    --check sampled --repeat 30 --json > "$OUT/gemm_hopper_run.json" 2> "$OUT/gemm_hopper_run.err"
tail -c 1500 "$OUT/gemm_hopper_run.json"; cat "$OUT/gemm_hopper_run.err"
fi
if want tune-auto; then
log "the @kernel.auto GEMM (tests/corpus/valid/search_spaces.tsr, f16, f32 C) at 4096^3: its sm_90 space holds the Hopper paths"
timeout ${TUNE_SECONDS:-90} "$T" autotune tests/corpus/valid/search_spaces.tsr --kernel auto_gemm --dims M=4096,N=4096,K=4096 \
    --device gpu --check none --repeat 20 --json > "$OUT/auto_gemm_autotune.json" 2> "$OUT/auto_gemm_autotune.err"
echo "rc=$?"; tail -c 3000 "$OUT/auto_gemm_autotune.json"; tail -5 "$OUT/auto_gemm_autotune.err"
timeout 60 "$T" run tests/corpus/valid/search_spaces.tsr --kernel auto_gemm --dims M=4096,N=4096,K=4096 --device gpu \
    --check sampled --repeat 30 --json > "$OUT/auto_gemm_run.json" 2> "$OUT/auto_gemm_run.err"
tail -c 1500 "$OUT/auto_gemm_run.json"; cat "$OUT/auto_gemm_run.err"
fi
if want candidates; then
log "flash attention at the benchmark size: every candidate alone (one never finished on an H200, 2026-11-28)"
for s in BM=64,BN=64,warps=4,stages=2 BM=64,BN=64,warps=4,stages=3 BM=64,BN=64,warps=8,stages=2 \
         BM=64,BN=64,warps=8,stages=3 BM=64,BN=128,warps=8,stages=2 BM=64,BN=128,warps=8,stages=3 \
         BM=128,BN=64,warps=8,stages=2 BM=128,BN=64,warps=8,stages=3; do
    TESSERA_GPU_TIMEOUT=20 timeout 60 "$T" run examples/flash_attention.tsr --kernel flash_attention \
        --dims BH=32,S=4096,D=128 --arg causal=true --device gpu --check none --repeat 20 --warmup 3 \
        --schedule "$s" --json > "$OUT/fa_$s.json" 2> "$OUT/fa_$s.err"
    echo "$s rc=$? $(grep -A1 '"time_ms"' "$OUT/fa_$s.json" | grep median) $(tail -c 300 "$OUT/fa_$s.err")"
done | tee "$OUT/fa_candidates.txt"
fi
if want nccl && [ -x "$BIN/nccl-test" ]; then
    log "NCCL one-rank all-reduce"
    timeout 60 "$BIN/nccl-test" --nocapture 2>&1 | tee "$OUT/nccl.txt"
fi
if want nccl; then
    # The NCCL fabric on every GPU this machine has: one process per GPU, the sharded
    # MLP when there are 8 GPUs, else the data-parallel step on as many devices.
    gpus=$(nvidia-smi -L | wc -l)
    log "NCCL fabric on $gpus GPUs"
    port=$((29500 + RANDOM % 1000))
    if [ "$gpus" -ge 8 ]; then gpus=8; set -- --kernel mlp --dims B=16,D=32,F=64 tests/corpus/valid/megatron_mlp_sharded.tsr
    else set -- --kernel loss --dims B=$((8 * gpus)),D=8,E=4 --mesh "$gpus" benches/gpu/dp_loss.tsr; fi
    for r in $(seq 0 $((gpus - 1))); do
        RANK=$r LOCAL_RANK=$r WORLD_SIZE=$gpus MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
            timeout 120 "$T" run --device interp --fabric nccl --json "$@" > "$OUT/nccl_fabric_rank$r.json" 2>&1 &
    done
    wait
    grep -h '"verdict"\|"link"\|error' "$OUT"/nccl_fabric_rank*.json | sort | uniq -c
fi
if want cuda-test && [ -x "$BIN/cuda-test" ]; then
    log "every kernel and candidate at two shapes against the interpreter (backends/tests/cuda.rs)"
    # The test finds the sources through the path it was built at.
    built_at=$(cat "$BIN/cuda-test.root" 2>/dev/null)
    if [ -n "$built_at" ] && [ ! -e "$built_at" ]; then mkdir -p "$(dirname "$built_at")" && ln -s "$ROOT" "$built_at"; fi
    TESSERA_REQUIRE_GPU=1 timeout "${CUDA_TEST_SECONDS:-240}" "$BIN/cuda-test" --skip hopper_schedules --nocapture > "$OUT/cuda_test.txt" 2>&1
    echo "cuda-test rc=$?"; tail -40 "$OUT/cuda_test.txt"
fi
log "done"
