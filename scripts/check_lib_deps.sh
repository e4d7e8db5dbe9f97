#!/bin/sh
# libstsa links only libm and OpenMP (plus libc): no JSON parser, no file
# formats (those are libstsa_io's). Checks a built libstsa.so: no jansson
# symbol among its dynamic symbols and no libjansson among the libraries it
# needs (readelf's NEEDED entries: what ldd starts from, and readable for a
# cross-built library too). A sanitizer build (STSA_SANITIZE) also needs
# the sanitizers' runtimes, which are allowed.
#
#   scripts/check_lib_deps.sh path/to/libstsa.so [nm] [readelf]
set -eu
lib=$1
nm=${2:-nm}
readelf=${3:-readelf}
[ -f "$lib" ] || { echo "check_lib_deps: no $lib" >&2; exit 1; }
status=0
json=$("$nm" -D "$lib" | grep -E ' (json_|jansson_)' || true)
if [ -n "$json" ]; then
  echo "check_lib_deps: $lib has jansson symbols:" >&2
  echo "$json" | head -n 5 >&2
  status=1
fi
needed=$("$readelf" -d "$lib" | sed -n 's/.*(NEEDED).*\[\(.*\)\].*/\1/p')
for so in $needed; do
  case $so in
    libm.so* | libc.so* | libgomp.so* | libomp.so* | libiomp5.so* | ld-linux*.so* | libpthread.so*) ;;
    libasan.so* | libubsan.so*) ;; # the sanitizer build's runtimes
    *)
      echo "check_lib_deps: $lib needs $so: libstsa links only libm and OpenMP" >&2
      status=1
      ;;
  esac
done
[ $status = 0 ] && echo "check_lib_deps: $(basename "$lib") needs only $(echo $needed | tr ' ' ','), no jansson symbol"
exit $status
