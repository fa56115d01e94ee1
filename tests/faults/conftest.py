"""The fault-injection suite: every test is one injected fault (``@pytest.mark.fault("...")``, and
slow-marked: ``./all_tests.sh`` runs them in the slow suite), and the session ends with the table of
faults tried and survived."""

import pytest

_ROWS: list[tuple[str, str]] = []


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    marker = item.get_closest_marker("fault")
    if marker is None:
        return
    if report.when == "call" or (report.when == "setup" and (report.failed or report.skipped)):
        state = "survived" if report.passed else ("skipped" if report.skipped else "NOT survived")
        _ROWS.append((marker.args[0], state))


def pytest_terminal_summary(terminalreporter):
    if not _ROWS:
        return
    width = max(len(fault) for fault, _ in _ROWS)
    terminalreporter.write_sep("=", "fault injection")
    terminalreporter.write_line(f"{'fault'.ljust(width)}  outcome")
    for fault, state in _ROWS:
        terminalreporter.write_line(f"{fault.ljust(width)}  {state}")
    survived = sum(state == "survived" for _, state in _ROWS)
    terminalreporter.write_line(f"{survived}/{len(_ROWS)} faults survived")
