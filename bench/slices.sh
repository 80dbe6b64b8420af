#!/usr/bin/env bash
# Named benchmark slices, run in the order given; each appends to RESULTS and resumes where it stopped.
# usage: bench/slices.sh RESULTS SLICE...      (then: python -m bench.report RESULTS/runs.jsonl ..., see README)
# Slices:
#   dense-core      qwen3-8b, STD/BI/CoRun side by side: sharegpt, azure-conv, fixed-1024-128 and
#                   fixed-64-448 (a long pure-decode phase), concurrency 256 (2,560 requests), 3 reps
#   dense-long      qwen3-8b: blazedit-synthetic and fixed {1024,4096} x {128,2048}, one arm at a time
#                   (the whole GPU's KV pool for each arm), 3 reps
#   dense-sweep     qwen3-8b, sharegpt at concurrency 16, 32, 64, 128, 256 (a study of its own), 3 reps
#   dense-ablation  qwen3-8b, sharegpt, fixed-64-448 and azure-conv: STD, split-KV off, + isolated prefill, CoRun
#   dense-tiers     qwen3-8b, sharegpt at concurrency 16, 64, 256: STD, CoRun, and CoRun with the decode
#                   tiers corun-sglang verify-tiers keeps (verified once, before the first server starts)
#   dense-tiers-lt  qwen3-8b, sharegpt at concurrency 16, 64, 256: STD, and CoRun with decode tiers whose
#                   GEMMs run through cuBLASLt (TORCH_BLAS_PREFER_CUBLASLT=1 for that arm and its verify-tiers,
#                   candidates from 32 rows up, where cuBLASLt gives a GEMM row the 256-row bits)
#   dense-profile-lt  qwen3-8b at 16 and 64 running: the same two arms, GPU time per decode step
#   dense-ablation-c16  qwen3-8b, sharegpt at concurrency 16: STD, split-KV off, CoRun with decode tiers
#                   (what a light load's steps cost: the attention without split-KV, or the rest of CoRun)
#   dense-profile   qwen3-8b: GPU time per decode step by kernel kind, 16, 64 and 256 requests running:
#                   STD, split-KV off, CoRun, CoRun with the decode tiers verify-tiers keeps here
#   moe-profile     qwen3-30b-a3b: the same at 16, 64 and 256 running: STD, BI, CoRun
#   moe-tiers       qwen3-30b-a3b at 16 and 64 running: CoRun with the decode tiers verify-tiers keeps among
#                   8-192 (verified once, first), CoRun and STD (what tiers take back of a padded MoE step)
#   moe-padding     qwen3-30b-a3b at 16, 64 and 256 running: CoRun (its padding rows skip the experts), CoRun
#                   with them routed (--corun-moe-padding compute) and STD
#   dense-padding   qwen3-8b, one request in an N-slot decode graph, N = 1, 8, 32, 64, 128, 256, and STD
#   moe-core        qwen3-30b-a3b, one arm at a time: sharegpt, azure-conv, fixed-1024-128, fixed-64-448;
#                   BI without SGLang's prefill CUDA graph (its capture overflows FlashInfer's workspace here)
#   moe-core-tiers  qwen3-30b-a3b, one arm at a time, moe-core's workloads: STD, CoRun, and CoRun with the
#                   committed tiers record of this shape (docs/results/tiers: 96, 128, 192; a server refuses it
#                   where its environment differs, then verify anew without --tiers)
#   moe-tiers-bi    qwen3-30b-a3b, one arm at a time, fixed-1024-128 and fixed-64-448 (moe-core's two workloads
#                   below 1.3x BI): STD, BI and CoRun-tiers with the committed record, side by side in one study
#   moe-pack-bi     qwen3-30b-a3b, one arm at a time, fixed-64-448 (below 1.3x BI for its isolated prefill):
#                   BI, CoRun-tiers and CoRun-tiers-pack (the committed tiers record, and the committed prefill
#                   pack record of 1024 tokens, docs/results/pack; where a server refuses a record, its
#                   environment differs: verify anew without --tiers and --pack)
#   dense-pack      qwen3-8b, fixed-64-448 and sharegpt, side by side at 30 GiB each: STD, BI, CoRun and
#                   CoRun-tiers-pack (the committed decode tiers and 1024-token prefill pack records of this
#                   checkpoint): what packed prefill takes back of isolated prefill's cost on the dense model
#   dense-pack-wait qwen3-8b, sharegpt, side by side at 30 GiB each: STD, CoRun-tiers-pack and
#                   CoRun-tiers-pack-wait (--corun-prefill-pack-wait 32), dense-pack's records: what waiting for
#                   KV takes back of the packs of one prompt (bench/admission.py replays the count)
#   dense-pack-short qwen3-8b, sharegpt and azure-conv, side by side at 30 GiB each: STD, CoRun-tiers-pack and
#                   CoRun-tiers-pack-wait with the committed tiers record and the committed FA3 pack record
#                   (docs/results/pack/pack-qwen3-8b-tp1-bench-fa3.json: prompts pack from 1 token, not 17 as
#                   dense-pack's record; a host whose prefill is not FA3 refuses it: verify anew with
#                   --pack-size 1024): what packing the short prompts takes back (bench/admission.py --shortest 1)
#   dense-pack-c16  qwen3-8b, sharegpt at concurrency 16, 30 GiB each: STD, CoRun-tiers and CoRun-tiers-pack
#                   with dense-pack-short's records: what padding a lone prompt to the pack costs a light load
#   moe-long        qwen3-30b-a3b, one arm at a time: blazedit-synthetic, fixed-1024-2048, fixed-4096-128,
#                   fixed-4096-2048 (with moe-core: every workload of the matrix)
#   tp2-core        qwen3-8b at TP 2 on two GPUs: sharegpt and fixed-64-448
#   prefill-shapes  default SGLang on both models: a 64-, a 1000-, an 8- and a 300-token prompt's prefill bits alone
#                   and packed with co-runners at fixed token counts, also among as many 4-token co-runners as one
#                   batch holds (bench/prefill_shapes.py, docs/results/prefill_shapes.md)
#   sampler         the sampler microbenchmark: plain, top-p 0.9 with top-k 50, and top-p 0.9 alone
#   v2-dense        qwen3-8b, the peers at their best, one arm at a time with one KV pool of 300,000 tokens
#                   (60 GiB static: 15.3 of weights, 41.2 of KV at 144 KiB a token; the cap binds on an H100
#                   and an H200 alike): STD, STD-flashinfer, BI, CoRun (calibrated) and CoRun-nocal; sharegpt,
#                   azure-conv, fixed-1024-128 at concurrency 16, 64, 256 (10 requests per unit), 3 reps.
#                   Needs FA3 on the host (STD and BI default to it on Hopper)
#   v2-dense-open   the same arms and pool, sharegpt, open loop at 2, 4, 8, 16, 32 requests/s (latency vs load)
#   v2-moe          qwen3-30b-a3b, one arm at a time with one KV pool of 600,000 tokens (120 GiB static: 56.9 of
#                   weights, 54.9 of KV at 96 KiB a token): STD, BI, CoRun, CoRun-nocal; v2-dense's
#                   workloads at concurrency 256
# SLICE=W1,W2 runs only those workloads of a run.py slice (to split one slice over two GPUs, or to fit a
# repetition into the GPU time at hand: a repetition is kept only once every arm has run it). One server at a
# time, the workloads of one SLICE share each arm's server start, also when they resume at different
# repetitions (run.py plan: a round runs each workload's next pending repetition).
# DONE=RUNS (e.g. docs/results/bench/runs.jsonl): the whole repetitions that file holds are not run again.
# With two GPUs, run two invocations at once, each with its own CUDA_VISIBLE_DEVICES and RESULTS.
# Every slice runs all its arms interleaved on one GPU and tags its rows with its name (run.py
# --study): the report compares arms only within one study.
# CoRun is --corun alone, which now serves what its calibration verified; the committed rows of these
# slices predate calibration, when CoRun was plain N: the arm CoRun-nocal (calibration off) is that one.
set -uo pipefail
[ $# -ge 2 ] || { sed -n 3p "$0"; exit 2; }
cd "$(dirname "$0")/.."
results="$(realpath -m "$1")"; shift
mkdir -p "$results/logs"
lt_candidates=32,40,48,56,64,72,88,104,128,160,224  # dense-*-lt: one record for both, in RESULTS/logs
base=(python3 -m bench.run --out "$results/runs.jsonl" --logs "$results/logs" ${DONE:+--done "$DONE"})
status=0
for spec in "$@"; do
    slice="${spec%%=*}"
    only() { [ "$spec" = "$slice" ] && echo "$1" || echo "${spec#*=}"; }  # the slice's workloads, or SLICE=...
    echo "== $spec $(date +%T)"
    run=("${base[@]}" --study "$slice")  # a slice's rows form one study of the report
    case "$slice" in
        v2-dense) "${run[@]}" --shape qwen3-8b --reps 3 --concurrency 16,64,256 --one-at-a-time --static-gb 60 \
            --max-total-tokens 300000 --arms STD,STD-flashinfer,BI,CoRun,CoRun-nocal \
            --workloads "$(only sharegpt,azure-conv,fixed-1024-128)" ;;
        v2-dense-open) "${run[@]}" --shape qwen3-8b --reps 3 --request-rate 2,4,8,16,32 --one-at-a-time \
            --static-gb 60 --max-total-tokens 300000 --arms STD,STD-flashinfer,BI,CoRun,CoRun-nocal --workloads "$(only sharegpt)" ;;
        v2-moe) "${run[@]}" --shape qwen3-30b-a3b --reps 3 --concurrency 256 --one-at-a-time --static-gb 120 \
            --max-total-tokens 600000 --arms STD,BI,CoRun,CoRun-nocal \
            --workloads "$(only sharegpt,azure-conv,fixed-1024-128)" ;;
        dense-core) "${run[@]}" --shape qwen3-8b --reps 3 --concurrency 256 \
            --workloads "$(only sharegpt,azure-conv,fixed-1024-128,fixed-64-448)" ;;
        dense-long) "${run[@]}" --shape qwen3-8b --reps 3 --concurrency 256 --one-at-a-time --static-gb 120 \
            --workloads "$(only blazedit-synthetic,fixed-1024-128,fixed-1024-2048,fixed-4096-128,fixed-4096-2048)" ;;
        dense-sweep) "${run[@]}" --shape qwen3-8b --reps 3 --concurrency 16,32,64,128,256 --workloads "$(only sharegpt)" ;;
        dense-ablation) "${run[@]}" --shape qwen3-8b --reps 3 --concurrency 256 \
            --arms STD,SplitKV-off,SplitKV-off+IsoPrefill,CoRun --static-gb 30 \
            --workloads "$(only sharegpt,fixed-64-448,azure-conv)" ;;
        dense-tiers-lt) "${run[@]}" --shape qwen3-8b --reps 3 --concurrency 16,64,256 --arms STD,CoRun-tiers \
            --arm-env CoRun-tiers=TORCH_BLAS_PREFER_CUBLASLT=1 --tier-candidates "$lt_candidates" \
            --workloads "$(only sharegpt)" ;;
        dense-profile-lt) python3 -m bench.step_profile --shape qwen3-8b --arms CoRun-tiers,STD --loads 16,64 \
            --arm-env CoRun-tiers=TORCH_BLAS_PREFER_CUBLASLT=1 --tier-candidates "$lt_candidates" \
            --out "$results/step_profile.jsonl" --logs "$results/logs" ;;
        dense-ablation-c16) "${run[@]}" --shape qwen3-8b --reps 3 --concurrency 16 \
            --arms STD,SplitKV-off,CoRun-tiers --static-gb 30 --workloads "$(only sharegpt)" ;;
        dense-tiers) "${run[@]}" --shape qwen3-8b --reps 3 --concurrency 16,64,256 --arms STD,CoRun,CoRun-tiers \
            --workloads "$(only sharegpt)" ;;
        dense-profile) python3 -m bench.step_profile --shape qwen3-8b --arms CoRun,CoRun-tiers,STD,SplitKV-off \
            --loads 16,64,256 \
            --out "$results/step_profile.jsonl" --logs "$results/logs" ;;
        dense-padding) python3 -m bench.padding --shape qwen3-8b --n 1,8,32,64,128,256 --reps 3 \
            --out "$results/padding.jsonl" --logs "$results/logs" ;;
        moe-core) "${run[@]}" --shape qwen3-30b-a3b --reps 3 --concurrency 256 --one-at-a-time --static-gb 120 \
            --arm-args BI=--disable-prefill-cuda-graph \
            --workloads "$(only sharegpt,azure-conv,fixed-1024-128,fixed-64-448)" ;;
        moe-core-tiers) "${run[@]}" --shape qwen3-30b-a3b --reps 3 --concurrency 256 --one-at-a-time --static-gb 120 \
            --arms STD,CoRun,CoRun-tiers --tiers docs/results/tiers/tiers-qwen3-30b-a3b-tp1-bench.json \
            --workloads "$(only sharegpt,azure-conv,fixed-1024-128,fixed-64-448)" ;;
        moe-tiers-bi) "${run[@]}" --shape qwen3-30b-a3b --reps 3 --concurrency 256 --one-at-a-time --static-gb 120 \
            --arms STD,BI,CoRun-tiers --arm-args BI=--disable-prefill-cuda-graph \
            --tiers docs/results/tiers/tiers-qwen3-30b-a3b-tp1-bench.json \
            --workloads "$(only fixed-1024-128,fixed-64-448)" ;;
        moe-pack-bi) "${run[@]}" --shape qwen3-30b-a3b --reps 3 --concurrency 256 --one-at-a-time --static-gb 120 \
            --arms BI,CoRun-tiers,CoRun-tiers-pack --arm-args BI=--disable-prefill-cuda-graph \
            --tiers docs/results/tiers/tiers-qwen3-30b-a3b-tp1-bench.json \
            --pack docs/results/pack/pack-qwen3-30b-a3b-tp1-bench.json \
            --workloads "$(only fixed-64-448)" ;;
        dense-pack) "${run[@]}" --shape qwen3-8b --reps 3 --concurrency 256 --static-gb 30 \
            --arms STD,BI,CoRun,CoRun-tiers-pack --tiers docs/results/tiers/tiers-qwen3-8b-tp1-bench.json \
            --pack docs/results/pack/pack-qwen3-8b-tp1-bench.json \
            --workloads "$(only fixed-64-448,sharegpt)" ;;
        dense-pack-wait) "${run[@]}" --shape qwen3-8b --reps 3 --concurrency 256 --static-gb 30 \
            --arms STD,CoRun-tiers-pack,CoRun-tiers-pack-wait --tiers docs/results/tiers/tiers-qwen3-8b-tp1-bench.json \
            --pack docs/results/pack/pack-qwen3-8b-tp1-bench.json --workloads "$(only sharegpt)" ;;
        dense-pack-short) "${run[@]}" --shape qwen3-8b --reps 3 --concurrency 256 --static-gb 30 \
            --arms STD,CoRun-tiers-pack,CoRun-tiers-pack-wait --tiers docs/results/tiers/tiers-qwen3-8b-tp1-bench.json \
            --pack docs/results/pack/pack-qwen3-8b-tp1-bench-fa3.json --workloads "$(only sharegpt,azure-conv)" ;;
        dense-pack-c16) "${run[@]}" --shape qwen3-8b --reps 3 --concurrency 16 --static-gb 30 \
            --arms STD,CoRun-tiers,CoRun-tiers-pack --tiers docs/results/tiers/tiers-qwen3-8b-tp1-bench.json \
            --pack docs/results/pack/pack-qwen3-8b-tp1-bench-fa3.json --workloads "$(only sharegpt)" ;;
        moe-long) "${run[@]}" --shape qwen3-30b-a3b --reps 3 --concurrency 256 --one-at-a-time --static-gb 120 \
            --arm-args BI=--disable-prefill-cuda-graph \
            --workloads "$(only blazedit-synthetic,fixed-1024-2048,fixed-4096-128,fixed-4096-2048)" ;;
        moe-profile) python3 -m bench.step_profile --shape qwen3-30b-a3b --arms CoRun,STD,BI --loads 16,64,256 \
            --static-gb 120 --arm-args BI=--disable-prefill-cuda-graph \
            --out "$results/step_profile.jsonl" --logs "$results/logs" ;;
        moe-tiers) python3 -m bench.step_profile --shape qwen3-30b-a3b --arms CoRun-tiers,CoRun,STD --loads 16,64 \
            --static-gb 120 --tier-candidates 8,16,24,32,48,64,96,128,192 \
            --out "$results/step_profile.jsonl" --logs "$results/logs" ;;
        moe-padding) python3 -m bench.step_profile --shape qwen3-30b-a3b --arms CoRun,CoRun-moecompute,STD \
            --loads 16,64,256 --static-gb 120 --out "$results/step_profile.jsonl" --logs "$results/logs" ;;
        tp2-core) "${run[@]}" --shape qwen3-8b --tp-size 2 --reps 3 --concurrency 256 \
            --workloads "$(only sharegpt,fixed-64-448,azure-conv)" ;;
        prefill-shapes) probe=(python3 -m bench.prefill_shapes --arms STD --needle-lens 64,1000,8,300
                               --totals 256,1024,2048,4096 --tiny-len 4 --out "$results/prefill_shapes.jsonl" --logs "$results/logs")
            "${probe[@]}" --shape qwen3-8b && "${probe[@]}" --shape qwen3-30b-a3b ;;
        sampler) python3 -m bench.sampler_cost --out "$results/sampler.json" \
            && python3 -m bench.sampler_cost --top-p 0.9 --top-k 50 --out "$results/sampler_filtered.json" \
            && python3 -m bench.sampler_cost --top-p 0.9 --out "$results/sampler_top_p.json" ;;
        *) echo "unknown slice $slice"; exit 2 ;;
    esac
    status=$(( status || $? ))
done
exit $status
