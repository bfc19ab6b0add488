// Metal function constants of the specialized kernels. Their indices are
// cpp/gpu/kernels.h SpecConstant; the Metal host sets them with
// MTLFunctionConstantValues when it builds a pipeline state for
// (kernel, specialization). The kernel bodies read them through the
// SPLAT_SPEC_* names, exactly as the CUDA build reads its -D defines.
#pragma once
#include <metal_stdlib>

constant int splat_fc_bwd_reduce [[function_constant(0)]];
constant int splat_fc_bwd_range [[function_constant(1)]];
constant int splat_fc_bwd_sparse [[function_constant(2)]];
constant int splat_fc_bwd_atomic [[function_constant(3)]];
constant int splat_fc_deterministic [[function_constant(4)]];
constant int splat_fc_absgrad [[function_constant(5)]];

#define SPLAT_SPEC_BWD_REDUCE splat_fc_bwd_reduce
#define SPLAT_SPEC_BWD_RANGE splat_fc_bwd_range
#define SPLAT_SPEC_BWD_SPARSE splat_fc_bwd_sparse
#define SPLAT_SPEC_BWD_ATOMIC splat_fc_bwd_atomic
#define SPLAT_SPEC_DETERMINISTIC splat_fc_deterministic
#define SPLAT_SPEC_ABSGRAD splat_fc_absgrad
