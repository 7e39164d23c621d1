# env.sh: sourced by the scripts; puts nvcc on PATH when the toolkit sits in /usr/local/cuda.
if ! command -v nvcc >/dev/null 2>&1 && [ -x /usr/local/cuda/bin/nvcc ]; then
  export PATH=/usr/local/cuda/bin:$PATH
fi
NIBBLE_JOBS=${NIBBLE_JOBS:-$(nproc)}
