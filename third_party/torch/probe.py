"""What a torch C++ extension needs from the torch it is built for.

Run by both builds in the build's interpreter (Bazel: torch_configure.bzl;
CMake/pip: cmake/ddstore_deps.cmake), so both take the same answers:
`DDS:key=value` lines with torch's version, C++11 ABI, CUDA/HIP versions,
include and library paths, and the C++ standard torch's own extension
builder (torch.utils.cpp_extension) compiles with: torch 2.14's headers need
C++20, older ones C++17, and a fixed flag breaks one or the other.
"""
import re

import torch
import torch.utils.cpp_extension as ext


def cxx_std():
    """The -std=c++NN that torch.utils.cpp_extension passes for C++ sources
    (its JIT builder's common flags, else the highest -std=c++NN it names
    anywhere); 17 when it names none (torch has required C++17 since 2.0)."""
    try:
        with open(ext.__file__, encoding="utf-8") as fh:
            src = fh.read()
    except OSError:
        return 17
    m = re.search(r"common_cflags\s*\+=\s*\[\s*'-std=c\+\+(\d+)'", src)
    if m:
        return max(17, int(m.group(1)))
    found = [int(v) for v in re.findall(r"-std=c\+\+(\d+)", src)]
    return max([17] + [v for v in found if v < 90])


print("DDS:version=" + torch.__version__)
print("DDS:abi=%d" % int(torch._C._GLIBCXX_USE_CXX11_ABI))
print("DDS:cuda=" + (torch.version.cuda or ""))
print("DDS:hip=" + (getattr(torch.version, "hip", None) or ""))
print("DDS:include=" + "|".join(ext.include_paths()))
print("DDS:lib=" + "|".join(ext.library_paths()))
print("DDS:cxxstd=%d" % cxx_std())
