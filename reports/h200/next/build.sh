# build.sh: the device scripts' common start, sourced after they set NIBBLE_SOURCE_COMMIT and t0:
# the environment, the hopper preset configured (NIBBLE_CMAKE_ARGS: the seccomp paths,
# ../sandbox-ledger/README.md) and the targets given built (`all` for everything: sourced with no
# argument, bash hands it the caller's own, the commit), logs in $OUT; the caller exits with the
# build log's tail when the build fails.
#   source reports/h200/next/build.sh target ...
source scripts/env.sh
cmake --preset hopper ${NIBBLE_CMAKE_ARGS:-} > "$OUT/configure.log" 2>&1
cmake --build build-hopper -j16 --target "${@:?build.sh: name the targets (all: everything)}" > "$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 1; }
echo "built ($(( $(date +%s) - t0 )) s)"
