# hip-nvidia-compat.awk — copies HIP's nvidia_detail/nvidia_hip_runtime_api.h without the inline
# functions named in `drop` (space-separated), each with the template line before it, if any.
# HIP 5.2's NVIDIA mapping defines wrappers over CUDA calls and fields that CUDA 12 and 13 removed
# or changed; a translation unit that includes it fails even if it calls none of them. The CMake
# configure of a RAP_HIP_PLATFORM=nvidia build writes the copy into the build tree, ahead of the
# installed header on the include path. Usage:
#   awk -v drop="hipMemAdvise hipCtxCreate ..." -f hip-nvidia-compat.awk nvidia_hip_runtime_api.h
BEGIN { n = split(drop, names, " "); for (i = 1; i <= n; i++) gone[names[i]] = 1 }
function name_of(line,    s) {
  s = line; sub(/\(.*/, "", s); sub(/.*[ *&]/, "", s); return s
}
function braces(line,    t, opened, closed) {
  t = line; opened = gsub(/\{/, "{", t); closed = gsub(/\}/, "}", t)
  depth += opened - closed; if (opened) seen = 1
  if (seen && depth <= 0) { skip = 0; dropped++ }
}
skip { braces($0); next }
/^(__HIP_DEPRECATED )?(inline static|static inline) [^(]*\(/ && (name_of($0) in gone) {
  held = ""; skip = 1; depth = 0; seen = 0; braces($0); next
}
held != "" { print held; held = "" }
/^template *</ { held = $0; next }
{ print }
END {
  if (held != "") print held
  printf "// hip-nvidia-compat: %d definitions dropped\n", dropped
}
