// ddstore-torch: the parts of torch the extension uses, and only those.
//
// <torch/extension.h> is <torch/all.h> (the whole C++ frontend: nn, optim,
// data, jit, serialize, ...) plus <torch/python.h>; the extension uses none
// of the frontend, only ATen tensors, pybind11 with torch's type casters and
// the Python tensor type.  Including just those takes about a third off
// every source's compile (g++ 12 -O2, Bazel's flags: collate.cpp 15.9
// instead of 25.7 CPU-seconds, module.cpp 20.0 instead of 30.6), in each of
// the suite's builds of the extension.  With DDSTORE_UNITY=0 this header is
// also the CMake build's precompiled header.
#pragma once

#include <ATen/ATen.h>
#include <torch/csrc/autograd/python_variable.h>
#include <torch/csrc/utils/pybind.h>
