#!/usr/bin/env python3
"""Metal Shading Language rules a C++ compiler does not enforce, checked on
clang's AST of a source compiled through the MSL shim (tools/msl).

usage: msl_rules.py [--dump OUT.json] CLANG [clang arguments...] FILE

Runs `CLANG ... -fsyntax-only -Xclang -ast-dump=json`, then applies (MSL
specification sections in brackets):
  - every pointer and reference type names its address space (device,
    constant, threadgroup or thread) [4]
  - kernel functions return void; their pointer and reference arguments are in
    device or constant memory and carry [[buffer(n)]] with a distinct n in
    0..30; other arguments are builtin inputs of an accepted type [4, 5.2]
  - program-scope variables are in the constant address space and initialised,
    function constants excepted [4.2, 5.8]
  - threadgroup variables are declared only inside kernel functions [4.4]
  - no double, no virtual functions, no new / delete [2.1, 1.4.4]
Unsuffixed floating literals (double in C++, float in MSL, so CUDA and the CPU
compute in double what Metal computes in float) are reported as warnings.
Exit status: 0 when clean (warnings allowed), 1 on a rule violation or a
compile error (clang's own diagnostics are printed as they come).
--dump writes what the host contract check (tools/msl/contract.py) needs: the
kernels with their arguments, the function constants, the typedefs and the
SPLAT_SPEC_* macros.
"""
import json
import re
import subprocess
import sys

# Builtin inputs: id (tools/msl/msl/attributes.h) -> (name, accepted types).
_S = ("uint", "ushort")
_V = ("uint", "ushort", "uint2", "ushort2", "uint3", "ushort3")
BUILTINS = {
    1: ("dispatch_quadgroups_per_threadgroup", _S),
    2: ("dispatch_simdgroups_per_threadgroup", _S),
    3: ("dispatch_threads_per_threadgroup", _V),
    4: ("grid_origin", ("uint", "uint2", "uint3")),
    5: ("grid_size", ("uint", "uint2", "uint3")),
    6: ("quadgroup_index_in_threadgroup", _S),
    7: ("quadgroups_per_threadgroup", _S),
    8: ("simdgroup_index_in_threadgroup", _S),
    9: ("simdgroups_per_threadgroup", _S),
    10: ("thread_execution_width", _S),
    11: ("thread_index_in_quadgroup", _S),
    12: ("thread_index_in_simdgroup", _S),
    13: ("thread_index_in_threadgroup", _S),
    14: ("thread_position_in_grid", _V),
    15: ("thread_position_in_threadgroup", _V),
    16: ("threadgroup_position_in_grid", _V),
    17: ("threadgroups_per_grid", _V),
    18: ("threads_per_grid", _V),
    19: ("threads_per_simdgroup", _S),
    20: ("threads_per_threadgroup", _V),
}
_CANON = {"unsigned int": "uint", "unsigned short": "ushort", "uint32_t": "uint", "uint16_t": "ushort"}

# clang prints an address space through the macro that spelled it (device,
# or a project macro defined as device): set_address_space_macros() adds them.
_AS_NAMES = {"device": {"device"}, "constant": {"constant"}, "threadgroup": {"threadgroup"}, "thread": {"thread"}}
_AS_EXTRA = {"device": r"address_space\(1\)", "constant": r"address_space\(2\)",
             "threadgroup": r"address_space\(3\)", "thread": r"msl_thread"}
AS_DEVICE = AS_CONSTANT = AS_THREADGROUP = AS_THREAD = AS_ANY = None


def set_address_space_macros(macros):
    """macros: {name: body} from clang -dM -E; names defined (through other
    macros) as an address-space keyword become markers of that space."""
    global AS_DEVICE, AS_CONSTANT, AS_THREADGROUP, AS_THREAD, AS_ANY
    changed = True
    while changed:
        changed = False
        for name, body in macros.items():
            for space, names in _AS_NAMES.items():
                if body.strip() in names and name not in names:
                    names.add(name)
                    changed = True

    def rx(space):
        return r"\b(" + "|".join(sorted(_AS_NAMES[space])) + r")\b|" + _AS_EXTRA[space]

    AS_DEVICE, AS_CONSTANT = re.compile(rx("device")), re.compile(rx("constant"))
    AS_THREADGROUP, AS_THREAD = re.compile(rx("threadgroup")), re.compile(rx("thread"))
    AS_ANY = re.compile("|".join(rx(s) for s in _AS_NAMES))


set_address_space_macros({})


def type_of(node):
    t = node.get("type", {})
    return t.get("desugaredQualType", t.get("qualType", ""))


def written_type_of(node):
    return node.get("type", {}).get("qualType", "")


def pointee_segments(t):
    """The text in front of each '*' / '&' of a declarator's type, outermost last."""
    t = t.replace("&&", "&")
    parts = re.split(r"[*&]", t)
    return parts[:-1]


def annotations(node):
    """[(code, args...)] of the shim's clang::annotate("msl", code, ...) attributes."""
    out = []
    for c in node.get("inner", []):
        if c.get("kind") != "AnnotateAttr":
            continue
        vals = []
        for e in c.get("inner", []):
            v = e.get("value")
            if v is not None:
                try:
                    vals.append(int(v))
                except ValueError:
                    vals.append(v)
        if vals:
            out.append(tuple(vals))
    return out


class Checker:
    def __init__(self):
        self.file = None
        self.line = None
        self.errors = []
        self.warnings = []
        self.kernels = {}            # name -> [{"name", "type", "buffer", "builtin"}]
        self.function_constants = {}  # variable name -> index
        self.typedefs = {}            # name -> underlying type

    # -- locations: clang's JSON writes a file / line only when it changes --
    def _bare(self, loc):
        if "file" in loc:
            self.file = loc["file"]
        if "line" in loc:
            self.line = loc["line"]
        return (self.file, self.line)

    def _loc(self, loc):
        if not isinstance(loc, dict):
            return None
        if "spellingLoc" in loc or "expansionLoc" in loc:
            pos = None
            if "spellingLoc" in loc:
                pos = self._bare(loc["spellingLoc"])
            if "expansionLoc" in loc:
                pos = self._bare(loc["expansionLoc"])
            return pos
        if "offset" in loc:
            return self._bare(loc)
        return None

    def _scan(self, obj):
        """Location updates inside non-node values (in document order)."""
        if isinstance(obj, dict):
            if "offset" in obj or "spellingLoc" in obj or "expansionLoc" in obj:
                self._loc(obj)
                return
            for v in obj.values():
                self._scan(v)
        elif isinstance(obj, list):
            for v in obj:
                self._scan(v)

    def report(self, pos, msg, warning=False):
        where = f"{pos[0]}:{pos[1]}" if pos and pos[0] else "?"
        (self.warnings if warning else self.errors).append(f"{where}: {'warning' if warning else 'error'}: {msg}")

    def walk(self, node, stack):
        pos = None
        for k, v in node.items():
            if k == "loc":
                pos = self._loc(v)
            elif k == "range":
                self._loc(v.get("begin", {}))
                self._loc(v.get("end", {}))
            elif k == "inner":
                continue
            elif isinstance(v, (dict, list)):
                self._scan(v)
        if pos is None:
            pos = (self.file, self.line)
        self.visit(node, pos, stack)
        stack.append(node)
        for c in node.get("inner", []):
            if isinstance(c, dict):
                self.walk(c, stack)
        stack.pop()

    # -- the rules --
    def visit(self, node, pos, stack):
        kind = node.get("kind", "")
        implicit = node.get("isImplicit", False)
        name = node.get("name", "")
        in_implicit = bool(stack) and stack[-1].get("isImplicit", False)
        if kind in ("ParmVarDecl", "VarDecl", "FieldDecl") and not implicit and not in_implicit:
            self.check_indirections(node, pos, name)
            if re.search(r"\bdouble\b", type_of(node)):
                self.report(pos, f"'{name}': double is not supported in MSL")
            if kind == "VarDecl":
                self.check_variable(node, pos, stack)
        elif kind in ("FunctionDecl", "CXXMethodDecl") and not implicit:
            if re.search(r"\bdouble\b", type_of(node)):
                self.report(pos, f"'{name}': double is not supported in MSL")
            if node.get("virtual"):
                self.report(pos, f"'{name}': virtual functions are not supported in MSL")
            if any(a[0] == 4 for a in annotations(node)):
                self.check_kernel(node, pos)
        elif kind in ("TypedefDecl", "TypeAliasDecl") and not implicit and name:
            self.typedefs[name] = node.get("type", {}).get("qualType", "")
        elif kind in ("CXXNewExpr", "CXXDeleteExpr"):
            self.report(pos, "new / delete are not supported in MSL")
        elif kind == "FloatingLiteral" and node.get("type", {}).get("qualType") == "double":
            self.report(pos, f"unsuffixed floating literal {node.get('value')}: float in MSL, double in C++ "
                             "(CUDA and the CPU compute in double)", warning=True)

    def check_indirections(self, node, pos, name):
        for seg in pointee_segments(type_of(node)):
            if not AS_ANY.search(seg):
                self.report(pos, f"'{name}' of type '{written_type_of(node)}': pointer or reference without an "
                                 "explicit address space (device, constant, threadgroup or thread)")
                return

    def check_variable(self, node, pos, stack):
        t = type_of(node)
        own = t if not pointee_segments(t) else ""
        parent = stack[-1].get("kind") if stack else ""
        at_program_scope = parent in ("TranslationUnitDecl", "NamespaceDecl", "LinkageSpecDecl")
        name = node.get("name", "")
        fc = any(a[0] == 3 for a in annotations(node))
        for a in annotations(node):
            if a[0] == 3 and len(a) > 1:
                self.function_constants[name] = a[1]
        if at_program_scope:
            if not AS_CONSTANT.search(own):
                self.report(pos, f"program-scope variable '{name}' must be in the constant address space")
            elif not fc and "init" not in node:
                self.report(pos, f"program-scope constant '{name}' must be initialised")
        if fc and not at_program_scope:
            self.report(pos, f"function constant '{name}' must be declared at program scope")
        if AS_THREADGROUP.search(own):
            fn = next((s for s in reversed(stack) if s.get("kind") in ("FunctionDecl", "CXXMethodDecl")), None)
            if fn is None or not any(a[0] == 4 for a in annotations(fn)):
                self.report(pos, f"threadgroup variable '{name}' may only be declared in a kernel function")

    def check_kernel(self, node, pos):
        fname = node.get("name", "")
        params = self.kernels.setdefault(fname, [])
        if not node.get("type", {}).get("qualType", "").startswith("void "):
            self.report(pos, f"kernel '{fname}' must return void")
        buffers = {}
        for p in node.get("inner", []):
            if p.get("kind") != "ParmVarDecl":
                continue
            pname = p.get("name", "")
            ann = annotations(p)
            segs = pointee_segments(type_of(p))
            buf = [a for a in ann if a[0] == 1]
            builtin = [a for a in ann if a[0] == 2]
            params.append({"name": pname, "type": written_type_of(p),
                           "buffer": buf[0][1] if buf and len(buf[0]) > 1 else None,
                           "builtin": BUILTINS.get(builtin[0][1], ("?",))[0] if builtin and len(builtin[0]) > 1
                           else None})
            if segs:
                outer = segs[-1]
                if not (AS_DEVICE.search(outer) or AS_CONSTANT.search(outer)):
                    self.report(pos, f"kernel '{fname}' argument '{pname}' ({written_type_of(p)}): a pointer or "
                                     "reference argument must be in the device or constant address space")
                if not buf:
                    self.report(pos, f"kernel '{fname}' argument '{pname}' has no [[buffer(n)]] attribute")
                for a in buf:
                    n = a[1] if len(a) > 1 else None
                    if not isinstance(n, int) or not 0 <= n <= 30:
                        self.report(pos, f"kernel '{fname}' argument '{pname}': buffer index {n} not in 0..30")
                    elif n in buffers:
                        self.report(pos, f"kernel '{fname}': [[buffer({n})]] used by '{buffers[n]}' and '{pname}'")
                    else:
                        buffers[n] = pname
            elif buf:
                self.report(pos, f"kernel '{fname}' argument '{pname}': [[buffer(n)]] needs a pointer or reference")
            elif builtin:
                bid = builtin[0][1] if len(builtin[0]) > 1 else None
                bname, accepted = BUILTINS.get(bid, ("?", ()))
                t = written_type_of(p).replace("const ", "").strip()
                t = _CANON.get(t, t)
                dt = _CANON.get(type_of(p).replace("const ", "").strip(), None)
                if t not in accepted and dt not in accepted:
                    self.report(pos, f"kernel '{fname}' argument '{pname}': [[{bname}]] cannot be of type "
                                     f"'{written_type_of(p)}' (accepted: {', '.join(accepted)})")
            else:
                self.report(pos, f"kernel '{fname}' argument '{pname}' is neither a buffer nor a builtin input")


def main(argv):
    dump = None
    if len(argv) > 2 and argv[1] == "--dump":
        dump = argv[2]
        argv = argv[:1] + argv[3:]
    if len(argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    macros = {}
    mproc = subprocess.run(argv[1:] + ["-E", "-dM"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    for line in mproc.stdout.splitlines():
        m = re.match(r"#define (\w+) (.*)$", line)
        if m:
            macros[m.group(1)] = m.group(2)
    set_address_space_macros(macros)
    cmd = argv[1:] + ["-fsyntax-only", "-Xclang", "-ast-dump=json"]
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    sys.stderr.write(proc.stderr)
    if proc.returncode != 0:
        return 1
    try:
        ast = json.loads(proc.stdout)
    except json.JSONDecodeError as e:
        print(f"msl_rules: cannot read clang's AST: {e}", file=sys.stderr)
        return 1
    c = Checker()
    c.walk(ast, [])
    for w in c.warnings:
        print(w, file=sys.stderr)
    for e in c.errors:
        print(e, file=sys.stderr)
    if dump:
        with open(dump, "w") as f:
            json.dump({"kernels": c.kernels, "function_constants": c.function_constants, "typedefs": c.typedefs,
                       "macros": {k: v for k, v in macros.items() if k.startswith("SPLAT_SPEC_")}}, f, indent=1)
    return 1 if c.errors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
