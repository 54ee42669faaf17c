#!/usr/bin/env bash
# The checks only a GPU can run, in one call of a lent machine (docs/engine.md, The GPU path), most
# telling first, each under its own time limit so one that hangs leaves the rest their time:
#
#   1. tests/gpu: the Triton kernels at real shapes, CUDA graphs against eager, the engine against
#      transformers, a 1P1D cluster on one GPU (cuda_ipc and gRPC hand-offs), no compile mid-load
#   2. bench/engine.py: decode and prefill tokens/s against transformers on the GPU
#   3. pdserve profile: the GPU cost model the simulator's --cost-model takes
#   4. bench/slo.py under MPS: fcfs against scorpio on `fixed`, both workers on the one GPU, every
#      request's timings kept and joined with the gateway's log (tools/front_end_gap.py)
#   4b. slo-trace: the same on the Azure conversation trace (`--workload trace`), tuned on nothing
#   5. bench/front_end_cost.py under MPS: the gateway's CPU per request where its event loop,
#      not the GPU, sets the knee (at FRONT_RATE req/s, default 128, below the knee), streaming
#      token by token (--stream-interval-ms 0) and as pdserve up starts it (auto there), each
#      beside its gRPC floor (bench/lib/grpc_floor.py: the same calls and messages, nothing else)
#   6. gateway-ab: bench/front_end_cost.py for `scorpio` from the code in ab-base/ (`bash
#      tools/ab_base.sh REV` writes it) and from the working tree, taking turns AB_ROUNDS times
#      (default 2) at AB_RATE req/s (default 480: past the knee on an H200, the loop saturated),
#      ten seconds of arrivals each: what a change to the gateway's request path is worth there
#   7. sim-vs-real (never a default either): bench/sim_vs_real.py on the lent machine's CPU cores, the
#      tiny model as on a 2-core host, but with cores to spare for the gateway and the load tester (a
#      2-core host runs them on the workers' cores; docs/decisions.md, "sim_vs_real: also run where the
#      front end has cores of its own"); SIM_SECONDS a point (default 15)
#
#   source .gpu/device-env.sh && bash bench/gpu_checks.sh tests-gpu engine profile   # ≤ 510 s
#   source .gpu/device-env.sh && bash bench/gpu_checks.sh slo                         # ≤ 420 s
#   source .gpu/device-env.sh && bash bench/gpu_checks.sh slo-trace                   # ≤ 420 s
#   source .gpu/device-env.sh && bash bench/gpu_checks.sh front-end                   # ≤ 300 s
#   source .gpu/device-env.sh && bash bench/gpu_checks.sh gateway-ab                  # ≤ 240 s (2 rounds)
#   source .gpu/device-env.sh && bash bench/gpu_checks.sh sim-vs-real                 # ≤ 560 s
#
# (one device call runs at most 600 s: the steps named, in the order above; none named: the first six.)
# PRESET (default 1b), DEVICE (default cuda), SLO_GRID (default 128,192,256,320,384: around the 1b
# model's fcfs knee on `fixed`, within one call's time), SLO_SECONDS (seconds of arrivals per point,
# default 10) and OUT (default bench/results/gpu) change what it runs; SLO_GRID's and AB_RATE's
# defaults were chosen by measurement (docs/decisions.md, "GPU checks: the rates they run at");
# `PRESET=tiny DEVICE=cpu` walks every step on a CPU. A step that fails is reported and the next
# one runs; the exit status is the number of steps that failed.
set -uo pipefail

preset=${PRESET:-1b}
device=${DEVICE:-cuda}
out=${OUT:-bench/results/gpu}
mkdir -p "$out"
failed=0

step() {  # step NAME SECONDS COMMAND...: runs COMMAND under a time limit, its output to $out/NAME.log
    local name=$1 seconds=$2
    shift 2
    echo "== $name (at most ${seconds} s), $(date +%T)"
    if timeout "$seconds" "$@" > "$out/$name.log" 2>&1; then
        echo "   done: $(tail -n 1 "$out/$name.log" | cut -c1-200)"
    else
        echo "   FAILED (status $?), last lines of $out/$name.log:"
        tail -n 15 "$out/$name.log" | sed 's/^/   | /'
        failed=$((failed + 1))
    fi
}

mps=()
[[ $device == cuda* ]] && mps=(--mps)
steps=("$@")
[[ ${#steps[@]} -eq 0 ]] && steps=(tests-gpu engine profile slo slo-trace front-end)
wanted() { [[ " ${steps[*]} " == *" $1 "* ]]; }

wanted tests-gpu && step tests-gpu 240 python3 -m pytest -q tests/gpu
wanted engine && step engine 150 python3 bench/engine.py --preset "$preset" --dtype bfloat16 --device "$device" \
    --out "$out/engine-$preset-$device.json"
wanted profile && step profile 120 python3 -m pdserve profile --preset "$preset" --device "$device" \
    --out "$out/profile-$preset-$device.json"
# the slo step's clusters' logs and the load tester's per-request records come back under $out/work
mkdir -p "$out/work"
wanted slo && TMPDIR="$out/work" step slo 420 python3 bench/slo.py --device "$device" --preset "$preset" "${mps[@]}" --workload fixed \
    --grid "${SLO_GRID:-128,192,256,320,384}" --detailed --duration-s "${SLO_SECONDS:-10}" \
    --out "$out/slo-$preset-$device-fixed.json" --plot "$out/slo-$preset-$device-fixed.png"
if wanted slo; then  # per request: the tester's TTFT against the gateway's, and the wait neither saw
    work_dir=$(ls -dt "$out"/work/pdserve-slo-* 2>/dev/null | head -n 1)
    [[ -n $work_dir ]] && step gap 60 python3 tools/front_end_gap.py "$work_dir" --out "$out/front-end-gap.json"
fi
wanted slo-trace && step slo-trace 420 python3 bench/slo.py --device "$device" --preset "$preset" "${mps[@]}" \
    --workload trace --grid "${SLO_GRID:-128,192,256,320,384}" --duration-s "${SLO_SECONDS:-10}" \
    --out "$out/slo-$preset-$device-trace.json" --plot "$out/slo-$preset-$device-trace.png"
wanted front-end && step front-end 300 python3 bench/front_end_cost.py --device "$device" --preset "$preset" "${mps[@]}" \
    --policy scorpio --stream-interval 0,default --rate "${FRONT_RATE:-128}" --num-prompts "$(( ${FRONT_RATE:-128} * 10 ))" \
    --grpc-floor --out "$out/front-end-cost-$preset-$device.json"

if wanted gateway-ab; then  # (never one of the defaults: it needs ab-base/)
    if [[ ! -d ab-base ]]; then
        echo "== gateway-ab: no ab-base/ (bash tools/ab_base.sh REV, and carry it)"
        failed=$((failed + 1))
    else
        out_abs=$(cd "$out" && pwd)
        rate=${AB_RATE:-480}
        for round in $(seq "${AB_ROUNDS:-2}"); do
            for arm in base new; do
                dir=$PWD
                [[ $arm == base ]] && dir=$PWD/ab-base
                step "gateway-ab-$arm-$round" 120 bash -c "cd '$dir' && PYTHONPATH='$dir'\${PYTHONPATH:+:\$PYTHONPATH} \
                    python3 bench/front_end_cost.py --device '$device' --preset '$preset' ${mps[*]} --policy scorpio \
                    --rate $rate --num-prompts $((rate * 10)) --out '$out_abs/gateway-ab-$arm-$round.json'"
            done
        done
    fi
fi

# (the cost profile it simulates with is measured there, once, as `pdserve simulate` would)
wanted sim-vs-real && step sim-vs-real 560 python3 bench/sim_vs_real.py \
    --duration-s "${SIM_SECONDS:-15}" --out "$out/sim-vs-real-cpu-many-cores.json" --plot "$out/sim-vs-real-cpu-many-cores.png"

echo "== $failed step(s) failed; results and logs in $out"
exit "$failed"
