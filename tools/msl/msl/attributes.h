// MSL shim: function qualifiers and attributes (MSL spec 5). Each becomes a
// clang annotation carrying a numeric code that tools/msl/msl_rules.py reads
// back from the AST:
//   ("msl", 1, n)          [[buffer(n)]]
//   ("msl", 2, id)         a builtin input ([[thread_position_in_grid]] ...)
//   ("msl", 3, n)          [[function_constant(n)]]
//   ("msl", 4)             the kernel function qualifier
//   ("msl", 5, n)          [[max_total_threads_per_threadgroup(n)]]
//   ("msl", 6, n)          [[texture(n)]] / [[sampler(n)]] (indices only)
#pragma once

#define kernel __attribute__((annotate("msl", 4)))

#define buffer(n) clang::annotate("msl", 1, n)
#define function_constant(n) clang::annotate("msl", 3, n)
#define max_total_threads_per_threadgroup(n) clang::annotate("msl", 5, n)
#define texture(n) clang::annotate("msl", 6, n)
#define sampler(n) clang::annotate("msl", 6, n)

// Kernel builtin inputs (MSL spec 5.2.3.6, table 5.8); the id is the row
// of msl_rules.py BUILTINS, which also lists the types each one accepts.
#define dispatch_quadgroups_per_threadgroup clang::annotate("msl", 2, 1)
#define dispatch_simdgroups_per_threadgroup clang::annotate("msl", 2, 2)
#define dispatch_threads_per_threadgroup clang::annotate("msl", 2, 3)
#define grid_origin clang::annotate("msl", 2, 4)
#define grid_size clang::annotate("msl", 2, 5)
#define quadgroup_index_in_threadgroup clang::annotate("msl", 2, 6)
#define quadgroups_per_threadgroup clang::annotate("msl", 2, 7)
#define simdgroup_index_in_threadgroup clang::annotate("msl", 2, 8)
#define simdgroups_per_threadgroup clang::annotate("msl", 2, 9)
#define thread_execution_width clang::annotate("msl", 2, 10)
#define thread_index_in_quadgroup clang::annotate("msl", 2, 11)
#define thread_index_in_simdgroup clang::annotate("msl", 2, 12)
#define thread_index_in_threadgroup clang::annotate("msl", 2, 13)
#define thread_position_in_grid clang::annotate("msl", 2, 14)
#define thread_position_in_threadgroup clang::annotate("msl", 2, 15)
#define threadgroup_position_in_grid clang::annotate("msl", 2, 16)
#define threadgroups_per_grid clang::annotate("msl", 2, 17)
#define threads_per_grid clang::annotate("msl", 2, 18)
#define threads_per_simdgroup clang::annotate("msl", 2, 19)
#define threads_per_threadgroup clang::annotate("msl", 2, 20)

// is_function_constant_defined(name) (MSL spec 5.8.1): a constant bool.
#define is_function_constant_defined(name) (sizeof(name) > 0)
