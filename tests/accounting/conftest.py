"""The accounting tests state replace-one numbers (ISRL-DP, the papers' relation) and were written
when replace-one was silodp's default. Since the default became add/remove (dp-accounting's,
Opacus', Flower's; CHANGELOG.md), a call here that names no relation still means replace-one:
the default is pinned for this folder. The default itself is tested in tests/cli/test_event_file.py
and tests/accounting/test_default_relation.py, where the pin is lifted."""

import pytest

from silodp.accounting import accountants, events


@pytest.fixture(autouse=True)
def _replace_one_default(request, monkeypatch):
    if request.node.get_closest_marker("ecosystem_default") is None:
        # where neighbouring_arg reads it (the accountants package re-exports it)
        monkeypatch.setattr(accountants.base, "DEFAULT_RELATION", events.REPLACE_ONE)
