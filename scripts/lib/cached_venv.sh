# Sourced by the setup scripts of the tiers that need a virtualenv of their own under
# ~/.cache (the CPU vLLM, Phoenix): one marker file holds what the venv was built for
# (its package pin and Python version), so a second run is a no-op and a changed pin
# rebuilds it. The caller installs its packages between venv_begin and venv_done.

# venv_key PYTHON SPEC: what a venv of SPEC built with PYTHON is, as the marker records it.
venv_key() {
    printf '%s python=%s' "$2" "$("$1" -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
}

# venv_ready MARKER KEY EXECUTABLE: the marker says KEY and the executable is there.
venv_ready() {
    [[ -f "$1" && "$(cat "$1")" == "$2" && -x "$3" ]]
}

# venv_begin VENV MARKER PYTHON: the venv exists (reused if it does) with a current pip,
# and no longer claims to be ready until venv_done.
venv_begin() {
    mkdir -p "$(dirname "$1")"
    rm -f "$2"
    [[ -x "$1/bin/python" ]] || "$3" -m venv "$1"
    "$1/bin/python" -m pip install --quiet --upgrade pip
}

# venv_done MARKER KEY: the venv is ready for KEY.
venv_done() {
    echo "$2" >"$1"
}
