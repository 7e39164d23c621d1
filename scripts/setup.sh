#!/usr/bin/env bash
# setup.sh: install what a fresh Debian/Ubuntu machine lacks to build and test nibble.
# Skips whatever is already present (the GPU machines have everything and no network).
# python3-dev: Python.h and libpython3 for the Python shims (nibble grade --solution x.py); a pyenv
# or conda Python built shared brings its own, and then apt is not asked.
set -euo pipefail

# Optional packages: without them nibble still builds and every report says what is missing
# (libseccomp-dev: the child's seccomp layer, "seccomp: not built in"; python3-dev: the Python shims;
# slurm-wlm and munge: the test that runs nibble batch --slurm on a one-node cluster, skipped without).
optional="libseccomp-dev python3-dev slurm-wlm munge"
need_pkgs=()
for p in cmake g++ nlohmann-json3-dev libcli11-dev libssl-dev libgtest-dev libbenchmark-dev libseccomp-dev python3-dev python3 python3-pip slurm-wlm munge; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    # python3/pip may come from elsewhere (pyenv, a venv): only ask apt when the command is missing.
    case "$p" in
      python3) command -v python3 >/dev/null && continue ;;
      python3-pip) python3 -m pip --version >/dev/null 2>&1 && continue ;;
      cmake) command -v cmake >/dev/null && continue ;;
      g++) command -v g++ >/dev/null && continue ;;
      python3-dev) python3 -c 'import sysconfig, os, sys; sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")))' 2>/dev/null && continue ;;
    esac
    need_pkgs+=("$p")
  fi
done
required=()
for p in "${need_pkgs[@]}"; do [[ " $optional " == *" $p "* ]] || required+=("$p"); done
if ((${#need_pkgs[@]})); then
  echo "setup: installing ${need_pkgs[*]}"
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO=sudo
  if ! { $SUDO apt-get update -qq; DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_pkgs[@]}"; }; then
    if ((${#required[@]})); then
      echo "setup: could not install ${required[*]}, which nibble needs to build; install them (apt-get install ${required[*]}) and re-run." >&2
      exit 1
    fi
    # An offline machine (the GPU hosts): build without the optional parts; CMake and every report say so.
    echo "setup: could not install the optional ${need_pkgs[*]} (no network?); building without them"
  fi
else
  echo "setup: system packages present"
fi

# Optional: headless Chromium renders the HTML report in a test (skipped, with the reason, without
# it). Machines without network (the GPU hosts) simply go without.
if ! command -v chromium >/dev/null 2>&1; then
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO=sudo
  if { $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq chromium; } >/dev/null 2>&1; then
    echo "setup: installed chromium (HTML report rendering test)"
  else
    echo "setup: chromium not installable here; the HTML rendering test will skip"
  fi
fi

# The tests cross-check fixtures with numpy + safetensors (independent of the C++).
if ! python3 -c 'import numpy, safetensors' 2>/dev/null; then
  echo "setup: installing numpy and safetensors for python3"
  python3 -m pip install -q numpy safetensors || python3 -m pip install -q --break-system-packages numpy safetensors
fi

if ! command -v nvcc >/dev/null 2>&1 && [ ! -x /usr/local/cuda/bin/nvcc ]; then
  echo "setup: the CUDA toolkit (nvcc, cuBLAS, CUPTI) is required and was not found." >&2
  echo "       Install NVIDIA's CUDA toolkit (12.4 or later; 13.0 is what nibble is tested with) and re-run." >&2
  exit 1
fi
