// Forced include (-include) of the shim check of this project's Metal
// sources: clang accepts an address space on a function-scope variable only
// when it is static, so the threadgroup arrays the entry points declare with
// SPLAT_TG_ARRAY (shaders/common/compat.h) are declared static here. Apple's
// compiler needs no such change; msl_rules.py still checks that threadgroup
// variables appear only in kernel functions.
#pragma once
#include "compat.h"
#undef SPLAT_TG_ARRAY
#define SPLAT_TG_ARRAY(type, name, count) static threadgroup type name[count]
