#!/usr/bin/env bash
# One-command, idempotent set-up of the pinned OpenMMLab stack in ./.venv.
#
#   tools/setup_env.sh            # create/complete .venv
#
# Environment variables:
#   VENV            virtualenv path (default: <repo>/.venv)
#   PYTHON          interpreter used to create it (default: python3.11, else python3)
#   MMVITACCEL_CACHE  wheel cache outside the repo (default: ~/.cache/mmvitaccel)
#
# mmcv 2.1.0 has no wheel for torch 2.14, so it is built from the PyPI sdist with
# ops (MMCV_WITH_OPS=1). Its setup.py hard-codes -std=c++17, while torch 2.14
# headers need C++20; we patch that flag in the unpacked sdist. The built wheel is
# kept in a cache directory keyed by the torch version, because pip's own wheel
# cache ignores torch and can return an ABI-incompatible build.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${VENV:-$ROOT/.venv}"
CACHE="${MMVITACCEL_CACHE:-$HOME/.cache/mmvitaccel}"
MMCV_VERSION=2.1.0
TORCH_VERSION="$(sed -n 's/^torch==//p' "$ROOT/requirements/torch.txt")"
STAMP="$VENV/.mmvitaccel-setup-done"

if [ -z "${PYTHON:-}" ]; then
    if command -v python3.11 >/dev/null 2>&1; then PYTHON=python3.11; else PYTHON=python3; fi
fi

if [ -f "$STAMP" ] && [ "$STAMP" -nt "$ROOT/setup.py" ] \
    && [ "$STAMP" -nt "$ROOT/tools/setup_env.sh" ] \
    && [ "$STAMP" -nt "$ROOT/requirements/runtime.txt" ] \
    && [ "$STAMP" -nt "$ROOT/requirements/torch.txt" ] \
    && [ "$STAMP" -nt "$ROOT/requirements/build.txt" ] \
    && [ "$STAMP" -nt "$ROOT/requirements/tests.txt" ]; then
    echo "[setup] $VENV is up to date"
    exit 0
fi

log() { echo "[setup] $*"; }

if [ -x "$VENV/bin/python" ] && ! "$VENV/bin/python" -m pip --version >/dev/null 2>&1; then
    log "removing a half-made virtualenv $VENV (no pip)"
    rm -rf "$VENV"
fi
if [ ! -x "$VENV/bin/python" ]; then
    log "creating virtualenv $VENV with $PYTHON"
    "$PYTHON" -m venv "$VENV"
fi
PY="$VENV/bin/python"
PIP=("$PY" -m pip --disable-pip-version-check)

"${PIP[@]}" install -q --upgrade pip
"${PIP[@]}" install -q -r "$ROOT/requirements/build.txt"
log "installing torch $TORCH_VERSION"
"${PIP[@]}" install -q -r "$ROOT/requirements/torch.txt"

# The OpenMMLab packages do not require mmcv in their metadata, so the pinned
# stack (and mmcv's own runtime dependencies) go in first; mmcv comes last.
log "installing the OpenMMLab stack"
"${PIP[@]}" install -q -r "$ROOT/requirements/runtime.txt" \
    -r "$ROOT/requirements/tests.txt" \
    addict packaging Pillow pyyaml yapf opencv-python

have_mmcv() {
    "$PY" - <<'PYEOF' 2>/dev/null
import mmcv, torch
from mmcv.ops import roi_align  # noqa: F401  (needs the compiled ops)
assert mmcv.__version__ == '2.1.0'
PYEOF
}

if ! have_mmcv; then
    WHEEL_DIR="$CACHE/wheels/torch-$TORCH_VERSION-$("$PY" -c 'import sys;print(f"cp{sys.version_info[0]}{sys.version_info[1]}")')"
    mkdir -p "$WHEEL_DIR"
    WHEEL="$(ls "$WHEEL_DIR"/mmcv-"$MMCV_VERSION"-*.whl 2>/dev/null | head -n1 || true)"
    if [ -z "$WHEEL" ]; then
        BUILD="$(mktemp -d)"
        log "building mmcv $MMCV_VERSION with ops (about 15 minutes on 2 cores) in $BUILD"
        "${PIP[@]}" download -q --no-deps --no-build-isolation --no-binary :all: "mmcv==$MMCV_VERSION" -d "$BUILD"
        tar -xzf "$BUILD"/mmcv-"$MMCV_VERSION".tar.gz -C "$BUILD"
        SRC="$BUILD/mmcv-$MMCV_VERSION"
        sed -i 's/-std=c++17/-std=c++20/g' "$SRC/setup.py"
        grep -q 'c++20' "$SRC/setup.py" || { echo "C++20 patch did not apply" >&2; exit 1; }
        (cd "$SRC" && MMCV_WITH_OPS=1 MAX_JOBS="${MAX_JOBS:-$(nproc)}" \
            "${PIP[@]}" wheel -v --no-build-isolation --no-deps . -w "$BUILD/dist" > "$BUILD/build.log" 2>&1) \
            || { tail -n 50 "$BUILD/build.log"; exit 1; }
        cp "$BUILD"/dist/mmcv-*.whl "$WHEEL_DIR/"
        rm -rf "$BUILD"
        WHEEL="$(ls "$WHEEL_DIR"/mmcv-"$MMCV_VERSION"-*.whl | head -n1)"
    else
        log "using cached mmcv wheel $WHEEL"
    fi
    "${PIP[@]}" install -q --no-deps --force-reinstall "$WHEEL"
    have_mmcv || { echo "mmcv with ops does not import" >&2; exit 1; }
fi

log "installing mmvitaccel (editable)"
"${PIP[@]}" install -q --no-build-isolation --no-deps -e "$ROOT"
"$PY" -c 'import mmvitaccel; print("[setup] mmvitaccel", mmvitaccel.__version__, "ready")'
touch "$STAMP"
