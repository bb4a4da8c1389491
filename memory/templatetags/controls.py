"""`visible_controls`: a user's text with its invisible direction and zero-width characters
shown, as code review tools show them (`named_controls`: the same in plain text, for an
attribute).

A right-to-left override (U+202E) in a memory or an id makes what follows it read reversed;
<bdi> keeps it from reordering the page around it, but not from reversing the text itself, so
an operator could not tell "moc.elpmaxe@eve" from what it hides. Each such character is
replaced by a visible marker naming it (`⟪RLO⟫`, with its code point and name as a tooltip),
and everything else is escaped as Django escapes it. Loaded as a template builtin
(config.settings TEMPLATES): every template may use it.
"""

from __future__ import annotations

import unicodedata

from django import template
from django.utils.html import escape, format_html
from django.utils.safestring import SafeString, mark_safe

register = template.Library()

# The formatting characters that change how text reads while showing nothing: the bidirectional
# embeddings, overrides and isolates, the marks, and the zero-width ones.
CONTROLS = {
    "\u061c": "ALM",
    "\u200b": "ZWSP",
    "\u200c": "ZWNJ",
    "\u200d": "ZWJ",
    "\u200e": "LRM",
    "\u200f": "RLM",
    "\u202a": "LRE",
    "\u202b": "RLE",
    "\u202c": "PDF",
    "\u202d": "LRO",
    "\u202e": "RLO",
    "\u2066": "LRI",
    "\u2067": "RLI",
    "\u2068": "FSI",
    "\u2069": "PDI",
    "\ufeff": "BOM",
}


@register.filter(is_safe=True)
def visible_controls(value: object) -> SafeString:
    """`value` escaped, each invisible control character (CONTROLS) a visible marker."""
    text = "" if value is None else str(value)
    if not any(c in CONTROLS for c in text):
        return escape(text)
    parts = []
    for char in text:
        short = CONTROLS.get(char)
        if short is None:
            parts.append(escape(char))
            continue
        name = unicodedata.name(char, "FORMAT CHARACTER")
        code = f"U+{ord(char):04X}"
        parts.append(
            format_html('<span class="control-char" title="{} {}">⟪{}⟫</span>', code, name, short)
        )
    return mark_safe("".join(parts))  # noqa: S308 - each part escaped or built by format_html


@register.filter
def named_controls(value: object) -> str:
    """`value` with each invisible control character (CONTROLS) named in plain text (`⟪RLO⟫`),
    for an attribute (a tooltip), where no markup can mark it; escaped by the template."""
    text = "" if value is None else str(value)
    return "".join(f"⟪{CONTROLS[c]}⟫" if c in CONTROLS else c for c in text)
