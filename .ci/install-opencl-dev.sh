#!/usr/bin/env bash
# Install the OpenCL ICD loader's development files and a C compiler on Debian 12, as root: what
# `make -C DIR run` of an `xegemm export` directory needs to build its example.c (-lOpenCL and CL/cl.h).
# Idempotent and quiet (apt output is shown only if a step fails); a second run only checks.
# Packages: ocl-icd-opencl-dev (libOpenCL.so, https://github.com/OCL-dev/ocl-icd), opencl-c-headers
# (Khronos CL/cl.h, pulled in by it), gcc and make.
set -euo pipefail

. "$(dirname "$0")/apt-lib.sh"
require_root install-opencl-dev.sh

if ! dpkg -s ocl-icd-opencl-dev >/dev/null 2>&1 || ! command -v cc >/dev/null 2>&1 || ! command -v make >/dev/null 2>&1; then
    quietly apt-get update -qq
    quietly apt-get install -y -qq --no-install-recommends ocl-icd-opencl-dev opencl-c-headers gcc libc6-dev make
fi

dpkg -s ocl-icd-opencl-dev >/dev/null 2>&1 && test -f /usr/include/CL/cl.h
