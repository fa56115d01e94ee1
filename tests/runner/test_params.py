"""ParamGrid / ParamList: expansion order, shuffling, validation of names and values."""

import pytest

from sfx_runner import ParamGrid, ParamList, RunnerError


def test_grid_is_cartesian_with_first_key_slowest():
    grid = ParamGrid([("seed", [1, 2, 3]), ("learning_rate", [1e-4, 1e-3]), ("use_rnn", [True, False])])
    params = list(grid)
    assert len(grid) == len(params) == 12
    assert params[0] == {"seed": 1, "learning_rate": 1e-4, "use_rnn": True}
    assert params[1] == {"seed": 1, "learning_rate": 1e-4, "use_rnn": False}
    assert params[2] == {"seed": 1, "learning_rate": 1e-3, "use_rnn": True}
    assert params[4] == {"seed": 2, "learning_rate": 1e-4, "use_rnn": True}
    assert params[-1] == {"seed": 3, "learning_rate": 1e-3, "use_rnn": False}
    expected = [{"seed": s, "learning_rate": lr, "use_rnn": r}
                for s in (1, 2, 3) for lr in (1e-4, 1e-3) for r in (True, False)]
    assert params == expected
    assert all(list(p) == ["seed", "learning_rate", "use_rnn"] for p in params), "key order is the grid's"


def test_grid_accepts_a_dict_and_iterates_again():
    grid = ParamGrid({"a": [1, 2], "b": ["x"]})
    assert list(grid) == [{"a": 1, "b": "x"}, {"a": 2, "b": "x"}]
    assert list(grid) == list(grid.generate_params()), "iterating twice gives the same sequence"


def test_shuffle_is_a_seeded_permutation():
    grid = ParamGrid([("seed", list(range(6))), ("lr", [1, 2, 3])], shuffle=True, seed=7)
    ordered = list(grid.generate_params(randomize=False))
    shuffled = list(grid)
    assert shuffled != ordered
    assert sorted(map(str, shuffled)) == sorted(map(str, ordered)), "same combinations, other order"
    assert list(ParamGrid(grid.grid, shuffle=True, seed=7)) == shuffled, "same seed, same order"
    assert list(ParamGrid(grid.grid, shuffle=True, seed=8)) != shuffled
    unshuffled = ParamGrid(grid.grid)
    assert list(unshuffled.generate_params(randomize=True)) == list(ParamGrid(grid.grid, seed=0).generate_params(True))


@pytest.mark.parametrize("grid,expected", [
    ([("seed", [])], "no values"),
    ([("seed", [1]), ("seed", [2])], "appears twice"),
    ([("learning rate", [1])], "'learning rate'"),
    ([("x=1", [1])], "'x=1'"),
    ([("seed", 5)], "must be a list"),
    ([("seed", "123")], "must be a list"),
    ([("seed", [None])], "None"),
    ([("seed", [[1, 2]])], "[1, 2]"),
    ([("seed",)], "not a (name, [values]) pair"),
])
def test_bad_grids_name_the_problem(grid, expected):
    with pytest.raises(RunnerError) as e:
        ParamGrid(grid)
    assert expected in str(e.value)


def test_param_list_keeps_order_and_copies():
    entries = [{"seed": 1, "env": "a"}, {"seed": 2}, {"lr": 0.5, "note": "x y"}]
    plist = ParamList(entries)
    out = list(plist)
    assert out == entries and len(plist) == 3
    out[0]["seed"] = 99
    assert list(plist)[0]["seed"] == 1, "callers cannot change the list through what it yields"


@pytest.mark.parametrize("entries,expected", [
    ([{"seed": 1}, 5], "entry 1"),
    ([{"bad key": 1}], "'bad key'"),
    ([{"seed": {"a": 1}}], "{'a': 1}"),
])
def test_bad_param_lists_name_the_problem(entries, expected):
    with pytest.raises(RunnerError) as e:
        ParamList(entries)
    assert expected in str(e.value)
