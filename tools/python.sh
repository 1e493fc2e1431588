# Sourced by the launch scripts: sets PYTHON to the project's interpreter.
# Order: $PYTHON if set; else $VENV/bin/python (VENV relative to the current
# directory, as make passes it); else <repo>/.venv/bin/python (what
# tools/setup_env.sh builds); else python3 from PATH (an existing OpenMMLab
# environment).
_MMVITACCEL_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
if [ -z "${PYTHON:-}" ]; then
    for _candidate in ${VENV:+"$VENV/bin/python"} "$_MMVITACCEL_ROOT/.venv/bin/python"; do
        if [ -x "$_candidate" ]; then PYTHON="$_candidate"; break; fi
    done
    PYTHON="${PYTHON:-python3}"
fi
export PYTHONPATH="$_MMVITACCEL_ROOT${PYTHONPATH:+:$PYTHONPATH}"
