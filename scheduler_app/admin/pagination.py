"""Lists over tables that grow with history: count a bounded number of rows.

Django's changelist counts every row its filters match on each page load, which
reads the whole table when the history is long. A BoundedPaginator counts at most
``limit`` rows; past that, the count is shown as "1000+", the pages reach the
first ``limit`` rows, and a filter, a search or another order reaches the rest.
"""

from __future__ import annotations

from django.core.paginator import Paginator
from django.utils.functional import cached_property


class AtLeast(int):
    """A count that stopped at its limit: the number, shown as "1000+"."""

    def __str__(self) -> str:
        return "%d+" % self


class BoundedPaginator(Paginator):
    """A paginator whose count reads at most ``limit`` + 1 rows; beyond ``limit`` the
    count is AtLeast(limit), so that the admin says "1000+ jobs", "Select all 1000+
    jobs" (an action then applies to every matching row, as Django's does)."""

    limit = 1000

    @cached_property
    def count(self) -> int:
        counted = self.object_list[: self.limit + 1].count()
        return AtLeast(self.limit) if counted > self.limit else counted
