"""Untrusted text as rich prints it: what every renderer and every error line uses, so that a
`[/red]` from a server, a log or a path is shown as text and never parsed as markup."""

from __future__ import annotations

from rich.text import Text

from specscope.trace.text import scrub


def untrusted(text: object, style: str = "") -> Text:
    """Text from a server, a file or the user, as rich shows it: never parsed as markup (a
    `[/red]` in a 500 body is text), lone surrogates escaped so the terminal can encode it."""
    return Text(scrub(str(text)), style=style)


def labelled(label: str, style: str, text: object) -> Text:
    """`label` in `style`, then untrusted `text`: the one shape of error/warning/note lines."""
    return Text.assemble((label, style), " ", untrusted(text))
