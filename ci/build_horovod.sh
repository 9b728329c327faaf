#!/usr/bin/env bash
# Install Horovod 0.28.1 (PyTorch, Gloo; MPI too when Open MPI's headers are installed) into
# the active Python environment, building it from the PyPI sdist unless a wheel built for the
# same Python, torch and MPI choice is cached in $DISTBRIDGE_WHEEL_CACHE.
#
# The sdist asks CMake for C++14, but torch >= 2.1 headers need C++17: both
# `set(CMAKE_CXX_STANDARD 14)` lines are patched to 17 before building.
#
# Usage: ci/build_horovod.sh [PYTHON]   (default: python on PATH; torch must be installed)
# Environment: DISTBRIDGE_WHEEL_CACHE (default ~/.cache/distbridge/wheels),
#              DISTBRIDGE_HOROVOD_REBUILD=1 to ignore the cache, MAKEFLAGS (default -j<cores>).
set -euo pipefail

VERSION=0.28.1
PYTHON=${1:-python}
CACHE_ROOT=${DISTBRIDGE_WHEEL_CACHE:-$HOME/.cache/distbridge/wheels}

log() { echo "build_horovod: $*" >&2; }

torch_version=$("$PYTHON" -c 'import torch; print(torch.__version__)') || {
    log "torch is not importable with $PYTHON: install it first (pip install -c ci/constraints.txt torch)."
    exit 1
}
py_tag=$("$PYTHON" -c 'import sys; print(f"cp{sys.version_info[0]}{sys.version_info[1]}")')

# Open MPI's compiler wrappers and headers come with libopenmpi-dev; with only openmpi-bin,
# CMake's MPI search fails, so MPI support is built only when the headers are there.
if command -v mpicxx >/dev/null 2>&1 && command -v mpirun >/dev/null 2>&1; then
    with_mpi=1
    mpi_tag=mpi
else
    with_mpi=0
    mpi_tag=nompi
fi

cache_dir="$CACHE_ROOT/horovod-$VERSION-$py_tag-torch$torch_version-$mpi_tag"
wheel=$(ls "$cache_dir"/horovod-"$VERSION"-*.whl 2>/dev/null | head -n 1 || true)

if [[ -n "$wheel" && "${DISTBRIDGE_HOROVOD_REBUILD:-0}" != 1 ]]; then
    log "using the cached wheel $wheel"
else
    work=$(mktemp -d)
    trap 'rm -rf "$work"' EXIT
    start=$SECONDS
    log "building Horovod $VERSION for torch $torch_version ($py_tag, MPI: $mpi_tag)"
    "$PYTHON" -m pip download --quiet --no-deps --no-binary :all: -d "$work" "horovod==$VERSION"
    tar -xzf "$work/horovod-$VERSION.tar.gz" -C "$work"
    src="$work/horovod-$VERSION"
    for f in "$src/CMakeLists.txt" "$src/horovod/torch/CMakeLists.txt"; do
        sed -i 's/set(CMAKE_CXX_STANDARD 14)/set(CMAKE_CXX_STANDARD 17)/' "$f"
        grep -q 'set(CMAKE_CXX_STANDARD 17)' "$f" || {
            log "could not switch $f to C++17: has the sdist changed?"
            exit 1
        }
    done
    mpi_flag=(HOROVOD_WITHOUT_MPI=1)
    [[ $with_mpi == 1 ]] && mpi_flag=(HOROVOD_WITH_MPI=1)
    env HOROVOD_WITH_PYTORCH=1 HOROVOD_WITHOUT_TENSORFLOW=1 HOROVOD_WITHOUT_MXNET=1 \
        HOROVOD_WITH_GLOO=1 "${mpi_flag[@]}" MAKEFLAGS="${MAKEFLAGS:--j$(nproc)}" \
        "$PYTHON" -m pip wheel --no-build-isolation --no-deps -w "$work/dist" "$src" >"$work/build.log" 2>&1 || {
        tail -n 60 "$work/build.log" >&2
        log "the Horovod build failed (last lines above)."
        exit 1
    }
    mkdir -p "$cache_dir"
    built=$(ls "$work"/dist/horovod-*.whl)
    cp "$built" "$cache_dir/.partial.whl"
    mv "$cache_dir/.partial.whl" "$cache_dir/$(basename "$built")"  # atomic: never a half wheel
    wheel="$cache_dir/$(basename "$built")"
    log "built $wheel in $((SECONDS - start)) s"
fi

"$PYTHON" -m pip install --quiet --no-deps --force-reinstall "$wheel"
"$PYTHON" -c 'import horovod.torch' || {
    log "the installed Horovod does not load its torch extension; rebuild with DISTBRIDGE_HOROVOD_REBUILD=1."
    exit 1
}
