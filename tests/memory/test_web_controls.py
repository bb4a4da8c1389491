"""Invisible direction and zero-width characters in users' texts and ids are shown as markers
on the dashboards' pages (issue #50: a U+202E in a memory read reversed with nothing to show
it), and everything around them stays escaped."""

from __future__ import annotations

from django.template import Context, Template

from memory.templatetags.controls import visible_controls
from tenants import links
from tenants.db import project_context
from tests.base import BaseTestCase
from tests.factory import add_texts
from tests.memory.test_web_memories import person

REVERSED = "Send the invoice to \u202emoc.elpmaxe@eve\u202c today"


def test_each_control_is_a_named_marker_and_the_rest_is_escaped() -> None:
    shown = str(visible_controls("<b>x</b>\u202eabc\u200b"))
    assert shown == (
        "&lt;b&gt;x&lt;/b&gt;"
        '<span class="control-char" title="U+202E RIGHT-TO-LEFT OVERRIDE">⟪RLO⟫</span>abc'
        '<span class="control-char" title="U+200B ZERO WIDTH SPACE">⟪ZWSP⟫</span>'
    )
    assert "\u202e" not in shown and "\u200b" not in shown
    assert str(visible_controls("plain <i>")) == "plain &lt;i&gt;"
    # As a builtin: any template may use it.
    assert "⟪RLO⟫" in Template("{{ t|visible_controls }}").render(Context({"t": "\u202e"}))


class ControlsOnPagesTestCase(BaseTestCase):
    def test_the_operator_and_the_end_user_see_the_markers(self) -> None:
        project = self.alice.key.project
        with project_context(project.pk):
            (memory,) = add_texts(project, [REVERSED], user_id="mallory\u202e")
        reader = person("rita", project.organization, "reader")
        self.client.force_login(reader)
        base = f"/dashboard/p/{project.pk}/memories/"
        for page in (self.client.get(base), self.client.get(f"{base}{memory.pk}/")):
            html = page.content.decode()
            assert "\u202e" not in html, page.request["PATH_INFO"]
            assert html.count("⟪RLO⟫") >= 2  # the text and the user id
        token, _ = links.mint(self.alice.key, "mallory\u202e", 3600)
        for path in (f"/me/{token}/", f"/me/{token}/m/{memory.pk}/"):
            html = self.client.get(path).content.decode()
            assert "⟪RLO⟫" in html and "moc.elpmaxe@eve" in html
