#!/usr/bin/env bash
# Installs the build into a temporary prefix and uses it as a user would,
# with no source tree: the runtime's SONAME, examples/generate built out of
# tree against the installed runtime with find_package and with pkg-config,
# a model compiled with the installed modc and run with the installed modrun
# and both example builds, and the Debian package's contents.
# Usage: install-test.sh BUILD_DIR
set -euo pipefail
build="$(cd "$1" && pwd)"
work="$(mktemp -d /tmp/modc-install-test.XXXXXX)"
trap '[[ -n "${KEEP:-}" ]] || rm -rf "$work"' EXIT
prefix="$work/prefix"
step() { echo "install-test: $*"; }

step "cmake --install into $prefix"
cmake --install "$build" --prefix "$prefix" > "$work/install.log"
libdir="$(dirname "$(find "$prefix" -name 'libmodrt.so.*.*' | head -1)")"
abi="$(sed -n 's/^#define MODC_ABI_VERSION \([0-9]*\)u$/\1/p' "$prefix/include/modrt/abi.h")"
soname="$(readelf -d "$libdir/libmodrt.so" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')"
[[ "$soname" == "libmodrt.so.$abi" ]] || { echo "SONAME '$soname', expected libmodrt.so.$abi"; exit 1; }
for f in bin/modc bin/modrun bin/mod-opt bin/mod-translate \
         include/modrt/modrt.h share/modc/examples/tiny-mod.json \
         share/doc/modc/model-format.md; do
  [[ -e "$prefix/$f" ]] || { echo "missing $prefix/$f"; exit 1; }
done
[[ -f "$libdir/cmake/modrt/modrtConfig.cmake" && -f "$libdir/pkgconfig/modrt.pc" ]]

examples="$prefix/share/modc/examples"
step "examples/generate with find_package(modrt CONFIG)"
cmake -S "$examples/generate" -B "$work/gen-cmake" -G Ninja \
  -DCMAKE_PREFIX_PATH="$prefix" > "$work/gen-cmake.log"
cmake --build "$work/gen-cmake" >> "$work/gen-cmake.log"
step "examples/generate with pkg-config"
# shellcheck disable=SC2046
c++ -O1 "$examples/generate/main.cpp" -o "$work/gen-pc" \
  $(PKG_CONFIG_PATH="$libdir/pkgconfig" pkg-config --cflags --libs modrt)
for exe in "$work/gen-cmake/generate_example" "$work/gen-pc"; do
  libs="$(ldd "$exe")"
  grep -q "libmodrt.so.$abi => $libdir/" <<< "$libs" \
    || { echo "$exe does not load the installed libmodrt.so.$abi:"; echo "$libs"; exit 1; }
done

step "compile and run a model with the installed tools (from $work)"
cd "$work"
"$prefix/bin/modc" compile "$examples/tiny-mod.json" -o "$work/pkg" 2> "$work/modc.log"
"$prefix/bin/modrun" init "$work/pkg" --seed 1 --out "$work/w.safetensors"
"$work/gen-cmake/generate_example" "$work/pkg" "$work/w.safetensors" "Q: " 24 0 > "$work/a.txt"
"$work/gen-pc" "$work/pkg" "$work/w.safetensors" "Q: " 24 0 > "$work/b.txt"
cmp "$work/a.txt" "$work/b.txt"
"$prefix/bin/modrun" sample "$work/pkg" --weights "$work/w.safetensors" \
  --prompt "Q: " --max-new 24 --temperature 0 > "$work/c.txt"
[[ -s "$work/a.txt" ]]
echo "install-test: generated $(wc -c < "$work/a.txt") bytes, the same with both builds"

step "Debian package"
(cd "$work" && cpack --config "$build/CPackConfig.cmake" -B "$work/deb" > "$work/cpack.log")
deb="$(find "$work/deb" -maxdepth 1 -name '*.deb' | head -1)"
[[ -n "$deb" ]] || { cat "$work/cpack.log"; exit 1; }
contents="$(dpkg-deb -c "$deb")"
for f in bin/modc bin/modrun "libmodrt.so.$abi" modrt/abi.h modrtConfig.cmake modrt.pc; do
  grep -q "$f" <<< "$contents" || { echo "$deb lacks $f"; exit 1; }
done
echo "install-test: $(basename "$deb"), $(wc -l <<< "$contents") entries"
echo "install-test: passed"
