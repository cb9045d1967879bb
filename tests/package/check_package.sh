#!/usr/bin/env bash
# Installs a build tree into a scratch prefix, then builds and runs a consumer through
# find_package(depengine CONFIG) and through pkg-config, as a user of the installed package
# would: no LD_LIBRARY_PATH, the installed RUNPATHs must find every library.
#   check_package.sh BUILD_DIR SOURCE_DIR
# Works for both kinds of install (DEPENGINE_SHARED_LIBS ON or OFF): shared, a consumer needs
# only our libraries and none of their private dependencies; static, plain
# `pkg-config --libs` must already name everything the link needs.
set -euo pipefail
build=$1
src=$2
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
prefix=$scratch/prefix
unset LD_LIBRARY_PATH
fail() { echo "FAIL: $*" >&2; exit 1; }

cmake --install "$build" --prefix "$prefix" >/dev/null
libdir=$(find "$prefix" -name depengine.pc -printf '%h\n' | head -1)
libdir=${libdir%/pkgconfig}
if [[ -e $libdir/libdepengine_engine.so ]]; then kind=shared; else kind=static; fi
echo "installed: $kind libraries in $libdir"

# Installed binaries must not look into the build tree (they would pass here and fail on
# the user's machine).
for f in "$libdir"/libdepengine_*.so.*.*.* "$prefix"/bin/*; do
  [[ -f $f && ! -L $f ]] || continue
  if readelf -d "$f" | grep -E 'R(UN)?PATH' | grep -qF "$build"; then
    fail "$f has a RUNPATH into the build tree: $(readelf -d "$f" | grep -E 'R(UN)?PATH')"
  fi
done
if [[ -x $prefix/bin/depengine ]]; then
  "$prefix/bin/depengine" --help >/dev/null || fail "the installed depengine command does not run"
fi

# CMake route. Shared, the consumer must configure without oneTBB and Boost being findable:
# they are the libraries' private business.
cmake_hide=()
if [[ $kind == shared ]]; then
  cmake_hide=(-DCMAKE_DISABLE_FIND_PACKAGE_TBB=ON -DCMAKE_DISABLE_FIND_PACKAGE_Boost=ON)
fi
cmake -S "$src/tests/package/consumer" -B "$scratch/cmake" -G Ninja --no-warn-unused-cli \
  -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_BUILD_TYPE=Release "${cmake_hide[@]}" >/dev/null
cmake --build "$scratch/cmake" >/dev/null
"$scratch/cmake/consumer" || fail "the find_package consumer failed"
# depengine::depengine includes depengine::inspect: DEPENGINE_RECORD works without a call.
DEPENGINE_RECORD="$scratch/cmake.json" "$scratch/cmake/consumer" 2>/dev/null ||
  fail "the find_package consumer failed with DEPENGINE_RECORD"
[[ -s $scratch/cmake.json ]] || fail "DEPENGINE_RECORD wrote no graph (find_package consumer)"

# pkg-config route: plain --libs (what most users write) and --static --libs. The prefix is
# not on the loader's path, so the consumer names it as README.md says: an rpath to libdir.
export PKG_CONFIG_PATH=$libdir/pkgconfig
rpath=-Wl,-rpath,$(pkg-config --variable=libdir depengine)
for flag in "" --static; do
  libs=$(pkg-config --libs $flag depengine)
  echo "pkg-config --libs $flag: $libs"
  # ld ignores a -L folder that does not exist; the link below might still succeed through
  # the default paths, so check each one.
  for word in $libs; do
    if [[ $word == -L* && ! -d ${word#-L} ]]; then
      fail "pkg-config --libs $flag names a folder that does not exist: $word"
    fi
  done
  # shellcheck disable=SC2046,SC2086
  g++ -o "$scratch/pc_consumer" "$src/tests/package/consumer/main.cc" \
    $(pkg-config --cflags depengine) $libs "$rpath" || fail "link with pkg-config --libs $flag"
  "$scratch/pc_consumer" || fail "the pkg-config consumer ($flag) failed"
  rm -f "$scratch/pc.json"
  DEPENGINE_RECORD="$scratch/pc.json" "$scratch/pc_consumer" 2>/dev/null ||
    fail "the pkg-config consumer ($flag) failed with DEPENGINE_RECORD"
  [[ -s $scratch/pc.json ]] || fail "DEPENGINE_RECORD wrote no graph (pkg-config $flag)"
done
echo "package check passed ($kind)"
