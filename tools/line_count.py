"""Count the lines of the product code (.py under agent_service/, conversation_service/, shared/).

Prints, per package and in total, every line and the code lines: lines that are not blank, not only a
comment and not part of a docstring (docstrings are found with `ast`, so a string that is data is code).

    python tools/line_count.py            # from the repository root
"""

from __future__ import annotations

import ast
import io
import sys
import tokenize
from pathlib import Path

PACKAGES = ("agent_service", "conversation_service", "shared")


def docstring_lines(tree: ast.AST) -> set[int]:
    """Line numbers covered by the docstrings of the module, its classes and its functions."""
    lines: set[int] = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        first = node.body[0] if node.body else None
        if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
            lines.update(range(first.lineno, first.end_lineno + 1))
    return lines


def comment_lines(source: str) -> set[int]:
    """Line numbers whose only token is a comment (a trailing comment leaves the line a code line)."""
    code: set[int] = set()
    comments: set[int] = set()
    skip = {tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT,
            tokenize.ENDMARKER}
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            comments.add(tok.start[0])
        elif tok.type not in skip:
            code.update(range(tok.start[0], tok.end[0] + 1))
    return comments - code


def count(path: Path) -> tuple[int, int]:
    source = path.read_text(encoding="utf-8")
    lines = source.splitlines()
    skipped = docstring_lines(ast.parse(source)) | comment_lines(source)
    code = sum(1 for number, line in enumerate(lines, 1) if line.strip() and number not in skipped)
    return len(lines), code


def main(root: Path) -> None:
    grand_total = grand_code = 0
    print(f"{'package':<24}{'files':>7}{'lines':>9}{'code':>9}")
    for package in PACKAGES:
        files = sorted((root / package).rglob("*.py"))
        total = code = 0
        for path in files:
            file_total, file_code = count(path)
            total += file_total
            code += file_code
        print(f"{package:<24}{len(files):>7}{total:>9}{code:>9}")
        grand_total += total
        grand_code += code
    print(f"{'total':<24}{'':>7}{grand_total:>9}{grand_code:>9}")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parent.parent)
