"""The 57 Atari games, 3 seeds each (171 experiments), 200M frames per experiment.

    python -m sfx.runner.run --run=runs.atari --runner=slurm --slurm_gpus_per_job=1 --slurm_cpus_per_gpu=16
    python -m sfx.runner.run --run=runs.atari --only=breakout,pong --runner=processes --max_parallel=2

Protocol: the ``atari_`` family's defaults (sticky actions p=0.25, episodic life while training,
84x84x4 gray frames, reward clip 1); add ``--atari_sticky_actions=False`` to CMD for comparisons with
papers that used the deterministic v4 games. Feed-forward policy with long rollouts, as usual for
Atari. Names start with the game, so ``--only=<game>`` picks one.
"""

from sfx_runner import Experiment, ParamGrid, RunDescription

SEEDS = [1, 2, 3]

# the usual 57-game benchmark (sfx.envs.atari.ATARI_57; kept here as data so this module imports nothing)
GAMES = (
    "alien", "amidar", "assault", "asterix", "asteroids", "atlantis", "bank_heist", "battle_zone", "beam_rider",
    "berzerk", "bowling", "boxing", "breakout", "centipede", "chopper_command", "crazy_climber", "defender",
    "demon_attack", "double_dunk", "enduro", "fishing_derby", "freeway", "frostbite", "gopher", "gravitar", "hero",
    "ice_hockey", "jamesbond", "kangaroo", "krull", "kung_fu_master", "montezuma_revenge", "ms_pacman",
    "name_this_game", "phoenix", "pitfall", "pong", "private_eye", "qbert", "riverraid", "road_runner", "robotank",
    "seaquest", "skiing", "solaris", "space_invaders", "star_gunner", "surround", "tennis", "time_pilot",
    "tutankham", "up_n_down", "venture", "video_pinball", "wizard_of_wor", "yars_revenge", "zaxxon",
)

CMD = ("python -m sfx.train --train_for_env_steps=200000000 --num_workers=16 --num_envs_per_worker=8 "
       "--worker_num_splits=2 --use_rnn=False --rollout=128 --batch_size=1024 --ppo_epochs=2 "
       "--learning_rate=0.00025 --exploration_loss_coeff=0.01 --max_grad_norm=0.5")

RUN_DESCRIPTION = RunDescription("atari", experiments=[
    Experiment(game, f"{CMD} --env=atari_{game}", ParamGrid([("seed", SEEDS)])) for game in GAMES
])
