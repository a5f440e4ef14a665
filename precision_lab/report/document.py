"""A tiny document model rendered twice — Markdown (index.md) and a static HTML page (index.html).

Why not a Markdown→HTML library: the report must open offline with no remote scripts or fonts, and
rendering both files from one block list keeps them identical in content by construction.
"""
from __future__ import annotations

import html
from dataclasses import dataclass, field


@dataclass
class Heading:
    text: str
    level: int = 2


@dataclass
class Paragraph:
    text: str


@dataclass
class Table:
    header: list[str]
    rows: list[list[str]]
    caption: str | None = None


@dataclass
class Figure:
    path: str  # relative to the report folder
    caption: str


@dataclass
class Code:
    text: str


@dataclass
class Bullets:
    items: list[str]


@dataclass
class Note:
    """Small print under a figure or table (its provenance)."""

    text: str


@dataclass
class Document:
    title: str
    blocks: list = field(default_factory=list)

    def add(self, *blocks) -> None:
        self.blocks.extend(blocks)

    # -- Markdown ---------------------------------------------------------------------------------
    def to_markdown(self) -> str:
        out = [f"# {self.title}", ""]
        for b in self.blocks:
            if isinstance(b, Heading):
                out += ["#" * b.level + " " + b.text, ""]
            elif isinstance(b, Paragraph):
                out += [b.text, ""]
            elif isinstance(b, Table):
                if b.caption:
                    out += [f"*{b.caption}*", ""]
                out.append("| " + " | ".join(_md_cell(h) for h in b.header) + " |")
                out.append("|" + "|".join("---" for _ in b.header) + "|")
                out += ["| " + " | ".join(_md_cell(c) for c in row) + " |" for row in b.rows]
                out.append("")
            elif isinstance(b, Figure):
                out += [f"![{b.caption}]({b.path})", "", f"*{b.caption}*", ""]
            elif isinstance(b, Code):
                out += ["```", b.text.rstrip(), "```", ""]
            elif isinstance(b, Bullets):
                out += [f"- {_md_line(i)}" for i in b.items] + [""]
            elif isinstance(b, Note):
                out += [f"<sub>{_md_line(b.text)}</sub>", ""]
        return "\n".join(out)

    # -- HTML (self-contained: inline CSS, local images, no scripts) ------------------------------
    def to_html(self) -> str:
        parts = [
            "<!DOCTYPE html>",
            '<html lang="en"><head><meta charset="utf-8">',
            f"<title>{html.escape(self.title)}</title>",
            f"<style>{_CSS}</style></head><body><main>",
            f"<h1>{html.escape(self.title)}</h1>",
        ]
        # contents: links to the level-2 headings (same-page anchors only)
        tops = [b for b in self.blocks if isinstance(b, Heading) and b.level <= 2]
        if len(tops) > 2:
            parts.append("<nav><ul>" + "".join(f'<li><a href="#s{i}">{html.escape(h.text)}</a></li>'
                                              for i, h in enumerate(tops)) + "</ul></nav>")
        ids = {id(h): f"s{i}" for i, h in enumerate(tops)}
        for b in self.blocks:
            if isinstance(b, Heading):
                lvl = min(max(b.level, 2), 6)
                anchor = f' id="{ids[id(b)]}"' if id(b) in ids else ""
                parts.append(f"<h{lvl}{anchor}>{html.escape(b.text)}</h{lvl}>")
            elif isinstance(b, Paragraph):
                parts.append(f"<p>{_inline(b.text)}</p>")
            elif isinstance(b, Table):
                cap = f"<caption>{html.escape(b.caption)}</caption>" if b.caption else ""
                head = "".join(f"<th>{html.escape(str(h))}</th>" for h in b.header)
                rows = "".join("<tr>" + "".join(f"<td>{_inline(str(c))}</td>" for c in r) + "</tr>" for r in b.rows)
                parts.append(f"<table>{cap}<thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>")
            elif isinstance(b, Figure):
                parts.append(f'<figure><img src="{html.escape(b.path)}" alt="{html.escape(b.caption)}">'
                             f"<figcaption>{html.escape(b.caption)}</figcaption></figure>")
            elif isinstance(b, Code):
                parts.append(f"<pre><code>{html.escape(b.text)}</code></pre>")
            elif isinstance(b, Bullets):
                parts.append("<ul>" + "".join(f"<li>{_inline(i)}</li>" for i in b.items) + "</ul>")
            elif isinstance(b, Note):
                parts.append(f'<p class="note">{_inline(b.text)}</p>')
        parts.append("</main></body></html>")
        return "\n".join(parts)


def _md_cell(c) -> str:
    return str(c).replace("|", "\\|").replace("\n", " ")


def _md_line(text: str) -> str:
    # '<' would open raw HTML in Markdown renderers; the text is plain prose
    return str(text).replace("\n", " ").replace("<", "&lt;")


def _inline(text: str) -> str:
    """Escape, then turn `code` spans into <code> (the only inline markup the report uses)."""
    esc = html.escape(text)
    pieces = esc.split("`")
    return "".join(f"<code>{p}</code>" if i % 2 else p for i, p in enumerate(pieces))


_CSS = (
    "body{font-family:system-ui,-apple-system,'Segoe UI',sans-serif;margin:0;color:#222;background:#fff}"
    "main{max-width:1100px;margin:auto;padding:1.5em}"
    "table{border-collapse:collapse;margin:1em 0;font-size:0.9em}"
    "th,td{border:1px solid #ccc;padding:0.3em 0.6em;text-align:right}"
    "th:first-child,td:first-child{text-align:left}"
    "caption{caption-side:top;text-align:left;font-style:italic;padding-bottom:0.3em}"
    "figure{margin:1em 0}img{max-width:100%;border:1px solid #eee}"
    "figcaption{font-style:italic;color:#555}"
    "pre{background:#f6f6f6;padding:0.8em;overflow-x:auto;font-size:0.85em}"
    "code{font-family:ui-monospace,monospace}"
    ".note{font-size:0.8em;color:#555;margin-top:-0.5em}"
    "nav ul{columns:2;font-size:0.9em}"
)
