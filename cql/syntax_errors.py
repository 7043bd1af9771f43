"""Lark's parse errors as CqlErrors: line, column, the tokens the parser expected, and a
misspelled keyword's likely meaning. Imported only when a text does not parse.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from typing import cast

from lark import Token
from lark.exceptions import UnexpectedCharacters, UnexpectedEOF, UnexpectedInput, UnexpectedToken

from cqlstream.cql.errors import CqlError, Pos, close_matches
from cqlstream.cql.lark_tree import tok_pos
from cqlstream.cql.parser import _lark

# Friendly names of terminals for "expected ..." messages.
_TOKEN_NAMES = {
    "NAME": "a name",
    "INT": "an integer",
    "GROUPED_INT": "an integer",
    "FLOAT": "a number",
    "STRING": "a string",
    "COMP_OP": "a comparison",
    "ADD_OP": "'+' or '-'",
    "MUL_OP": "'*', '/' or '%'",
    "CONCAT_OP": "'||'",
    "TIME_UNIT": "a time unit",
    "LPAR": "'('",
    "RPAR": "')'",
    "LSQB": "'['",
    "RSQB": "']'",
    "COMMA": "','",
    "DOT": "'.'",
    "STAR": "'*'",
    "EQUAL": "'='",
    "_SEMI": "';'",
    "$END": "end of input",
}


def _describe(tok: Token | None) -> str:
    if tok is None or tok.type == "$END":
        return "end of input"
    return repr(str(tok))


def _terminal_text(name: str) -> str:
    """Friendly name of a terminal: the table above, else its literal text (keywords, and
    anonymous terminals such as `__ANON_0` for the option value's "-"), else its name."""
    if name in _TOKEN_NAMES:
        return _TOKEN_NAMES[name]
    term = next((t for t in _lark().terminals if t.name == name), None)
    if term is not None and type(term.pattern).__name__ == "PatternStr":
        return repr(term.pattern.value.lower())
    return repr(name.lower().lstrip("_"))


def _expected(names: Iterable[str]) -> str:
    friendly = sorted({_terminal_text(n) for n in names})
    if len(friendly) > 8:
        friendly = friendly[:8] + ["..."]
    return ", ".join(friendly)


@functools.lru_cache(maxsize=1)
def _keywords() -> tuple[str, ...]:
    """The grammar's keywords (its case-insensitive literal words) and time unit words: what a
    misspelled name may have meant."""
    words = [
        str(t.pattern.value)
        for t in _lark().terminals
        if type(t.pattern).__name__ == "PatternStr" and str(t.pattern.value).isalpha()
    ]
    return tuple(words) + ("millisecond", "milliseconds", "second", "seconds", "minute", "minutes", "hour", "hours")


def _parses_further(text: str, start: str, offset: int) -> bool:
    """Whether `text` parses, or fails only beyond `offset`."""
    try:
        _lark().parse(text, start=start)
    except UnexpectedToken as e:
        return (len(text) if e.token.type == "$END" else (e.token.start_pos or 0)) > offset
    except UnexpectedInput as e:
        return (e.pos_in_stream or 0) > offset
    return True


# How many names just before (and at) the error are tried as misspelled keywords.
_HINT_LOOKBACK = 3


def _keyword_hint(text: str, start: str, err_at: int) -> CqlError | None:
    """A misspelled keyword near a syntax error: the name at or just before offset `err_at` that,
    spelled as a close keyword, lets the statement parse past the error. Such a name is read as
    a column or alias, so the parser stumbles only on the word after it; the hint points at it."""
    names: list[Token] = []
    try:
        for tok in _lark().lex(text):
            if (tok.start_pos or 0) > err_at:
                break
            if tok.type == "NAME" and not tok.startswith("`"):
                names.append(tok)
    except UnexpectedInput:
        pass  # the lexer stops at the first bad character; the names before it are enough
    for tok in reversed(names[-_HINT_LOOKBACK:]):
        at, end = tok.start_pos or 0, tok.end_pos or 0
        for kw in close_matches(str(tok), _keywords(), n=3):
            fixed = text[:at] + kw + text[end:]
            if _parses_further(fixed, start, err_at + len(kw) - (end - at)):
                reason = f"unexpected '{tok}'; did you mean {kw.upper()}?"
                return CqlError("syntax", reason, tok_pos(tok), text)
    return None


def syntax_error(e: UnexpectedInput, text: str, start: str = "single") -> CqlError:
    if isinstance(e, UnexpectedToken):
        tok = e.token
        hint = _keyword_hint(text, start, len(text) if tok.type == "$END" else (tok.start_pos or 0))
        if hint is not None:
            return hint
        if tok.type == "$END":
            # Just after the last token; lines counted by '\n' like Lark (not str.splitlines).
            head = text.rstrip(" \t\f\r\n")
            pos = Pos(head.count("\n") + 1, len(head) - head.rfind("\n"))
            return CqlError("syntax", f"unexpected end of input; expected {_expected(e.expected)}", pos, text)
        if text.startswith("/*", tok.start_pos or 0):  # a closed comment would have been skipped
            return CqlError("syntax", "unterminated comment", tok_pos(tok), text)
        return CqlError("syntax", f"unexpected {_describe(tok)}; expected {_expected(e.expected)}", tok_pos(tok), text)
    if isinstance(e, UnexpectedCharacters):
        # Lark declares pos_in_stream None on the base class; UnexpectedCharacters always sets the lexer position.
        at = cast(int, e.pos_in_stream)
        ch = text[at] if at < len(text) else ""
        if ch in "'\"":
            reason = "unterminated string"
        elif ch == "`":
            reason = "unterminated quoted name"
        elif text.startswith("/*", at):
            reason = "unterminated comment"
        else:
            reason = f"unexpected character {ch!r}"
        return CqlError("syntax", reason, Pos(e.line, e.column, e.line, e.column + 1), text)
    if isinstance(e, UnexpectedEOF):
        return CqlError("syntax", f"unexpected end of input; expected {_expected(e.expected)}", None, text)
    return CqlError("syntax", str(e).splitlines()[0], None, text)
