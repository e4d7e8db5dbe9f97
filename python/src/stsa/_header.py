"""include/stsa.h and include/stsa_io.h as cffi declarations: the headers
are the binding's ABI.

cffi's cdef() takes C declarations only. This module turns the public
header into that: a small preprocessor pass (comments, #if/#ifdef/#else
with `defined`, object-like #defines) followed by the removal of what a
cdef cannot hold or an ABI-mode binding cannot call:

  - object-like macros are expanded where used, so STSA_API becomes its
    compiler attribute, and attributes (`__attribute__((...))`,
    `__declspec(...)`, or a function-like macro that expands to one) are
    erased;
  - `#define NAME <integer expression>` also becomes `#define NAME
    <value>` (cffi exposes it as lib.NAME); other macros (strings,
    function-like helpers, initialisers) are not declared;
  - static functions (static inline helpers such as a struct's `_init`)
    are removed: they are not in the shared library. Python does what
    they do (see _lib.new).

Nothing here knows a name of the stsa API: a declaration added to the
header is declared in Python without a change here.
"""

import re
import warnings

# Limits of <stdint.h> / <stddef.h> that a header may use in an integer macro.
_KNOWN_LIMITS = {
    "INT8_MIN": -(2**7), "INT8_MAX": 2**7 - 1, "UINT8_MAX": 2**8 - 1,
    "INT16_MIN": -(2**15), "INT16_MAX": 2**15 - 1, "UINT16_MAX": 2**16 - 1,
    "INT32_MIN": -(2**31), "INT32_MAX": 2**31 - 1, "UINT32_MAX": 2**32 - 1,
    "INT64_MIN": -(2**63), "INT64_MAX": 2**63 - 1, "UINT64_MAX": 2**64 - 1,
    "INT_MIN": -(2**31), "INT_MAX": 2**31 - 1, "UINT_MAX": 2**32 - 1,
}

_ATTRIBUTE = re.compile(r"^(__attribute__|__declspec|\[\[)")
_TOKEN = re.compile(r"\s*(?:(0[xX][0-9a-fA-F]+|\d+)[uUlL]*|([A-Za-z_]\w*)|"
                    r"(&&|\|\||==|!=|<=|>=|<<|>>|[-+*/%()<>!~&|^?:]))")
_DIRECTIVE = re.compile(r"^\s*#\s*(\w+)\s*(.*?)\s*$")
_DEFINE = re.compile(r"^([A-Za-z_]\w*)(\()?")
_IDENTIFIER = re.compile(r"\b[A-Za-z_]\w*\b")
_ATTRIBUTE_USE = re.compile(r"\b__attribute__\b|\b__declspec\b")
_DEFINED = re.compile(r"\s*(?:\(\s*([A-Za-z_]\w*)\s*\)|([A-Za-z_]\w*))")


class HeaderError(ValueError):
    """The header uses C the binding's reader does not understand."""


def _strip_comments(text):
    # a comment becomes the newlines it spanned, so directives keep their lines
    return re.sub(r"/\*.*?\*/|//[^\n]*", lambda m: "\n" * m.group().count("\n") or " ",
                  text, flags=re.S)


def _lines(text):
    """Logical lines, backslash-newline continuations joined; each joined
    line is followed by empty ones, so line numbers stay the header's (a
    cdef error then names the header's line)."""
    lines = []
    for line in _strip_comments(text).split("\n"):
        if lines and lines[-1][1]:
            lines[-1] = (lines[-1][0][:-1] + " " + line, line.endswith("\\"),
                         lines[-1][2] + 1)
        else:
            lines.append((line, line.endswith("\\"), 1))
    out = []
    for line, _, count in lines:
        out += [line] + [""] * (count - 1)
    return out


def _value(macro):
    return macro.value if macro is not None else None


def evaluate(expr, macros):
    """Value of a preprocessor integer expression. `defined X` is 1 for a
    name in `macros` (name -> Macro); a name is its macro's integer value or
    a <stdint.h> limit; any other name is 0, as in C."""
    out, pos = [], 0
    expr = expr.strip()
    while pos < len(expr):
        m = _TOKEN.match(expr, pos)
        if not m:
            raise HeaderError(f"cannot evaluate {expr!r}")
        pos = m.end()
        number, name, op = m.groups()
        if number is not None:
            out.append(str(int(number, 0)))
        elif name == "defined":
            m = _DEFINED.match(expr, pos)
            if not m:
                raise HeaderError(f"bad `defined` in {expr!r}")
            pos = m.end()
            out.append("1" if (m.group(1) or m.group(2)) in macros else "0")
        elif name is not None:
            value = _value(macros.get(name))
            value = _KNOWN_LIMITS.get(name, 0) if value is None else value
            out.append(f"({value})")
        else:
            out.append({"&&": " and ", "||": " or ", "!": " not ", "/": "//"}.get(op, op))
    try:
        with warnings.catch_warnings():  # "(0) (0)" of a body like `static inline`
            warnings.simplefilter("ignore", SyntaxWarning)
            code = compile("".join(out), "<#if>", "eval")
        # only integers and operators reach eval: every token was matched above
        return int(eval(code, {"__builtins__": {}}, {}))  # noqa: S307
    except Exception as e:
        raise HeaderError(f"cannot evaluate {expr!r}: {e}") from None


class Macro:
    """An object-like or function-like #define: its body, and its integer
    value where the body is an integer expression."""

    __slots__ = ("body", "function_like", "value")

    def __init__(self, body, function_like, macros):
        self.body, self.function_like, self.value = body, function_like, None
        if body and not function_like and not _ATTRIBUTE.match(body):
            try:
                self.value = evaluate(body, macros)
            except HeaderError:
                pass  # a string, an initialiser, a cast: not a constant a cdef can hold

    @property
    def erased(self):
        """Expands to nothing or to a compiler attribute."""
        return not self.body or bool(_ATTRIBUTE.match(self.body))


class _Conditionals:
    """The #if/#elif/#else/#endif stack: is the current line compiled?"""

    def __init__(self):
        self.stack = []  # [this branch is on, a branch was taken, the parent is on]

    @property
    def active(self):
        return not self.stack or self.stack[-1][0]

    def push(self, condition):
        """condition: a function, called only where the #if is compiled."""
        parent = self.active
        on = parent and condition()
        self.stack.append([on, on, parent])

    def elif_(self, condition):
        if not self.stack:
            raise HeaderError("#elif/#else without #if")
        top = self.stack[-1]
        top[0] = top[2] and not top[1] and condition()
        top[1] = top[1] or top[0]

    def pop(self):
        if not self.stack:
            raise HeaderError("#endif without #if")
        self.stack.pop()


def preprocess(text, predefined=(), known=None):
    """(declarations, macros): the compiled text without directives (line
    for line: a directive or a line not compiled is left empty) and the
    macros defined on the way, name -> Macro. `predefined`: names taken as
    defined (none by default: a plain C compiler, not C++). `known`: macros
    already defined (those of an included header), name -> Macro."""
    macros = dict(known or {})
    macros.update({name: Macro("1", False, {}) for name in predefined})
    cond = _Conditionals()
    kept = []
    for line in _lines(text):
        m = _DIRECTIVE.match(line)
        kept.append(line if not m and cond.active else "")
        if not m:
            continue
        directive, rest = m.groups()
        if directive in ("ifdef", "ifndef"):
            cond.push(lambda: (rest.split()[0] in macros) == (directive == "ifdef"))
        elif directive == "if":
            cond.push(lambda: evaluate(rest, macros) != 0)
        elif directive == "elif":
            cond.elif_(lambda: evaluate(rest, macros) != 0)
        elif directive == "else":
            cond.elif_(lambda: True)
        elif directive == "endif":
            cond.pop()
        elif not cond.active:
            continue
        elif directive == "define":
            d = _DEFINE.match(rest)
            if not d:
                raise HeaderError(f"bad #define {rest!r}")
            body = rest[d.end():].strip()
            if d.group(2):  # NAME(args) body: the body follows the ')'
                body = body.split(")", 1)[1].strip() if ")" in body else ""
            macros[d.group(1)] = Macro(body, bool(d.group(2)), macros)
        elif directive == "undef":
            macros.pop(rest.split()[0], None)
        elif directive == "error":
            raise HeaderError(f"#error {rest}")
        # include, pragma, line: nothing a cdef needs
    if cond.stack:
        raise HeaderError("unterminated #if")
    return "\n".join(kept), macros


def _skip_parens(text, pos):
    """Index after the balanced (...) starting at text[pos] (after spaces)."""
    while pos < len(text) and text[pos].isspace():
        pos += 1
    if pos >= len(text) or text[pos] != "(":
        return pos
    depth = 0
    for i in range(pos, len(text)):
        depth += {"(": 1, ")": -1}.get(text[i], 0)
        if depth == 0:
            return i + 1
    raise HeaderError("unbalanced parentheses")


def _expand_macros(decls, macros):
    """Object-like macros replaced by their integer value or their body
    (until nothing changes: a body may name other macros); function-like
    macros that expand to an attribute erased with their arguments; then
    the attributes themselves (`__attribute__((...))`, `__declspec(...)`)
    erased."""
    for _ in range(16):  # deeper nesting than any header's; stops self-references
        out, pos = [], 0
        for m in _IDENTIFIER.finditer(decls):
            macro = macros.get(m.group())
            if m.start() < pos or macro is None or (macro.function_like and not macro.erased):
                continue
            out.append(decls[pos:m.start()])
            if macro.function_like:
                pos = _skip_parens(decls, m.end())
            else:
                out.append(macro.body if macro.value is None else str(macro.value))
                pos = m.end()
        if not out:
            break
        out.append(decls[pos:])
        decls = "".join(out)
    decls = re.sub(r"\[\[.*?\]\]", " ", decls)  # C23 attributes
    while True:
        m = _ATTRIBUTE_USE.search(decls)
        if not m:
            return decls
        decls = decls[:m.start()] + decls[_skip_parens(decls, m.end()):]


def _drop_static(decls):
    """Removes static declarations and definitions (static inline helpers)."""
    out, pos = [], 0
    while True:
        m = re.compile(r"\bstatic\b").search(decls, pos)
        if not m:
            out.append(decls[pos:])
            return "".join(out)
        # only at file scope: count braces before it
        depth = decls.count("{", 0, m.start()) - decls.count("}", 0, m.start())
        if depth:
            raise HeaderError("`static` inside braces")
        out.append(decls[pos:m.start()])
        start, i, parens = m.start(), m.end(), 0
        while i < len(decls):
            c = decls[i]
            parens += {"(": 1, ")": -1}.get(c, 0)
            if parens == 0 and c in ";{":
                break
            i += 1
        if i < len(decls) and decls[i] == "{":
            depth = 0
            for j in range(i, len(decls)):
                depth += {"{": 1, "}": -1}.get(decls[j], 0)
                if depth == 0:
                    i = j
                    break
            else:
                raise HeaderError("unbalanced braces in a static function")
        pos = i + 1
        out.append("\n" * decls.count("\n", start, pos))  # line numbers stay


def cdef_source(text, predefined=(), included=()):
    """The cffi cdef text of a C header (see the module's docstring).
    `included`: the texts of headers it includes whose declarations are
    declared already (stsa.h for stsa_io.h, through cffi's ffi.include):
    their macros (STSA_API, ...) apply here and are not declared again."""
    known = {}
    for other in included:
        known = preprocess(other, predefined, known)[1]
    decls, macros = preprocess(text, predefined, known)
    decls = _drop_static(_expand_macros(decls, macros))
    # after the declarations, so that line N of the cdef is line N of the header
    defines = [f"#define {name} {m.value}" for name, m in macros.items()
               if m.value is not None and name not in predefined and name not in known]
    return decls + "\n" + "\n".join(defines) + "\n"
