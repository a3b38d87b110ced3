"""The budget table of docs/testing.md (tests/budget.py): every area with tests has a share, and the shares fit."""

from tests.budget import BUDGET_DOC, area_of, areas_with_tests, budget_shares


def test_areas_are_the_first_two_parts_of_a_tests_path():
    assert area_of("tests/serve/test_server.py::test_x[smol_server]") == "tests/serve"
    assert area_of("environments/vf_webshop/tests/test_webshop_env.py::test_y") == "environments/vf_webshop"


def test_every_area_with_tests_has_a_share_and_no_share_is_left_over():
    shares, areas = budget_shares(), areas_with_tests()
    assert "tests/trainer" in areas and "environments/vf_alfworld" in areas
    assert not areas - shares.keys(), f"areas without a share in {BUDGET_DOC}: {sorted(areas - shares.keys())}"
    assert not shares.keys() - areas, f"shares for areas without tests: {sorted(shares.keys() - areas)}"


def test_the_shares_add_up_to_at_most_the_whole():
    shares = budget_shares()
    assert all(share > 0 for share in shares.values()), shares
    assert sum(shares.values()) <= 100, f"the shares in {BUDGET_DOC} add up to {sum(shares.values()):g}%"


def test_a_table_row_is_read_as_an_area_and_a_percent(tmp_path):
    doc = tmp_path / "testing.md"
    doc.write_text("| area | share |\n|---|---|\n| `tests/serve` | 11.5% | servers |\n| `environments/vf_x` | 0.25% |\n"
                   "| `not a row` | x% |\n")
    assert budget_shares(doc) == {"tests/serve": 11.5, "environments/vf_x": 0.25}
    assert budget_shares(tmp_path / "missing.md") == {}
