# Sourced by cuda_run.sh and cuda_measure.sh from the repo root: the environment both run under, the
# CUDA check, and `need`, which installs the modules that are missing with the torch there pinned.
#
# Needs a CUDA build of torch already installed (never installs torch: a bare `pip install torch`
# can pull a different CUDA build).  Wheels come from .whl/ at the repo root if there (machines
# without network), else PyPI.
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
PY="${PYTHON:-python3}"
OUT_DIR="${OUT:-benchmarks/results}"
BUDGET_S="${BUDGET_S:-400}"
mkdir -p "$OUT_DIR"

"$PY" -c 'import torch; assert torch.cuda.is_available(), "torch here has no CUDA device"; print("torch", torch.__version__, "cuda", torch.version.cuda, torch.cuda.get_device_name(0))'

# need MODULE[:PACKAGE]...: pip-install PACKAGE (default MODULE) for each MODULE that does not import.
need() {
    local wanted=() pair pins
    for pair in "$@"; do
        "$PY" -c "import ${pair%%:*}" 2>/dev/null || wanted+=("${pair#*:}")
    done
    ((${#wanted[@]})) || return 0
    # Pin the torch that is there so no dependency resolution replaces it.
    pins="$(mktemp)"
    "$PY" -c 'import torch; print("torch==" + torch.__version__)' >"$pins"
    if [ -d .whl ]; then
        "$PY" -m pip install -q --no-index --find-links .whl -c "$pins" "${wanted[@]}"
    else
        "$PY" -m pip install -q -c "$pins" "${wanted[@]}"
    fi
}
