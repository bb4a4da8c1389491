"""Pages that never drop a row, for the API's lists and the dashboards.

Django's Paginator reads a page in two statements: the count, then the rows cut at it (the last
page is `[bottom:count]`). Under READ COMMITTED each sees its own snapshot, so a row committed
between the two (an extraction storing a memory, newest first) pushed the page's oldest row
past the cut: a list right after an add missed an older memory (issue #50,
tests/memory/test_list_during_extraction.py). Here the rows are read first, cut at the page
size only; the count, read after, may include a row committed since, but no row that existed
when the page was read is left out. The page's query keeps its plan (an index scan that stops
at the page size); a total in the same statement (`count(*) OVER ()`) would read the whole
scope for every page, and a REPEATABLE READ transaction fails its access-log insert (40001)
whenever another request has just updated the key the row references.

May import Django only.
"""

from __future__ import annotations

from typing import Any

from django.core.paginator import EmptyPage, Page, PageNotAnInteger, Paginator
from django.db.models import QuerySet


class StablePaginator(Paginator):  # type: ignore[type-arg]
    """A Paginator whose page reads its rows before any count, cut at the page size
    (querysets without orphans; anything else is paged as Django does)."""

    def page(self, number: Any) -> Page:  # type: ignore[type-arg]
        if not isinstance(self.object_list, QuerySet) or self.orphans:
            return super().page(number)
        wanted = _page_number(number, self.error_messages)
        bottom = (wanted - 1) * self.per_page
        rows = list(self.object_list[bottom : bottom + self.per_page])
        if not rows and wanted > 1:
            raise EmptyPage(self.error_messages["no_results"])
        if not rows and not self.allow_empty_first_page:
            raise EmptyPage(self.error_messages["no_results"])
        return Page(rows, wanted, self)


def _page_number(number: Any, messages: dict[str, Any]) -> int:
    """The page number as an integer of at least 1 (Paginator.validate_number without its
    upper bound, which would count first)."""
    try:
        if isinstance(number, float) and not number.is_integer():
            raise ValueError
        wanted = int(number)
    except (TypeError, ValueError):
        raise PageNotAnInteger(messages["invalid_page"]) from None
    if wanted < 1:
        raise EmptyPage(messages["min_page"])
    return wanted
