#!/usr/bin/env bash
# One-command, idempotent set-up of a tested OpenMMLab stack in a virtualenv.
#
#   tools/setup_env.sh                 # the pinned stack in .venv
#   STACK=oldest tools/setup_env.sh    # the oldest supported one in .venv-oldest
#
# The stacks (docs/get_started.md):
#   pinned  Python 3.11, requirements/torch.txt + study.txt (torch 2.14.1)
#   oldest  Python 3.10, requirements/oldest.txt (torch 2.1.2, numpy < 2)
# Both take requirements/runtime.txt (the OpenMMLab packages) and tests.txt,
# and mmcv 2.1.0 with ops built from the sdist.
#
# Environment variables:
#   STACK           pinned (default) or oldest
#   VENV            virtualenv path (default: <repo>/.venv, or .venv-oldest)
#   PYTHON          interpreter used to create it (default: python3.11, else
#                   python3; python3.10 for the oldest stack, also found
#                   among pyenv's versions)
#   MMVITACCEL_CACHE  wheel cache outside the repo (default: ~/.cache/mmvitaccel)
#   MAX_JOBS        parallel compiler jobs for the mmcv build (default: nproc)
#   MMVITACCEL_PROGRESS_SECONDS  seconds between build progress lines (default: 60)
#   MMVITACCEL_MMCV_BUILD_CMD  (tests only) a command run in the unpacked mmcv
#                   source instead of the real `pip wheel`; it must leave a
#                   wheel in $MMCV_DIST. tests/test_setup_env.py uses it to run
#                   the cold path without the minutes of a real compile.
#
# Every path is made absolute before the script changes directory (make passes
# VENV=.venv, relative to the repository). A run killed half-way (during the
# mmcv build, say) leaves nothing that the next run mistakes for a finished
# step: the wheel enters the cache under its final name only once complete,
# and the "done" stamp is written last.
#
# mmcv 2.1.0 has no wheel for torch 2.14 (nor on PyPI for any torch), so it is
# built from the PyPI sdist with ops (MMCV_WITH_OPS=1). Its setup.py hard-codes
# -std=c++17, while torch >= 2.6 headers need C++20; for those we patch that
# flag in the unpacked sdist. The built wheel is kept in a cache directory keyed
# by the torch version and the Python tag, because pip's own wheel cache ignores
# torch and can return an ABI-incompatible build.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# Relative paths are taken from the caller's directory, once, here.
abspath() { case "$1" in /*) printf '%s\n' "$1" ;; *) printf '%s\n' "$PWD/$1" ;; esac; }
STACK="${STACK:-pinned}"
case "$STACK" in
    pinned) STACK_REQS=("$ROOT/requirements/torch.txt" "$ROOT/requirements/study.txt")
            DEFAULT_VENV="$ROOT/.venv"; WANT_PY=3.11 ;;
    oldest) STACK_REQS=("$ROOT/requirements/oldest.txt")
            DEFAULT_VENV="$ROOT/.venv-oldest"; WANT_PY=3.10 ;;
    *) echo "[setup] STACK must be 'pinned' or 'oldest', got '$STACK'" >&2; exit 2 ;;
esac
VENV="$(abspath "${VENV:-$DEFAULT_VENV}")"
CACHE="$(abspath "${MMVITACCEL_CACHE:-$HOME/.cache/mmvitaccel}")"
MMCV_VERSION=2.1.0
TORCH_VERSION="$(sed -n 's/^torch==//p' "${STACK_REQS[0]}")"
STAMP="$VENV/.mmvitaccel-setup-done"

# An interpreter of version $WANT_PY that runs: on PATH, else among pyenv's
# versions (a pyenv shim of a version that is not selected exists but fails).
find_python() {
    local cand
    for cand in "python$WANT_PY" "$(pyenv root 2>/dev/null)"/versions/"$WANT_PY".*/bin/python"$WANT_PY"; do
        if "$cand" -c 'import venv' >/dev/null 2>&1; then printf '%s\n' "$cand"; return 0; fi
    done
    if [ "$STACK" = pinned ]; then printf 'python3\n'; return 0; fi
    echo "[setup] the $STACK stack needs Python $WANT_PY; none runs here (set PYTHON)" >&2
    return 2
}
if [ -z "${PYTHON:-}" ]; then
    PYTHON="$(find_python)"
fi

if [ -f "$STAMP" ] && [ "$STAMP" -nt "$ROOT/setup.py" ] \
    && [ "$STAMP" -nt "$ROOT/tools/setup_env.sh" ] \
    && [ "$STAMP" -nt "$ROOT/requirements/runtime.txt" ] \
    && [ "$STAMP" -nt "${STACK_REQS[0]}" ] \
    && [ "$STAMP" -nt "${STACK_REQS[-1]}" ] \
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
log "installing torch $TORCH_VERSION ($STACK stack)"
"${PIP[@]}" install -q -r "${STACK_REQS[0]}"

# The OpenMMLab packages do not require mmcv in their metadata, so the stack
# (and mmcv's own runtime dependencies) go in first; mmcv comes last. The
# stack's own file constrains the rest (numpy < 2 on the oldest stack).
log "installing the OpenMMLab stack"
STACK_ARGS=()
for req in "${STACK_REQS[@]}"; do STACK_ARGS+=(-r "$req" -c "$req"); done
"${PIP[@]}" install -q "${STACK_ARGS[@]}" -r "$ROOT/requirements/runtime.txt" \
    -r "$ROOT/requirements/tests.txt" \
    addict packaging Pillow pyyaml yapf opencv-python

have_mmcv() {
    "$PY" - <<'PYEOF' 2>/dev/null
import mmcv, torch
from mmcv.ops import roi_align  # noqa: F401  (needs the compiled ops)
assert mmcv.__version__ == '2.1.0'
PYEOF
}

valid_wheel() {
    "$PY" -c 'import sys, zipfile; sys.exit(zipfile.ZipFile(sys.argv[1]).testzip() is not None)' "$1" 2>/dev/null
}

# Run a long command with its output in a log file, printing a line a minute
# (elapsed time and the compiler's [done/total] step) so that a user sees it is alive.
# $1: the log file; the rest: the command.
with_progress() {
    local logf="$1"; shift
    local start=$SECONDS
    "$@" > "$logf" 2>&1 &
    local pid=$!
    while kill -0 "$pid" 2>/dev/null; do
        sleep "${MMVITACCEL_PROGRESS_SECONDS:-60}" &
        wait $! || true
        if kill -0 "$pid" 2>/dev/null; then
            log "  ... $(( SECONDS - start )) s, compile step $(grep -o '\[[0-9]*/[0-9]*\]' "$logf" 2>/dev/null | tail -n1 || true)"
        fi
    done
    wait "$pid"
}

if ! have_mmcv; then
    WHEEL_DIR="$CACHE/wheels/torch-$TORCH_VERSION-$("$PY" -c 'import sys;print(f"cp{sys.version_info[0]}{sys.version_info[1]}")')"
    mkdir -p "$WHEEL_DIR"
    WHEEL="$(ls "$WHEEL_DIR"/mmcv-"$MMCV_VERSION"-*.whl 2>/dev/null | head -n1 || true)"
    if [ -n "$WHEEL" ] && ! valid_wheel "$WHEEL"; then
        log "removing a damaged cached wheel $WHEEL"
        rm -f "$WHEEL"
        WHEEL=""
    fi
    if [ -z "$WHEEL" ]; then
        BUILD="$(mktemp -d)"
        trap 'rm -rf "$BUILD"' EXIT
        log "building mmcv $MMCV_VERSION with ops in $BUILD"
        log "  measured cold on 2 cores: 4 to 5 minutes; a progress line follows every minute"
        "${PIP[@]}" download -q --no-deps --no-build-isolation --no-binary :all: "mmcv==$MMCV_VERSION" -d "$BUILD"
        tar -xzf "$BUILD"/mmcv-"$MMCV_VERSION".tar.gz -C "$BUILD"
        SRC="$BUILD/mmcv-$MMCV_VERSION"
        if [ "$(printf '%s\n' 2.6 "$TORCH_VERSION" | sort -V | head -n1)" = 2.6 ]; then
            sed -i 's/-std=c++17/-std=c++20/g' "$SRC/setup.py"  # torch >= 2.6
            grep -q 'c++20' "$SRC/setup.py" || { echo "C++20 patch did not apply" >&2; exit 1; }
        fi
        export MMCV_DIST="$BUILD/dist"
        BUILD_CMD=("${PIP[@]}" wheel -v --no-build-isolation --no-deps . -w "$MMCV_DIST")
        if [ -n "${MMVITACCEL_MMCV_BUILD_CMD:-}" ]; then BUILD_CMD=(bash -c "$MMVITACCEL_MMCV_BUILD_CMD"); fi
        # -g0: no debug information. The interpreter's flags carry -g, and
        # debug information for mmcv's template-heavy ops doubles the compile
        # time (deform_conv.cpp: 189/245 s with -g, 92/107 s with -g0,
        # interleaved on 2 busy cores); the wheel is also smaller.
        (cd "$SRC" && MMCV_WITH_OPS=1 MAX_JOBS="${MAX_JOBS:-$(nproc)}" \
            CFLAGS="${CFLAGS:-} -g0" CXXFLAGS="${CXXFLAGS:-} -g0" \
            with_progress "$BUILD/build.log" "${BUILD_CMD[@]}") \
            || { tail -n 50 "$BUILD/build.log"; echo "[setup] the mmcv build failed; full log above" >&2; exit 1; }
        BUILT="$(ls "$MMCV_DIST"/mmcv-*.whl)"
        # Enter the cache atomically: a copy killed half-way leaves only a .part file.
        cp "$BUILT" "$WHEEL_DIR/.$(basename "$BUILT").part"
        mv "$WHEEL_DIR/.$(basename "$BUILT").part" "$WHEEL_DIR/$(basename "$BUILT")"
        WHEEL="$WHEEL_DIR/$(basename "$BUILT")"
        log "cached $WHEEL"
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
