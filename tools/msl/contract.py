#!/usr/bin/env python3
"""The host <-> Metal contract, checked off a Mac.

usage: contract.py KERNEL_TABLE.json DUMP_DIR CUDA_DIR

KERNEL_TABLE.json is tools/msl/kernel_table.cpp's output (cpp/gpu/kernels.cpp);
DUMP_DIR holds msl_rules.py --dump output per shaders/metal file
(<file>.metal.json); CUDA_DIR is shaders/cuda. For every kernel the host
launches:
  - its Metal source declares a kernel of that name, and its CUDA source an
    extern "C" __global__ function of that name;
  - the Metal kernel's [[buffer(n)]] arguments are numbered 0..k-1 and, in
    that order, have the names and base types (typedefs resolved in the Metal
    translation unit) of the CUDA entry point's parameters (the order GpuDevice binds them in; CUDA passes structs by
    value, Metal as `constant T&`);
  - each specialization constant the host sets (index = gpu::SpecConstant) is
    read through a SPLAT_SPEC_* macro that the Metal source maps to a
    [[function_constant(index)]] of that same index.
Exit status 1 on a mismatch.
"""
import json
import os
import re
import sys

QUALIFIERS = re.compile(r"\b(device|constant|threadgroup|thread|const|volatile|SPLAT_\w+_MEM|SPLAT_THREAD)\b")


def base_type(t, typedefs):
    """(base type name with typedefs resolved, is indirection) of a declared type."""
    indirect = "*" in t or "&" in t
    t = " ".join(QUALIFIERS.sub(" ", t).replace("*", " ").replace("&", " ").split())
    for _ in range(16):
        if t not in typedefs:
            break
        t = " ".join(QUALIFIERS.sub(" ", typedefs[t]).split())
    return t, indirect


def is_const_pointee(t):
    head = re.split(r"[*&]", t)[0]
    return re.search(r"\bconst\b", head) is not None


def cuda_entries(cuda_dir):
    """{entry: [(type, name)]} of every extern "C" __global__ function."""
    out = {}
    pattern = re.compile(r'extern\s+"C"\s+__global__\s+void\s+(?:__launch_bounds__\s*\([^)]*\)\s*)?(\w+)\s*\(([^)]*)\)',
                         re.S)
    for name in sorted(os.listdir(cuda_dir)):
        if not name.endswith(".cu"):
            continue
        text = open(os.path.join(cuda_dir, name)).read()
        text = re.sub(r"//[^\n]*", "", text)
        for m in pattern.finditer(text):
            params = []
            for p in m.group(2).split(","):
                p = " ".join(p.split())
                if not p:
                    continue
                pm = re.match(r"(.*?)(\w+)$", p)
                params.append((pm.group(1).strip(), pm.group(2)) if pm else (p, ""))
            out[m.group(1)] = (name, params)
    return out


def main(argv):
    if len(argv) != 4:
        print(__doc__, file=sys.stderr)
        return 2
    table = json.load(open(argv[1]))["kernels"]
    dumps = {}
    for name in os.listdir(argv[2]):
        if name.endswith(".metal.json"):
            dumps[name[: -len(".json")]] = json.load(open(os.path.join(argv[2], name)))
    cuda = cuda_entries(argv[3])
    errors, warnings, checked = [], [], 0
    launched = set()
    for k in table:
        entry, metal_file = k["entry"], k["metal"]
        launched.add((metal_file, entry))
        where = f"{entry} ({metal_file})"
        dump = dumps.get(metal_file)
        if dump is None:
            errors.append(f"{where}: the kernel table names shaders/metal/{metal_file}, which was not checked "
                          "(missing, or it failed the shim check)")
            continue
        params = dump["kernels"].get(entry)
        if params is None:
            errors.append(f"{where}: shaders/metal/{metal_file} declares no kernel {entry}")
            continue
        buffers = sorted((p for p in params if p["buffer"] is not None), key=lambda p: p["buffer"])
        indices = [p["buffer"] for p in buffers]
        if indices != list(range(len(buffers))):
            errors.append(f"{where}: buffer indices {indices} are not 0..{len(buffers) - 1}: GpuDevice binds "
                          "arguments to consecutive indices")
        if entry not in cuda:
            errors.append(f"{where}: no extern \"C\" __global__ {entry} in shaders/cuda/{k['cuda']}")
        else:
            cu_file, cu_params = cuda[entry]
            if cu_file != k["cuda"]:
                errors.append(f"{where}: the CUDA entry point is in {cu_file}, the kernel table says {k['cuda']}")
            if len(cu_params) != len(buffers):
                errors.append(f"{where}: {len(buffers)} Metal buffer arguments, {len(cu_params)} CUDA parameters")
            for i, ((ct, cn), mp) in enumerate(zip(cu_params, buffers)):
                mb, m_ind = base_type(mp["type"], dump.get("typedefs", {}))
                cb, c_ind = base_type(ct, dump.get("typedefs", {}))
                if cn != mp["name"] or cb != mb:
                    errors.append(f"{where}: argument {i} is '{mp['type']} {mp['name']}' in Metal but "
                                  f"'{ct} {cn}' in CUDA")
                elif c_ind and m_ind and is_const_pointee(ct) != is_const_pointee(mp["type"]):
                    warnings.append(f"{where}: argument {i} '{cn}' is const in only one of CUDA / Metal")
                elif not c_ind and m_ind and not re.search(r"\bconstant\b", mp["type"]):
                    errors.append(f"{where}: argument {i} '{cn}' is passed by value (setBytes) but the Metal "
                                  f"kernel takes '{mp['type']}' (needs constant T&)")
        for index, macro in k["constants"]:
            var = dump["macros"].get(macro)
            if var is None:
                errors.append(f"{where}: the host sets {macro} (function constant {index}) but the Metal source "
                              "does not define it (include function_constants.h before the kernel body)")
            elif dump["function_constants"].get(var) != index:
                errors.append(f"{where}: {macro} is '{var}', which is function constant "
                              f"{dump['function_constants'].get(var)}, not {index}")
        checked += 1
    for metal_file, dump in sorted(dumps.items()):
        for entry in sorted(dump["kernels"]):
            if (metal_file, entry) not in launched:
                warnings.append(f"{entry} ({metal_file}): a Metal kernel the host never launches")
    for w in warnings:
        print(f"warning: {w}")
    for e in errors:
        print(f"error: {e}")
    print(f"{checked} of {len(table)} kernels match the host's kernel table and the CUDA entry points"
          if not errors else f"{len(errors)} contract error(s)")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
