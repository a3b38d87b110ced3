# Shared by run_mt_grpo.sh, run_grpo.sh and run_ms_po.sh (sourced, not run): builds and runs one `rlvr train`.
#
#   run_train ALGO [cpu|gpu] [extra `rlvr train` arguments...]
#
# gpu (default): the MT-GRPO paper's TriviaQA setting (Zeng et al. 2025, arXiv:2505.11821): Qwen2.5-7B-Instruct,
#   21 rollouts per prompt, lr 1e-6, beta 0, 2 optimizer passes per batch, 300 steps, full fine-tuning in bf16
#   (configs/train/triviaqa_mt_grpo_gpu.toml). NUM_PROCESSES=N > 1 trains on N GPUs under `accelerate launch`
#   with DeepSpeed ZeRO-3 and needs SERVER=URL of an `rlvr serve` on a GPU of its own (the paper: 7 + 1).
# cpu: SmolLM2-135M on the same environment with the `search` protocol, sized for a 2-core CPU
#   (configs/train/triviaqa_mt_grpo_cpu.toml).
# Environment: DEVICE=cpu|gpu (or the first argument), MAX_STEPS, RUN_DIR, SERVER, NUM_PROCESSES,
#   RLVR and ACCELERATE (the executables, default: the repo's .venv), DRY_RUN=1 prints the command instead of
#   running it.

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

run_train() {
    local algo="$1"
    shift
    local device="${DEVICE:-gpu}"
    if [[ "${1:-}" == "cpu" || "${1:-}" == "gpu" ]]; then
        device="$1"
        shift
    fi
    local rlvr="${RLVR:-$REPO/.venv/bin/rlvr}"
    local run_dir="${RUN_DIR:-runs/${algo}-${device}-$(date +%Y%m%d-%H%M%S)}"
    local -a cmd sets
    case "$device" in
        gpu)
            local processes="${NUM_PROCESSES:-1}"
            sets=(--set rollouts_per_example=21 --set learning_rate=1e-6 --set beta=0
                  --set num_iterations=2 --set "max_steps=${MAX_STEPS:-300}" --set bf16=true --set use_lora=false)
            if (( processes > 1 )); then
                if [[ -z "${SERVER:-}" ]]; then
                    echo "NUM_PROCESSES=$processes needs SERVER=http://HOST:PORT, an \`rlvr serve --model" \
                         "Qwen/Qwen2.5-7B-Instruct\` on a GPU the training processes do not use" >&2
                    return 2
                fi
                cmd=("${ACCELERATE:-$REPO/.venv/bin/accelerate}" launch --config_file "$REPO/src/rlvr/trainer/accelerate/zero3.yaml"
                     --num_processes "$processes" -m rlvr.cli train)
            else
                cmd=("$rlvr" train)
            fi
            cmd+=(--config "$REPO/configs/train/triviaqa_mt_grpo_gpu.toml")
            ;;
        cpu)
            sets=(--set "max_steps=${MAX_STEPS:-20}")
            cmd=("$rlvr" train --config "$REPO/configs/train/triviaqa_mt_grpo_cpu.toml")
            ;;
        *)
            echo "unknown device '$device': use cpu or gpu (argument or DEVICE=)" >&2
            return 2
            ;;
    esac
    cmd+=(--algo "$algo" "${sets[@]}" --run-dir "$run_dir")
    if [[ -n "${SERVER:-}" ]]; then
        cmd+=(--server "$SERVER")
    fi
    cmd+=("$@")
    if [[ "${DRY_RUN:-0}" == "1" ]]; then
        printf '%q ' "${cmd[@]}"
        printf '\n'
        return 0
    fi
    "${cmd[@]}"
}
