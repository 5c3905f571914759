"""Small HTML building blocks shared by the Jupyter displays.

Everything here returns plain strings of HTML.  Styling lives in one CSS block
(``CSS``, classes prefixed ``ptc-``), which every top-level display includes once
(``with_css``).  Code highlighting uses Pygments when it is installed, with inline
styles so that it looks the same in any notebook front end; without Pygments the
code is shown escaped, with line numbers all the same.
"""
from __future__ import annotations

import html as _html
import re

_WS_SPAN = re.compile(r'<span style="[^"<>]*">(\s*)</span>')

CSS = """<style>
.ptc-root{font-family:var(--jp-ui-font-family,system-ui,sans-serif);font-size:13px;line-height:1.35}
.ptc-root details{margin:4px 0;border:1px solid #d0d7de;border-radius:4px;padding:2px 8px}
.ptc-root summary{cursor:pointer;font-weight:600;padding:2px 0}
.ptc-root details details{border-color:#e5e8eb}
.ptc-root details details summary{font-weight:normal;color:#57606a}
.ptc-pre{font-family:var(--jp-code-font-family,monospace);font-size:12px;margin:2px 0;
  white-space:pre;overflow-x:auto;background:#f6f8fa;padding:4px 6px;text-align:left}
.ptc-ln{color:#8c959f;user-select:none;display:inline-block;min-width:3ch;
  text-align:right;margin-right:1.2ch;border-right:1px solid #d0d7de;padding-right:.6ch}
table.ptc-table{border-collapse:collapse;margin:4px 0;font-size:12px}
table.ptc-table th,table.ptc-table td{border:1px solid #d0d7de;padding:2px 6px;
  text-align:left;vertical-align:top}
table.ptc-table th{background:#f0f3f6}
.ptc-mono{font-family:var(--jp-code-font-family,monospace);font-size:12px}
.ptc-note{color:#57606a;font-style:italic}
.ptc-kw{color:#cf222e;font-weight:600}.ptc-ty{color:#8250df}.ptc-num{color:#0550ae}
.ptc-op{color:#953800}.ptc-com{color:#6e7781;font-style:italic}.ptc-fn{color:#116329}
.ptc-tree{list-style:none;margin:0;padding-left:1.4em;border-left:1px dotted #c0c7ce}
.ptc-tree>li{margin:2px 0}
.ptc-node{font-weight:600;color:#24292f}
.ptc-mark{display:inline-block;border-radius:3px;padding:0 5px;font-weight:600;color:#fff;
  background:#6e7781}
.ptc-mark-parallel{background:#1a7f37}.ptc-mark-simd{background:#0969da}
.ptc-mark-promote{background:#9a6700}.ptc-mark-kernel{background:#8250df}
.ptc-mark-block{background:#bf3989}.ptc-mark-thread{background:#cf222e}
.ptc-mark-shared{background:#953800}.ptc-mark-copy{background:#57606a}
.ptc-flag{display:inline-block;border:1px solid #8c959f;border-radius:3px;padding:0 4px;
  margin-left:4px;font-size:11px;color:#57606a}
.ptc-flag-on{border-color:#1a7f37;color:#1a7f37}
.ptc-swatch{display:inline-block;width:12px;height:12px;border:1px solid #57606a;
  vertical-align:middle;margin-right:4px}
</style>"""


def escape(text) -> str:
    """``text`` (any object, through ``str``) safe to put in HTML text or attributes."""
    return _html.escape(str(text), quote=True)


def with_css(body: str) -> str:
    """``body`` wrapped in the styled root element, with the CSS block before it."""
    return f'{CSS}<div class="ptc-root">{body}</div>'


def pre(text: str) -> str:
    """Escaped, preformatted text."""
    return f'<pre class="ptc-pre">{escape(text)}</pre>'


def fallback(text) -> str:
    """What every display shows when rendering ``text`` richly failed."""
    return with_css(pre(text))


def table(headers, rows, raw: bool = False) -> str:
    """An HTML table.  Cells are escaped, unless ``raw`` (then they are HTML already)."""
    cell = (lambda c: str(c)) if raw else escape
    head = "".join(f"<th>{escape(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{cell(c)}</td>" for c in row) + "</tr>"
                   for row in rows)
    return f'<table class="ptc-table"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def details(summary: str, body: str, open_: bool = False, raw_summary: bool = False) -> str:
    """A collapsible section; ``summary`` is escaped unless ``raw_summary``."""
    head = summary if raw_summary else escape(summary)
    return f"<details{' open' if open_ else ''}><summary>{head}</summary>{body}</details>"


def numbered(lines) -> str:
    """Lines of HTML (already escaped or highlighted) in a ``<pre>``, with numbers."""
    lines = list(lines)
    width = len(str(len(lines)))
    out = [f'<span class="ptc-ln">{str(k).rjust(width)}</span>{line}'
           for k, line in enumerate(lines, 1)]
    return '<pre class="ptc-pre">' + "\n".join(out) + "</pre>"


def _lexer(language: str):
    """A Pygments lexer for ``language``, or None (no Pygments, or no lexer at all)."""
    try:
        from pygments import lexers
    except ImportError:
        return None
    names = {"c": ["CLexer"], "ast": ["CLexer"], "cuda": ["CudaLexer", "CLexer"],
             "opencl": ["OpenCLLexer", "CLexer"], "cpp": ["CppLexer", "CLexer"]}
    for name in names.get(language, []):
        cls = getattr(lexers, name, None)
        if cls is not None:
            return cls(stripnl=False, ensurenl=False)
    try:
        return lexers.get_lexer_by_name(language, stripnl=False, ensurenl=False)
    except Exception:  # noqa: BLE001 - unknown language: plain text
        return None


def highlight_lines(text: str, language: str) -> list:
    """The lines of ``text`` as HTML: highlighted by Pygments where it can, else
    escaped.  Pygments closes its spans at every line end, so lines split cleanly."""
    lexer = _lexer(language)
    if lexer is not None:
        try:
            from pygments import highlight
            from pygments.formatters import HtmlFormatter

            fmt = HtmlFormatter(nowrap=True, noclasses=True, style="default")
            # whitespace needs no colour: drop those spans (a third of the output)
            out = _WS_SPAN.sub(r"\1", highlight(text, lexer, fmt))
            lines = out.split("\n")
            if len(lines) > text.count("\n") + 1:  # a trailing newline Pygments added
                lines = lines[:text.count("\n") + 1]
            return lines
        except Exception:  # noqa: BLE001 - a lexer bug must not hide the code
            pass
    return [escape(line) for line in text.split("\n")]


def code_html(text: str, language: str, line_numbers: bool = True) -> str:
    """``text`` as a highlighted code block (a fragment, without the CSS block)."""
    lines = highlight_lines(text, language)
    if line_numbers:
        return numbered(lines)
    return '<pre class="ptc-pre">' + "\n".join(lines) + "</pre>"
