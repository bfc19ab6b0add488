#!/usr/bin/env bash
# Checks the Metal backend without a Mac.
#
#   tools/check_metal.sh [--shaders-only] [--strict] [--sdk DIR] [--clang CLANG]
#
# 1. MSL shim self-test: tools/msl/selftest/*.metal must be rejected with the
#    message their "// expect:" line names (good*.metal must pass), proving the
#    shim catches a misspelt MSL function, a wrong argument count, a missing
#    address space, ...
# 2. The Metal sources through the shim (tools/msl) and its rule checker
#    (tools/msl/msl_rules.py): every shaders/metal/*.metal, every header of
#    shaders/kernels and shaders/common compiled as Metal (on its own: a
#    header that needs another one included first is a warning, a failure
#    with --strict), and the amalgamated source the backend compiles at run
#    time when there is no splat.metallib. The host contract: every kernel of
#    cpp/gpu/kernels.cpp exists in its Metal and CUDA sources, with the same
#    argument order, and its specialization constants are function constants
#    of the indices the host sets (tools/msl/contract.py).
# 3. Unless --shaders-only: every cpp/metal/*.mm, every other file under cpp/
#    that includes Metal headers, and the plain C++ the Metal build adds
#    (cpp/metal/*.cpp, cpp/gpu/*.cpp), compiled against a macOS SDK folder
#    (Frameworks/, include/, lib/; e.g. a checkout of hexops/xcode-frameworks)
#    given by --sdk or $SPLAT_MACOS_SDK, with -Wall -Werror -fsyntax-only.
#
# CLANG: --clang, else $CLANG, else clang++-19, else clang++. Exit status 0
# when everything passes, 1 when a check fails, 2 on a usage / setup error.
set -u

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT" || exit 2

SHADERS_ONLY=0
STRICT=0
SDK=${SPLAT_MACOS_SDK:-}
CLANG_BIN=${CLANG:-}
while [ $# -gt 0 ]; do
  case "$1" in
    --shaders-only) SHADERS_ONLY=1 ;;
    --strict) STRICT=1 ;;
    --sdk) SDK=${2:-}; shift ;;
    --sdk=*) SDK=${1#--sdk=} ;;
    --clang) CLANG_BIN=${2:-}; shift ;;
    --clang=*) CLANG_BIN=${1#--clang=} ;;
    -h|--help) sed -n '2,29p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "check_metal: unknown option $1" >&2; exit 2 ;;
  esac
  shift
done

if [ -z "$CLANG_BIN" ]; then
  for c in clang++-19 clang++; do
    if command -v "$c" >/dev/null 2>&1; then CLANG_BIN=$c; break; fi
  done
fi
if [ -z "$CLANG_BIN" ] || ! command -v "$CLANG_BIN" >/dev/null 2>&1; then
  echo "check_metal: no clang++ found (apt-get install clang-19, or pass --clang)" >&2
  exit 2
fi
PYTHON=${PYTHON:-python3}
if ! command -v "$PYTHON" >/dev/null 2>&1; then
  echo "check_metal: python3 is needed for tools/msl/msl_rules.py" >&2
  exit 2
fi

PASSED=0
FAILED=0
FAILURES=()
ok() { PASSED=$((PASSED + 1)); echo "  ok    $1"; }
bad() {
  FAILED=$((FAILED + 1)); FAILURES+=("$1"); echo "  FAIL  $1"
  if [ -n "${2:-}" ]; then printf '%s\n' "$2" | sed 's/^/        /'; fi
}
WARNED=0
warn() {
  WARNED=$((WARNED + 1)); echo "  WARN  $1"
  if [ -n "${2:-}" ]; then printf '%s\n' "$2" | sed 's/^/        /'; fi
}
section() { echo; echo "== $1"; }

TMP=$(mktemp -d "${TMPDIR:-/tmp}/check_metal.XXXXXX")
trap 'rm -rf "$TMP"' EXIT

echo "clang: $(command -v "$CLANG_BIN") ($("$CLANG_BIN" --version | head -n 1))"

# The MSL shim: C++17, no standard library (MSL has none), Metal 3.0.
SHIM=("$CLANG_BIN" -x c++ -std=c++17 -nostdinc -nostdinc++ -fno-exceptions -fno-rtti -D__METAL_VERSION__=300
      -I tools/msl -Wall -Wdouble-promotion -Wno-ignored-attributes -Wno-pragma-once-outside-header
      -Werror=unknown-attributes)
# This project's sources: the include folders of the metallib build, and the
# static threadgroup arrays clang needs (tools/msl/splat_prelude.h).
PROJECT=(-I shaders/common -I shaders/kernels -I shaders/metal -include splat_prelude.h)

# Runs the shim + rule checker; prints the diagnostics; returns its status.
shim_check() { "$PYTHON" tools/msl/msl_rules.py "${SHIM[@]}" "$@" 2>&1; }

section "MSL shim self-test (tools/msl/selftest)"
for f in tools/msl/selftest/*.metal; do
  expect=$(sed -n 's|^// expect: ||p' "$f" | head -n 1)
  out=$(shim_check "$f"); rc=$?
  name=$(basename "$f")
  if [ "$expect" = "pass" ]; then
    if [ $rc -eq 0 ]; then ok "$name accepted"; else bad "$name must be accepted" "$out"; fi
  elif [ -z "$expect" ]; then
    bad "$name has no '// expect:' line"
  elif [ $rc -ne 0 ] && printf '%s\n' "$out" | grep -Eq -- "$expect"; then
    ok "$name rejected: $(printf '%s\n' "$out" | grep -E -m1 -- "$expect" | sed 's/^[^ ]*: //')"
  else
    bad "$name must be rejected with /$expect/ (status $rc)" "$out"
  fi
done

section "Metal entry points (shaders/metal/*.metal)"
mkdir -p "$TMP/dumps"
for f in shaders/metal/*.metal; do
  out=$("$PYTHON" tools/msl/msl_rules.py --dump "$TMP/dumps/$(basename "$f").json" "${SHIM[@]}" "${PROJECT[@]}" "$f" 2>&1); rc=$?
  if [ $rc -eq 0 ]; then ok "$f${out:+ (with warnings)}"; [ -n "$out" ] && printf '%s\n' "$out" | sed 's/^/        /';
  else bad "$f" "$out"; fi
done

section "Host contract (cpp/gpu/kernels.cpp, shaders/metal, shaders/cuda)"
if ! "$CLANG_BIN" -std=c++17 -I . -I cpp/include tools/msl/kernel_table.cpp cpp/gpu/kernels.cpp \
     -o "$TMP/kernel_table" >"$TMP/kt.log" 2>&1; then
  bad "building tools/msl/kernel_table.cpp" "$(cat "$TMP/kt.log")"
elif ! "$TMP/kernel_table" >"$TMP/kernel_table.json" 2>"$TMP/kt.log"; then
  bad "running tools/msl/kernel_table" "$(cat "$TMP/kt.log")"
else
  out=$("$PYTHON" tools/msl/contract.py "$TMP/kernel_table.json" "$TMP/dumps" shaders/cuda 2>&1); rc=$?
  if [ $rc -eq 0 ]; then ok "$(printf '%s\n' "$out" | tail -n 1)"; printf '%s\n' "$out" | grep '^warning' | sed 's/^/        /';
  else bad "kernel names, argument order and function constants agree" "$out"; fi
fi

section "Kernel bodies and shared math compiled as Metal, each header on its own (shaders/kernels, shaders/common)"
# A header that compiles only after another one is reported (a warning;
# --strict makes it a failure): its includers all compile it today.
for f in shaders/kernels/*.h shaders/common/*.h; do
  tu="$TMP/header_$(basename "$f" .h).metal"
  printf '#include "%s"\n' "$ROOT/$f" >"$tu"
  out=$(shim_check "${PROJECT[@]}" "$tu"); rc=$?
  if [ $rc -eq 0 ]; then ok "$f${out:+ (with warnings)}"; [ -n "$out" ] && printf '%s\n' "$out" | sed 's/^/        /';
  elif [ $STRICT -eq 1 ]; then bad "$f (on its own)" "$out";
  else warn "$f does not compile on its own" "$out"; fi
done

section "Run-time source (the embedded sources amalgamated by cpp/metal/metal_source.cpp)"
shader_list=$(cd shaders && ls common/*.h kernels/*.h cuda/*.cu metal/*.h metal/*.metal 2>/dev/null | LC_ALL=C sort | paste -sd '|' -)
if ! cmake -DROOT="$ROOT/shaders" -DOUTPUT="$TMP/embedded_sources.cpp" -DFILES="$shader_list" \
     -P cpp/gpu/embed_sources.cmake >"$TMP/embed.log" 2>&1; then
  bad "embedding the kernel sources (cmake -P cpp/gpu/embed_sources.cmake)" "$(cat "$TMP/embed.log")"
elif ! "$CLANG_BIN" -std=c++17 -I . -I cpp/include tools/msl/amalgamate.cpp cpp/metal/metal_source.cpp \
       cpp/gpu/sources.cpp "$TMP/embedded_sources.cpp" -o "$TMP/amalgamate" >"$TMP/build.log" 2>&1; then
  bad "building tools/msl/amalgamate.cpp" "$(cat "$TMP/build.log")"
else
  for f in shaders/metal/*.metal; do
    name=$(basename "$f")
    if ! "$TMP/amalgamate" "$name" >"$TMP/$name" 2>"$TMP/am.log"; then
      bad "run-time source of $name" "$(cat "$TMP/am.log")"; continue
    fi
    # Same static threadgroup arrays as splat_prelude.h, in the inlined compat.h.
    sed 's/^#define SPLAT_TG_ARRAY(type, name, count) threadgroup /#define SPLAT_TG_ARRAY(type, name, count) static threadgroup /' \
      "$TMP/$name" >"$TMP/$name.tmp" && mv "$TMP/$name.tmp" "$TMP/$name"
    # No -I for shaders/: the amalgamation must stand alone.
    out=$(shim_check "$TMP/$name"); rc=$?
    if [ $rc -eq 0 ]; then ok "run-time source of $name ($(wc -l <"$TMP/$name") lines)"; else bad "run-time source of $name" "$out"; fi
  done
fi

if [ $SHADERS_ONLY -eq 0 ]; then
  section "Host code against the macOS SDK"
  if [ -z "$SDK" ]; then
    echo "check_metal: no macOS SDK: set SPLAT_MACOS_SDK or pass --sdk DIR (or use --shaders-only)" >&2
    exit 2
  fi
  for d in Frameworks include lib; do
    if [ ! -d "$SDK/$d" ]; then echo "check_metal: $SDK has no $d/ folder" >&2; exit 2; fi
  done
  echo "SDK: $SDK"
  HOST=("$CLANG_BIN" -target arm64-apple-macos13 -isysroot "$SDK" -iframework "$SDK/Frameworks"
        -isystem "$SDK/include/c++/v1" -isystem "$SDK/include" -std=c++17 -Wall -Wextra -Werror -fsyntax-only
        -fno-fast-math -I cpp/include -I .)
  files=$(ls cpp/metal/*.mm 2>/dev/null)
  files="$files $(grep -rlE '^[[:space:]]*#[[:space:]]*(import|include)[[:space:]]*<(Metal|MetalKit|Foundation|QuartzCore)/' cpp \
          --include='*.mm' --include='*.m' --include='*.h' --include='*.hpp' --include='*.cpp' 2>/dev/null | LC_ALL=C sort)"
  files=$(printf '%s\n' $files | awk 'NF && !seen[$0]++')
  if [ -z "$files" ]; then bad "no Objective-C++ sources under cpp/metal"; fi
  for f in $files; do
    case "$f" in
      *.h|*.hpp) lang=(-x objective-c++-header) ;;
      *) lang=(-x objective-c++) ;;
    esac
    out=$("${HOST[@]}" -fobjc-arc "${lang[@]}" "$f" 2>&1); rc=$?
    if [ $rc -eq 0 ]; then ok "$f"; else bad "$f" "$out"; fi
  done
  for f in cpp/metal/*.cpp cpp/gpu/*.cpp; do
    [ -e "$f" ] || continue
    out=$("${HOST[@]}" -x c++ "$f" 2>&1); rc=$?
    if [ $rc -eq 0 ]; then ok "$f"; else bad "$f" "$out"; fi
  done
fi

echo
if [ $FAILED -eq 0 ]; then
  if [ $WARNED -gt 0 ]; then echo "check_metal: all $PASSED checks passed, $WARNED warning(s)"
  else echo "check_metal: all $PASSED checks passed"; fi
  exit 0
fi
echo "check_metal: $FAILED of $((PASSED + FAILED)) checks failed:"
for f in "${FAILURES[@]}"; do echo "  - $f"; done
exit 1
