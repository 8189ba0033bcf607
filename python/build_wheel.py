#!/usr/bin/env python3
"""build_wheel.py — a wheel of the assembled package rap, with the standard library alone.

    python3 python/build_wheel.py <build>/python/rap [OUTDIR]      # default OUTDIR: dist

Writes OUTDIR/rap-<version>-py3-none-<platform>.whl (PEP 427) and prints its path. The version is
the C library's own (rap_version() of the package's librap.so), the platform this machine's
(linux_x86_64): the shared libraries are machine code, loaded by ctypes rather than imported as
extensions, so the wheel is for any Python 3 on this platform. Nothing is downloaded and no
build backend is needed: a wheel is a zip with METADATA, WHEEL and RECORD (each file's SHA-256),
which this script writes in a fixed order with fixed times, so the same files give the same wheel.
The package's rap-trace program is installed as the console script rap-trace (entry_points.txt:
rap._trace_cli runs it).
"""

import base64
import ctypes
import hashlib
import os
import sys
import sysconfig
import zipfile

SUMMARY = ("Memory-pool strategies for GPU and host memory; PyTorch's, CuPy's, Numba's and "
           "cuda.core's allocators on them")


def library_version(pkg):
    lib = ctypes.CDLL(os.path.join(pkg, "librap.so"))
    lib.rap_version.restype = ctypes.c_char_p
    return lib.rap_version().decode()


def platform_tag():
    return sysconfig.get_platform().replace("-", "_").replace(".", "_")


def record_hash(data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return "sha256=" + digest


def metadata(version, readme):
    lines = ["Metadata-Version: 2.1", "Name: rap", "Version: " + version, "Summary: " + SUMMARY,
             "License: MIT", "Classifier: License :: OSI Approved :: MIT License",
             "Requires-Python: >=3.8",
             "Provides-Extra: torch", "Provides-Extra: cupy", "Provides-Extra: numba",
             "Provides-Extra: cuda-core",
             "Description-Content-Type: text/markdown", "", readme]
    return "\n".join(lines).encode()


def main(argv):
    if len(argv) not in (2, 3):
        sys.stderr.write(__doc__)
        return 2
    pkg = os.path.abspath(argv[1])
    out = argv[2] if len(argv) == 3 else "dist"
    if not os.path.exists(os.path.join(pkg, "__init__.py")) or not os.path.exists(
            os.path.join(pkg, "librap.so")):
        sys.stderr.write("build_wheel.py: %s is not an assembled package (cmake --build <build> "
                         "--target rap_python makes it)\n" % pkg)
        return 1
    version = library_version(pkg)
    tag = "py3-none-" + platform_tag()
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    dist_info = "rap-%s.dist-info" % version
    entries = []   # (name in the wheel, bytes, executable)
    for name in sorted(os.listdir(pkg)):
        path = os.path.join(pkg, name)
        if not os.path.isfile(path) or name.endswith((".pyc", ".pyo")):
            continue
        with open(path, "rb") as f:
            entries.append(("rap/" + name, f.read(), name.endswith(".so") or name == "rap-trace"))
    readme = ("rap: memory-pool strategies for GPU and host memory, with PyTorch's, CuPy's, Numba's "
              "and cuda.core's allocators on them.\n\n    import rap.torch; rap.torch.enable()\n"
              "    import rap.cupy; rap.cupy.enable()\n"
              "    NUMBA_CUDA_MEMORY_MANAGER=rap.numba\n"
              "    rap.cuda_core.RapMemoryResource()\n\nSee docs/integrations.md of the source.\n")
    entries.append((dist_info + "/METADATA", metadata(version, readme), False))
    wheel = "Wheel-Version: 1.0\nGenerator: rap python/build_wheel.py\nRoot-Is-Purelib: false\nTag: %s\n" % tag
    entries.append((dist_info + "/WHEEL", wheel.encode(), False))
    if any(name == "rap/rap-trace" for name, _, _ in entries):
        scripts = "[console_scripts]\nrap-trace = rap._trace_cli:main\n"
        entries.append((dist_info + "/entry_points.txt", scripts.encode(), False))
    license_path = os.path.join(root, "LICENSE")
    if os.path.exists(license_path):
        with open(license_path, "rb") as f:
            entries.append((dist_info + "/LICENSE", f.read(), False))
    record = "".join("%s,%s,%d\n" % (n, record_hash(d), len(d)) for n, d, _ in entries)
    record += dist_info + "/RECORD,,\n"
    entries.append((dist_info + "/RECORD", record.encode(), False))

    os.makedirs(out, exist_ok=True)
    path = os.path.join(out, "rap-%s-%s.whl" % (version, tag))
    tmp = path + ".part"
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as z:
        for name, data, executable in entries:
            info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
            info.external_attr = (0o100755 if executable else 0o100644) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(info, data)
    os.replace(tmp, path)
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
