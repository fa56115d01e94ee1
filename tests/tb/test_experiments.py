"""Experiment discovery, wildcard selection and grouping by seed, on folders made by hand."""

import json

import pytest

from sfx_tb import TbError, find_experiments, group_by_seed, select_experiments
from sfx_tb.experiments import matches, name_without_seed, near_names, seed_from_name

BASE_CFG = {"env": "gym_CartPole-v1", "learning_rate": 0.001, "num_workers": 2, "seed": 1,
            "experiment": "x", "train_dir": "/somewhere", "command_line": "--seed=1", "explicit_args": ["seed"]}


def make_exp(root, name, cfg=None, summary=True):
    folder = root / name
    folder.mkdir(parents=True)
    if cfg is not None:
        (folder / "cfg.json").write_text(json.dumps(cfg))
    if summary:
        (folder / ".summary" / "0").mkdir(parents=True)
    return folder


def cfg(**overrides):
    return {**BASE_CFG, **overrides}


@pytest.fixture
def tree(tmp_path):
    make_exp(tmp_path, "cartpole", cfg(experiment="cartpole"))
    make_exp(tmp_path, "doom_basic_seed1", summary=True)
    for i, (seed, lr) in enumerate([(1, 0.001), (1, 0.003), (2, 0.001), (2, 0.003)]):
        make_exp(tmp_path, f"quickstart/{i:02d}_cartpole_see={seed}_lea={lr}",
                 cfg(seed=seed, learning_rate=lr, experiment=f"{i:02d}", train_dir=str(tmp_path / "quickstart"),
                     command_line=f"--seed={seed} --learning_rate={lr}"))
    # deeper: a run folder inside a project folder; and folders that are not experiments
    make_exp(tmp_path, "project/pbt/00_pbt_duel_see=5", summary=True)
    (tmp_path / "quickstart" / ".runner" / "logs").mkdir(parents=True)
    (tmp_path / "empty_folder").mkdir()
    return tmp_path


def test_find_experiments_walks_run_folders_but_not_into_experiments(tree):
    names = [e.name for e in find_experiments(tree)]
    assert names == ["cartpole", "doom_basic_seed1", "project/pbt/00_pbt_duel_see=5",
                     "quickstart/00_cartpole_see=1_lea=0.001", "quickstart/01_cartpole_see=1_lea=0.003",
                     "quickstart/02_cartpole_see=2_lea=0.001", "quickstart/03_cartpole_see=2_lea=0.003"]


def test_a_missing_dir_is_named_in_the_error(tmp_path):
    with pytest.raises(TbError, match="no_such_dir.*is not a folder"):
        find_experiments(tmp_path / "no_such_dir")


@pytest.mark.parametrize("pattern, expected", [
    ("*cartpole*", ["cartpole", "quickstart/00_cartpole_see=1_lea=0.001", "quickstart/01_cartpole_see=1_lea=0.003",
                    "quickstart/02_cartpole_see=2_lea=0.001", "quickstart/03_cartpole_see=2_lea=0.003"]),
    ("quickstart", ["quickstart/00_cartpole_see=1_lea=0.001", "quickstart/01_cartpole_see=1_lea=0.003",
                    "quickstart/02_cartpole_see=2_lea=0.001", "quickstart/03_cartpole_see=2_lea=0.003"]),
    ("*see=1*", ["quickstart/00_cartpole_see=1_lea=0.001", "quickstart/01_cartpole_see=1_lea=0.003"]),
    ("0[13]_*", ["quickstart/01_cartpole_see=1_lea=0.003", "quickstart/03_cartpole_see=2_lea=0.003"]),
    ("*pbt*", ["project/pbt/00_pbt_duel_see=5"]),
    ("project", ["project/pbt/00_pbt_duel_see=5"]),
    ("cartpole", ["cartpole"]),
    ("*doom*,cartpole", ["cartpole", "doom_basic_seed1"]),
])
def test_patterns_select_experiments_through_nested_run_folders(tree, pattern, expected):
    chosen, missing = select_experiments([pattern], tree)
    assert [e.name for e in chosen] == expected and missing == []


def test_several_patterns_select_each_experiment_once(tree):
    chosen, _ = select_experiments(["*see=1*", "quickstart/00_*"], tree)
    assert [e.name for e in chosen] == ["quickstart/00_cartpole_see=1_lea=0.001", "quickstart/01_cartpole_see=1_lea=0.003"]


def test_a_pattern_matching_nothing_says_so_with_near_names(tree):
    with pytest.raises(TbError) as info:
        select_experiments(["*cartpole*", "*catrpole_see=2*"], tree)
    message = str(info.value)
    assert "'*catrpole_see=2*' matches none of the 7 experiment folders" in message
    near = message.split("near names: ", 1)[1].split(", ")
    assert "quickstart/02_cartpole_see=2_lea=0.001" in near
    chosen, missing = select_experiments(["*cartpole*", "*doom_basc*"], tree, on_missing="warn")
    assert len(chosen) == 5 and len(missing) == 1 and "doom_basic_seed1" in missing[0]


def test_near_names_prefers_close_names():
    names = ["runs/00_doom_basic_see=1", "runs/01_doom_duel_see=1", "atari/00_breakout_see=1"]
    assert near_names("*doom_basik*", names)[0] == "runs/00_doom_basic_see=1"
    assert near_names("*", names) == names  # nothing to compare: the first names


def test_seed_pieces_of_folder_names():
    assert seed_from_name("00_cartpole_see=3_lea=0.001") == 3
    assert seed_from_name("cartpole_seed=12") == 12
    assert seed_from_name("00_cartpole_seed_o=3") is None  # seed_offset, not the seed
    assert name_without_seed("quickstart/01_cartpole_see=1_lea=0.001") == "quickstart/cartpole_lea=0.001"
    assert name_without_seed("cartpole_seed=2") == "cartpole"
    assert name_without_seed("007") == "007"


def test_groups_from_cfg_ignore_seed_and_bookkeeping_keys(tree):
    chosen, _ = select_experiments(["quickstart"], tree)
    groups = {e.name: e.group for e in chosen}
    assert groups == {"quickstart/00_cartpole_see=1_lea=0.001": "quickstart/cartpole_lea=0.001",
                      "quickstart/01_cartpole_see=1_lea=0.003": "quickstart/cartpole_lea=0.003",
                      "quickstart/02_cartpole_see=2_lea=0.001": "quickstart/cartpole_lea=0.001",
                      "quickstart/03_cartpole_see=2_lea=0.003": "quickstart/cartpole_lea=0.003"}
    assert [e.seed for e in chosen] == [1, 1, 2, 2]


def test_cfg_decides_over_folder_names(tmp_path):
    # same name pattern, but the cfgs differ in more than the seed: two groups, told apart in the label
    make_exp(tmp_path, "r/00_ppo_see=1", cfg(seed=1, gamma=0.99))
    make_exp(tmp_path, "r/01_ppo_see=2", cfg(seed=2, gamma=0.99))
    make_exp(tmp_path, "r/02_ppo_see=3", cfg(seed=3, gamma=0.9))
    # names that share nothing, cfgs equal but for the seed: one group
    make_exp(tmp_path, "r/alpha", cfg(seed=7, experiment="alpha"))
    make_exp(tmp_path, "r/beta", cfg(seed=8, experiment="beta"))
    groups = group_by_seed(find_experiments(tmp_path))
    members = {label: sorted(e.name for e in exps) for label, exps in groups.items()}
    assert members == {"r/ppo [gamma=0.99]": ["r/00_ppo_see=1", "r/01_ppo_see=2"],
                       "r/ppo [gamma=0.9]": ["r/02_ppo_see=3"],
                       "r/alpha": ["r/alpha", "r/beta"]}


def test_equal_cfgs_in_different_run_folders_are_different_groups(tmp_path):
    make_exp(tmp_path, "run_a/00_x_see=1", cfg(seed=1))
    make_exp(tmp_path, "run_b/00_x_see=2", cfg(seed=2))
    assert set(group_by_seed(find_experiments(tmp_path))) == {"run_a/x", "run_b/x"}


def test_without_cfg_the_folder_name_less_its_seed_groups(tmp_path):
    for name in ["s/00_ppo_see=1_lea=0.1", "s/01_ppo_see=2_lea=0.1", "s/02_ppo_see=1_lea=0.2", "solo"]:
        make_exp(tmp_path, name)
    exps = find_experiments(tmp_path)
    groups = group_by_seed(exps)
    assert {k: [e.name for e in v] for k, v in groups.items()} == {
        "s/ppo_lea=0.1": ["s/00_ppo_see=1_lea=0.1", "s/01_ppo_see=2_lea=0.1"],
        "s/ppo_lea=0.2": ["s/02_ppo_see=1_lea=0.2"],
        "solo": ["solo"]}
    assert [e.seed for e in exps] == [1, 2, 1, None]


def test_an_unreadable_cfg_falls_back_to_the_name(tmp_path):
    folder = make_exp(tmp_path, "r/00_x_see=4")
    (folder / "cfg.json").write_text("{ half written")
    (exp,) = find_experiments(tmp_path)
    assert exp.cfg is None and exp.seed == 4


def test_matches_tries_name_leaf_and_run_folders():
    assert matches("quick*", "quickstart/00_a")
    assert matches("00_*", "quickstart/00_a")
    assert matches("*/00_a", "quickstart/00_a")
    assert not matches("00", "quickstart/00_a")
